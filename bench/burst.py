"""Burst benchmark: a publisher that never waits for PUBACKs, one subscriber reading at full speed.

Run: `.venv/bin/python -m bench.burst [--count 20000] [--brokers mosquitto,outpost]`

How this works: for each broker (started fresh, pinned to CPU 0, with its *default* limits:
outpost's 1,000-message drop-oldest queue, mosquitto's own defaults) one QoS 1 subscriber
connects and reads (and acknowledges) as fast as it can in a thread, and one MQTT 3.1.1
publisher writes `count` QoS 1 PUBLISH packets in a loop without waiting for any PUBACK (what
`publish()` in a loop does in MQTT.js or similar clients; a second thread only counts the
PUBACKs). When every PUBLISH is acknowledged and the subscriber has received them all, or has
received nothing new for `--idle` seconds, the figures are: acknowledged, delivered, lost, and
the delivery rate. A broker with backpressure stops reading the publisher while the
subscriber's queue is full, so nothing acknowledged is dropped.
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import wire
from bench.compare import HOST, BrokerSetup

TOPIC = "burst/t"
# Default limits on both sides: nothing but a listener and no persistence.
MOSQUITTO_CONF = "listener {port} {host}\nallow_anonymous true\npersistence false\n"
OUTPOST_CONF = '[storage]\ndurability = "memory"\n[status]\nenabled = false\n'


@dataclass(frozen=True)
class DefaultLimitsSetup(BrokerSetup):
    """`bench.compare`'s broker start-up, with each broker's default limits."""

    python: str = sys.executable

    def command(self, name: str, port: int) -> list[str]:
        conf = self.workdir / f"{name}-{port}.conf"
        if name == "mosquitto":
            conf.write_text(MOSQUITTO_CONF.format(port=port, host=HOST))
            return [self.mosquitto, "-c", str(conf)]
        if name == "outpost":
            conf.write_text(OUTPOST_CONF)
            return [self.python, "-m", "outpost", "run", "--listen", f"{HOST}:{port}",
                    "--config", str(conf)]
        raise ValueError(f"unknown broker {name!r}")


def _client(port: int, client_id: str) -> socket.socket:
    sock = socket.create_connection((HOST, port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.sendall(wire.connect(client_id))
    if _read_packet(sock)[0] != 0x20:
        raise RuntimeError(f"{client_id}: no CONNACK")
    return sock


def _read_packet(sock: socket.socket) -> bytes:
    data = b""
    while True:
        found = wire.split_packet(data, 0)
        if found is not None:
            return data[: found[2]]
        chunk = sock.recv(4096)
        if not chunk:
            raise RuntimeError("connection closed")
        data += chunk


class Counter:
    """Packets of one kind read from a socket by a thread (PUBLISHes are acknowledged)."""

    def __init__(self, sock: socket.socket, kind: int, ack: bool) -> None:
        self.sock = sock
        self.kind = kind
        self.ack = ack
        self.count = 0
        self.last_change = time.monotonic()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        buffer = bytearray()
        self.sock.settimeout(0.2)
        while not self.stop.is_set():
            try:
                chunk = self.sock.recv(1 << 20)
            except TimeoutError:
                continue
            except OSError:
                return
            if not chunk:
                return
            buffer += chunk
            acks = bytearray()
            pos = 0
            while (found := wire.split_packet(buffer, pos)) is not None:
                first, body, end = found
                if first >> 4 == self.kind:
                    self.count += 1
                    if self.ack and (first >> 1) & 3:
                        topic_len = int.from_bytes(buffer[body:body + 2], "big")
                        pid = int.from_bytes(buffer[body + 2 + topic_len:body + 4 + topic_len],
                                             "big")
                        acks += wire.puback(pid)
                pos = end
            del buffer[:pos]
            if acks:
                self.sock.sendall(acks)
            self.last_change = time.monotonic()


def run_burst(port: int, count: int, payload_size: int, idle: float) -> dict[str, Any]:
    """One burst against a running broker; returns the figures."""
    sub = _client(port, "burst-sub")
    sub.sendall(wire.subscribe(1, TOPIC, 1))
    if _read_packet(sub)[0] != 0x90:
        raise RuntimeError("no SUBACK")
    pub = _client(port, "burst-pub")
    delivered = Counter(sub, wire.PUBLISH, ack=True)
    acked = Counter(pub, wire.PUBACK, ack=False)
    payload = b"x" * payload_size
    packets = [wire.publish(TOPIC, payload, 1, i + 1) for i in range(count)]
    start = time.monotonic()
    for packet in packets:
        pub.sendall(packet)
    sent = time.monotonic()
    while True:
        time.sleep(0.05)
        now = time.monotonic()
        if delivered.count >= count and acked.count >= count:
            break
        if now - max(delivered.last_change, acked.last_change) > idle:
            break
    end = max(delivered.last_change, acked.last_change)
    for counter in (delivered, acked):
        counter.stop.set()
        counter.thread.join()
    pub.close()
    sub.close()
    seconds = max(end - start, 1e-9)
    return {
        "count": count, "acknowledged": acked.count, "delivered": delivered.count,
        "lost": acked.count - delivered.count, "write_seconds": round(sent - start, 3),
        "seconds": round(seconds, 3), "delivered_per_s": round(delivered.count / seconds),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--brokers", default="mosquitto,outpost")
    parser.add_argument("--count", type=int, default=20_000)
    parser.add_argument("--payload", type=int, default=64, help="payload bytes")
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--idle", type=float, default=3.0,
                        help="seconds without progress that end a run")
    parser.add_argument("--broker-cpu", default="0", help="CPU for the broker; 'none'")
    parser.add_argument("--json", type=Path, help="append one JSON line per run here")
    args = parser.parse_args(argv)
    cpu = None if args.broker_cpu == "none" else int(args.broker_cpu)
    with tempfile.TemporaryDirectory(prefix="bench-burst-") as tmp:
        setup = DefaultLimitsSetup(Path(tmp), broker_cpu=cpu)
        for run in range(1, args.runs + 1):
            for name in args.brokers.split(","):
                broker = setup.start(name)
                try:
                    result = run_burst(broker.port, args.count, args.payload, args.idle)
                finally:
                    broker.stop()
                result.update(broker=name, run=run)
                print(f"run {run} {name:10s} acknowledged {result['acknowledged']:6d} "
                      f"delivered {result['delivered']:6d} / {args.count} "
                      f"({result['delivered_per_s']}/s, {result['seconds']} s)", flush=True)
                if args.json is not None:
                    with args.json.open("a") as out:
                        out.write(json.dumps(result) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
