"""Reconnect of a session with 1,000,000 queued messages: time to first message, flat RSS.

    .venv/bin/python -m bench.storage.reconnect [--queued 1000000] [--drain 300000]

1. A store is built with one persistent session `bench-rc-sub` (subscribed to `bench/rc/#`
   at QoS 1, offline) and `--queued` queued 64-byte QoS 1 messages (`bench.storage.prefill`).
2. outpost starts on it (`durability = "full"`, default `queue_page` 1000); the time until it
   answers a CONNECT includes restoring the session and counting the spilled queue.
3. The subscriber reconnects (clean session 0) and PUBACKs everything in bulk; figures: time
   from sending CONNECT to the first PUBLISH, messages per second while draining `--drain`
   messages, and the broker's VmRSS sampled every 0.5 s, next to the RSS of the same broker
   with an empty store (the queue must not be in memory).
"""

from __future__ import annotations

import argparse
import os
import socket
import tempfile
import time
from pathlib import Path

from bench import wire
from bench.storage import common, prefill

CONFIG = """\
[limits]
max_queued_messages = 100000000
max_queued_bytes = 100000000000

[status]
enabled = false
"""


def drain(port: int, count: int, pid: int) -> dict[str, object]:
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    t0 = time.monotonic()
    sock.sendall(wire.connect("bench-rc-sub", clean=False))
    buf = bytearray()
    first_publish = None
    got = 0
    rss: list[int] = []
    next_sample = t0
    while got < count:
        if time.monotonic() >= next_sample:
            rss.append(common.rss_kib(pid))
            next_sample += 0.5
        chunk = sock.recv(1 << 18)
        if not chunk:
            raise ConnectionError("broker closed the connection")
        buf += chunk
        publishes, acks = common.ack_publishes(buf)
        if publishes and first_publish is None:
            first_publish = time.monotonic()
        got += publishes
        if acks:
            sock.sendall(b"".join(acks))
    elapsed = time.monotonic() - (first_publish or t0)
    sock.sendall(wire.DISCONNECT)
    sock.close()
    rss.append(common.rss_kib(pid))
    return {
        "first_message_ms": round(((first_publish or t0) - t0) * 1000, 1),
        "drained": got, "drain_msg_per_s": round(got / elapsed),
        "rss_kib_min": min(rss), "rss_kib_max": max(rss), "rss_kib_end": rss[-1],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--queued", type=int, default=1_000_000)
    parser.add_argument("--drain", type=int, default=300_000)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    result: dict[str, object] = {"queued": args.queued}
    with tempfile.TemporaryDirectory(prefix="outpost-rc-", dir=os.environ.get("BENCH_DIR")) as t:
        tmp = Path(t)
        empty = common.start_outpost(tmp / "empty", tmp / "empty-state", CONFIG)
        result["rss_kib_empty_store"] = common.rss_kib(empty.pid)
        empty.stop()
        state = tmp / "state"
        result["prefill_s"] = round(prefill.fill(
            state, [("bench-rc-sub", "bench/rc/#")], args.queued), 1)
        result["db_bytes"] = common.dir_bytes(state)
        broker = common.start_outpost(tmp / "run", state, CONFIG)
        try:
            result["start_to_accepting_s"] = round(broker.ready - broker.started, 2)
            result["rss_kib_after_start"] = common.rss_kib(broker.pid)
            result.update(drain(broker.port, min(args.drain, args.queued), broker.pid))
        finally:
            broker.stop()
    common.report(result, args.json)


if __name__ == "__main__":
    main()
