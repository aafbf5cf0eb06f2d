"""Bytes written to disk per 64-byte message at a steady rate, checkpoints included.

    .venv/bin/python -m bench.storage.write_amp [--rate 1000] [--duration 60]
        [--subscriber offline|online] [--durability full] [--commit-interval-ms 2]
        [--ack-hold-ms 1000]
        [--page-size N] [--wal-autocheckpoint N]

One QoS 1 publisher sends 64-byte payloads at `--rate` msg/s on an absolute schedule (up to
`--window` in flight) to `bench/wa/1`; one persistent session subscribed at QoS 1 is either
offline (every message is queued on disk: the worst case) or online and acknowledging (each
message is stored and completed; the store only writes what a commit still holds). The figure
is the growth of the broker's `/proc/PID/io` `write_bytes` over the measured window divided
by the messages acknowledged in it. `write_bytes` counts what the process made the kernel
write to the block device (page cache write-back included), so WAL appends, fsyncs of
partially filled pages and checkpoints into the main file are all in it.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import tempfile
import threading
import time
from pathlib import Path

from bench.procstat import cpu_seconds
from bench.storage import common

CONFIG = """\
[limits]
max_queued_messages = 100000000
max_queued_bytes = 100000000000

[storage]
durability = "{durability}"
commit_interval_ms = {interval}
ack_hold_ms = {ack_hold}

[status]
enabled = false
"""


def online_subscriber(port: int, stop: threading.Event, got: list[int]) -> None:
    """Reconnect the persistent session and PUBACK everything in bulk."""
    c = common.Client(port, "bench-wa-sub0", clean=False)
    sock = c.sock
    sock.settimeout(0.2)
    buf = bytearray()
    while not stop.is_set():
        try:
            chunk = sock.recv(1 << 16)
        except TimeoutError:
            continue
        if not chunk:
            break
        buf += chunk
        _, acks = common.ack_publishes(buf)
        got[0] += len(acks)
        if acks:
            sock.sendall(b"".join(acks))
    c.close()


def run(args: argparse.Namespace, workdir: Path) -> dict[str, object]:
    state = workdir / "state"
    state.mkdir(parents=True)
    tuning: list[str] = []
    if args.page_size:
        tuning += ["--page-size", str(args.page_size)]
    if args.wal_autocheckpoint:
        tuning += ["--wal-autocheckpoint", str(args.wal_autocheckpoint)]
    broker = common.start_outpost(
        workdir, state, CONFIG.format(durability=args.durability,
                                      interval=args.commit_interval_ms,
                                      ack_hold=args.ack_hold_ms),
        tuning=tuple(tuning))
    try:
        common.prepare_offline_sessions(broker.port, "bench-wa-sub", 1, "bench/wa/#")
        stop_sub = threading.Event()
        got = [0]
        sub = None
        if args.subscriber == "online":
            sub = threading.Thread(target=online_subscriber, args=(broker.port, stop_sub, got))
            sub.start()
        ctx = multiprocessing.get_context("fork")
        acked = ctx.Value("q", 0)
        stop = ctx.Event()
        cpus = set(range(1, os.cpu_count() or 2)) or None
        pub = ctx.Process(target=common.publisher_loop, args=(
            broker.port, "bench-wa-pub", "bench/wa/1", b"x" * 64, args.window, args.rate,
            acked, stop, cpus))
        pub.start()
        time.sleep(args.warmup)
        a0, w0, c0, t0 = (acked.value, common.write_bytes(broker.pid),
                          cpu_seconds(broker.pid), time.monotonic())
        time.sleep(args.duration)
        a1, w1, c1, t1 = (acked.value, common.write_bytes(broker.pid),
                          cpu_seconds(broker.pid), time.monotonic())
        stop.set()
        pub.join(10)
        stop_sub.set()
        if sub is not None:
            sub.join(10)
        messages = a1 - a0
        result: dict[str, object] = {
            "subscriber": args.subscriber, "durability": args.durability,
            "commit_interval_ms": args.commit_interval_ms, "ack_hold_ms": args.ack_hold_ms,
            "page_size": args.page_size or "default", "wal_autocheckpoint":
                args.wal_autocheckpoint or "default",
            "rate": round(messages / (t1 - t0)), "messages": messages,
            "write_bytes": w1 - w0, "bytes_per_msg": round((w1 - w0) / max(1, messages)),
            "broker_cpu_pct": round(100 * (c1 - c0) / (t1 - t0)),
            "db_files_bytes": common.dir_bytes(state),
        }
    finally:
        broker.stop()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rate", type=float, default=1000.0)
    parser.add_argument("--duration", type=float, default=60.0)
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--window", type=int, default=200)
    parser.add_argument("--subscriber", choices=("offline", "online"), default="offline")
    parser.add_argument("--durability", choices=("full", "normal"), default="full")
    parser.add_argument("--commit-interval-ms", type=float, default=2.0)
    parser.add_argument("--ack-hold-ms", type=float, default=1000.0)
    parser.add_argument("--page-size", type=int, default=0)
    parser.add_argument("--wal-autocheckpoint", type=int, default=0)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="outpost-wa-", dir=os.environ.get("BENCH_DIR")) as tmp:
        result = run(args, Path(tmp))
    common.report(result, args.json)


if __name__ == "__main__":
    main()
