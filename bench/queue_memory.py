"""What queued messages really cost: RSS of `outpost run` before and after filling one offline
session's queue (docs/security.md has the figures).

    python -m bench.queue_memory [--messages 400000 --size 1024 --max-queued-bytes 1073741824]
    python -m bench.queue_memory ... --tree /path/to/another/checkout

A persistent 3.1.1 subscriber subscribes to `q/#` at QoS 1 and disconnects; a publisher then
sends `--messages` QoS 1 PUBLISHes of `--size` payload bytes (pipelined, `--window` in flight)
and the broker queues them for the offline session (no store: memory durability; the queue's
overflow policy drops what is over the caps). The figures: RSS when idle (after the
subscription), RSS after the publisher is done, the growth against `--max-queued-bytes`, and
the growth per message sent against its topic + payload.
"""

from __future__ import annotations

import argparse
import socket
import sys
import time
from pathlib import Path

from bench import wire
from bench.attack import ROOT, broker
from bench.procstat import rss_kib


def _connect(port: int, client_id: str, clean: bool) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    sock.sendall(wire.connect(client_id, clean=clean))
    assert sock.recv(4)[:2] == b"\x20\x02"
    return sock


def _read_acks(sock: socket.socket, buffer: bytearray) -> int:
    """Read what is there; returns how many complete 4-byte PUBACKs it held."""
    buffer += sock.recv(1 << 20)
    count = len(buffer) // 4
    del buffer[:count * 4]
    return count


def fill(port: int, messages: int, size: int, window: int) -> None:
    sub = _connect(port, "queue-sub", clean=False)
    sub.sendall(wire.subscribe(1, "q/#", 1))
    sub.recv(5)
    sub.sendall(b"\xe0\x00")  # DISCONNECT: the session stays, offline
    sub.close()
    pub = _connect(port, "queue-pub", clean=True)
    payload = b"x" * size
    acked = sent = 0
    buffer = bytearray()
    while acked < messages:
        while sent < messages and sent - acked < window:
            pub.sendall(wire.publish("q/data", payload, 1, sent % 65535 + 1))
            sent += 1
        acked += _read_acks(pub, buffer)
    pub.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", type=Path, default=ROOT)
    parser.add_argument("--messages", type=int, default=400_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--max-queued-bytes", type=int, default=1 << 30)
    parser.add_argument("--max-queued-total-bytes", type=int, default=0,
                        help="the process-wide budget (0: the broker's default)")
    parser.add_argument("--window", type=int, default=500)
    args = parser.parse_args()
    limits = (f"[limits]\nmax_queued_messages = {args.messages * 2}\n"
              f"max_queued_bytes = {args.max_queued_bytes}\nmax_inflight = 1000\n")
    if args.max_queued_total_bytes:
        limits += f"max_queued_total_bytes = {args.max_queued_total_bytes}\n"
    cap = min(args.max_queued_bytes, args.max_queued_total_bytes or args.max_queued_bytes)
    with broker(args.tree.resolve(), limits) as running:
        pid = running.process.pid
        time.sleep(1.0)
        idle = rss_kib(pid)
        started = time.monotonic()
        fill(running.port, args.messages, args.size, args.window)
        time.sleep(1.0)
        full = rss_kib(pid)
        seconds = time.monotonic() - started
    raw = len("q/data") + args.size
    growth = (full - idle) * 1024
    print(f"messages={args.messages} size={args.size} cap_mib={cap >> 20} "
          f"rss_idle_mib={idle / 1024:.0f} rss_full_mib={full / 1024:.0f} "
          f"growth_over_cap={growth / cap:.2f} "
          f"growth_per_message_b={growth / args.messages:.0f} topic_payload_b={raw} "
          f"fill_seconds={seconds:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
