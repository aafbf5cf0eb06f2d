"""PUBACK latency a real client feels with durable acknowledgements (the ack hold).

    .venv/bin/python -m bench.storage.ack_latency [--rate 10] [--inflight 20]
        [--lock-step] [--duration 10] [--ack-hold-ms 1000]

One paho-mqtt client publishes 64-byte QoS 1 messages at `--rate` msg/s on an absolute
schedule to `outpost run` with `durability = "full"`: either pipelined (paho's own window of
`--inflight` unacknowledged messages) or lock-step (`wait_for_publish()` after every
message). Prints the rate it kept and the time from `publish()` to its PUBACK (p50, p99,
max). With `ack_hold_ms` a slow pipelining publisher's PUBACKs wait for company (up to the
hold) while its rate is kept; a lock-step publisher's do not (docs/storage.md).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import paho.mqtt.client as mqtt

from bench.loadgen import percentile
from bench.storage import common

CONFIG = """\
[storage]
durability = "full"
ack_hold_ms = {ack_hold}

[status]
enabled = false
"""


def publish(port: int, args: argparse.Namespace) -> dict[str, object]:
    """Publish for `args.duration` seconds; the acknowledgement latencies and kept rate."""
    client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="bench-ack-latency")
    client.max_inflight_messages_set(args.inflight)
    sent: dict[int, float] = {}  # mid -> when publish() was called
    acked: dict[int, float] = {}  # mid -> when its PUBACK was handled

    def on_publish(_c: object, _u: object, mid: int, _rc: object, _p: object) -> None:
        acked[mid] = time.monotonic()  # may run before publish() has returned the mid

    client.on_publish = on_publish
    client.connect("127.0.0.1", port)
    client.loop_start()
    start = time.monotonic()
    n = 0
    while time.monotonic() - start < args.duration:
        delay = start + n / args.rate - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        called = time.monotonic()
        info = client.publish("bench/ack", b"x" * 64, qos=1)
        sent[info.mid] = called
        if args.lock_step:
            info.wait_for_publish(10)
        n += 1
    elapsed = time.monotonic() - start
    deadline = time.monotonic() + 10
    while len(acked) < len(sent) and time.monotonic() < deadline:
        time.sleep(0.01)
    client.loop_stop()
    client.disconnect()
    latencies = sorted(acked[mid] - t for mid, t in sent.items() if mid in acked)
    ms = [round(1000 * x, 1) for x in latencies] or [0.0]
    return {
        "mode": "lock-step" if args.lock_step else f"pipelined ({args.inflight} in flight)",
        "ack_hold_ms": args.ack_hold_ms, "offered_rate": args.rate,
        "published": n, "rate": round(n / elapsed, 1), "acknowledged": len(latencies),
        "ack_p50_ms": percentile(ms, 0.50), "ack_p99_ms": percentile(ms, 0.99),
        "ack_max_ms": ms[-1],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rate", type=float, default=10.0)
    parser.add_argument("--inflight", type=int, default=20)
    parser.add_argument("--lock-step", action="store_true")
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--ack-hold-ms", type=float, default=1000.0)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="outpost-ack-", dir=os.environ.get("BENCH_DIR")) as tmp:
        work = Path(tmp)
        broker = common.start_outpost(work, work / "state",
                                      CONFIG.format(ack_hold=args.ack_hold_ms))
        try:
            result = publish(broker.port, args)
        finally:
            broker.stop()
    common.report(result, args.json)


if __name__ == "__main__":
    main()
