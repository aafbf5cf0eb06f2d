"""Durable QoS 1 throughput into offline persistent sessions, outpost vs mosquitto.

    .venv/bin/python -m bench.storage.throughput [--duration 10] [--publishers 4]
        [--sessions 1] [--window 500] [--brokers outpost,mosquitto,mosquitto-zero-loss]

Every broker gets `--sessions` persistent sessions (clean session 0) subscribed to
`bench/dur/#` at QoS 1 that then disconnect, so every message is queued for them. Then
`--publishers` QoS 1 publishers (forked processes, `--window` PUBLISHes in flight each, a new
one per PUBACK) publish 64-byte payloads; the figure is PUBACKs per second over the measured
window after a warm-up.

- outpost: `--state-dir`, `[storage] durability = "full"` (fsync per group commit): a PUBACK
  means the message is in the WAL on disk.
- mosquitto (default persistence): `persistence true`, autosave every 1800 s: PUBACKs come
  from memory; a kill loses everything since the last save.
- mosquitto-zero-loss: `autosave_on_changes true`, `autosave_interval 1`: the whole database
  is rewritten after every change, the only mosquitto setting that does not lose
  acknowledged messages on a crash.

The broker runs on CPU 0, the publishers on the other CPUs.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import tempfile
import time
from pathlib import Path

from bench.procstat import cpu_seconds
from bench.storage import common

MOSQUITTO_CONF = {
    "mosquitto": "persistence true\npersistence_location {dir}/\nmax_queued_messages 0\n"
                 "max_inflight_messages 64\n",
    "mosquitto-zero-loss": "persistence true\npersistence_location {dir}/\n"
                           "autosave_on_changes true\nautosave_interval 1\n"
                           "max_queued_messages 0\nmax_inflight_messages 64\n",
}

OUTPOST_CONF = """\
[limits]
max_queued_messages = 100000000
max_queued_bytes = 100000000000

[storage]
durability = "{durability}"
commit_interval_ms = {interval}
"""


def run_one(name: str, args: argparse.Namespace, workdir: Path) -> dict[str, object]:
    state = workdir / "state"
    state.mkdir(parents=True, exist_ok=True)
    if name == "outpost":
        broker = common.start_outpost(
            workdir, state, OUTPOST_CONF.format(durability=args.durability,
                                                interval=args.commit_interval_ms))
    else:
        broker = common.start_mosquitto(workdir, MOSQUITTO_CONF[name].format(dir=state))
    try:
        common.prepare_offline_sessions(broker.port, "bench-dur-sub-", args.sessions,
                                        "bench/dur/#")
        ctx = multiprocessing.get_context("fork")
        acked = ctx.Value("q", 0)
        stop = ctx.Event()
        cpus = set(range(1, os.cpu_count() or 2)) or None
        procs = [
            ctx.Process(target=common.publisher_loop, args=(
                broker.port, f"bench-dur-pub-{n}", f"bench/dur/{n}", b"x" * 64, args.window,
                0.0, acked, stop, cpus))
            for n in range(args.publishers)
        ]
        for p in procs:
            p.start()
        time.sleep(args.warmup)
        a0, c0, w0, t0 = acked.value, cpu_seconds(broker.pid), common.write_bytes(
            broker.pid), time.monotonic()
        time.sleep(args.duration)
        a1, c1, w1, t1 = acked.value, cpu_seconds(broker.pid), common.write_bytes(
            broker.pid), time.monotonic()
        stop.set()
        for p in procs:
            p.join(10)
        rate = (a1 - a0) / (t1 - t0)
        result = {
            "broker": name, "acked_per_s": round(rate), "acked": a1 - a0,
            "broker_cpu_pct": round(100 * (c1 - c0) / (t1 - t0)),
            "write_bytes_per_msg": round((w1 - w0) / max(1, a1 - a0)),
            "disk_bytes": common.dir_bytes(state),
        }
    finally:
        broker.stop()
    print(json.dumps(result), flush=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--brokers", default="outpost,mosquitto,mosquitto-zero-loss")
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--warmup", type=float, default=2.0)
    parser.add_argument("--publishers", type=int, default=4)
    parser.add_argument("--sessions", type=int, default=1)
    parser.add_argument("--window", type=int, default=500)
    parser.add_argument("--durability", default="full")
    parser.add_argument("--commit-interval-ms", type=float, default=2.0)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory(prefix="outpost-bench-") as tmp:
        for name in args.brokers.split(","):
            results.append(run_one(name, args, Path(tmp) / name))
    if args.json:
        args.json.write_text(json.dumps({"options": vars(args) | {"json": str(args.json)},
                                         "results": results}, indent=2))


if __name__ == "__main__":
    main()
