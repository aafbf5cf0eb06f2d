"""Fleet benchmark: simulated gateways → mosquitto → landers → silver, against a plain subscriber.

    .venv/bin/python -m bench.fleet.run [--gateways 100] [--backlog 40000] [--landers 2]
        [--rate 1000] [--seconds 15] [--roll-seconds 1] [--no-silver] [--json FILE]
        [--batched [--batch-count 1000] [--batch-bytes 65536] [--batch-delay 1.0]
                   [--compression zstd]]

How this works, in one run on one machine:

1. **Backlog drain.** A mosquitto it starts (queues unlimited, no persistence). Three
   persistent sessions subscribe ``outpost/#`` and go away: a plain paho-mqtt subscriber that
   acks at once (:mod:`bench.fleet.plain_sub`), one lander alone, and two landers in one
   ``$share`` group. ``--gateways`` simulated gateways (:mod:`bench.fleet.gateways`: the
   uplink's per-message wire format, MQTT 5 user properties) publish ``--backlog`` points,
   which the broker queues once per session (for the group: once, split between its two
   members). Then each consumer drains its copy in turn, timed from its CONNACK to its last
   message (the landers: to the commit that holds it): drain rate, the lander's CPU per
   10,000 points, its peak resident memory and the most messages it held at once, and the
   ratios lander / plain and two landers / one.
2. **Live fleet.** A fresh mosquitto, ``--landers`` landers in one group with
   ``--roll-seconds``, and the gateways publishing ``--rate`` points per second in all for
   ``--seconds`` over MQTT 5, then a tenth as many over MQTT 3.1.1 (JSON envelope): bytes on
   the wire per point for each (counted at the gateways' sockets, both directions, PUBACKs
   included), points landed per second, and the end-to-end latency of every point from the
   gateway handing it to its socket to the commit of the bronze file holding it (the file's
   modification time) as percentiles.
3. **Silver.** ``silver`` and ``quality`` on the live run's landing (local Spark): rows,
   duplicates removed, and the missing seqs over every gateway epoch (0: nothing lost).

``--batched``: the gateways publish the uplink's batched format instead (its own
``plan`` and ``encode``, the uplink's ``batch`` defaults unless given; same gateway ids,
epochs and consecutive seqs, so ``quality`` still proves nothing is missing). Rates are
then in points (rows): a lander counts the rows of its committed files; the plain
subscriber counts messages, reported as messages/s and as the points/s they carry.
``lander_vs_plain`` compares the two on the same backlog (the ratio of drain times, so the
same in points and in messages).
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench.compare import free_port
from bench.fleet.gateways import Gateway, run_gateways
from bench.procstat import cpu_seconds
from bench.uplink.drain import wait_port
from bridge.uplink.config import BatchConfig
from cloud_spark.cli import job_params, run_job
from cloud_spark.spark import get_spark
from cloud_spark.tables import read_table

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = re.compile(r"committed \S+ \((\d+) records")
MOST_HELD = re.compile(r"most held at once: (\d+)")


class Proc:
    """A child process whose output lines are stamped with the time they arrived."""

    def __init__(self, cmd: list[str], stream: str = "stderr") -> None:
        self.proc = subprocess.Popen(
            cmd, cwd=ROOT, text=True,
            stdout=subprocess.PIPE if stream == "stdout" else subprocess.DEVNULL,
            stderr=subprocess.PIPE if stream == "stderr" else subprocess.DEVNULL,
        )  # fmt: skip
        self.lines: list[tuple[float, str]] = []
        self.landed = 0
        self._cond = threading.Condition()
        pipe = self.proc.stdout if stream == "stdout" else self.proc.stderr
        self._thread = threading.Thread(target=self._read, args=(pipe,), daemon=True)
        self._thread.start()

    def _read(self, pipe: Any) -> None:
        for line in pipe:
            with self._cond:
                self.lines.append((time.monotonic(), line))
                if found := COMMITTED.search(line):
                    self.landed += int(found.group(1))
                self._cond.notify_all()

    def wait_line(self, text: str, timeout: float = 60.0) -> float:
        """The time the first line containing ``text`` arrived."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for stamp, line in self.lines:
                    if text in line:
                        return stamp
                left = deadline - time.monotonic()
                if left <= 0 or (self.proc.poll() is not None and not self._thread.is_alive()):
                    tail = "".join(line for _, line in self.lines[-20:])
                    raise SystemExit(f"never saw {text!r}:\n{tail}")
                self._cond.wait(min(left, 0.2))

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=60)
        self._thread.join(timeout=10)

    def grep(self, pattern: re.Pattern[str]) -> int | None:
        for _, line in self.lines:
            if found := pattern.search(line):
                return int(found.group(1))
        return None


def wait_landed(procs: list[Proc], count: int, timeout: float) -> float:
    """The time the landers' committed files first held ``count`` records in all."""
    deadline = time.monotonic() + timeout
    while sum(p.landed for p in procs) < count:
        if time.monotonic() > deadline:
            raise SystemExit(f"landed {sum(p.landed for p in procs)} of {count}")
        time.sleep(0.01)
    return max(p.lines[-1][0] for p in procs if p.lines)


def vm_hwm_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status", encoding="ascii") as handle:
        for line in handle:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return 0.0


class Mosquitto:
    def __init__(self, work: Path) -> None:
        work.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        config = work / "mosquitto.conf"
        config.write_text(
            f"listener {self.port} 127.0.0.1\nallow_anonymous true\npersistence false\n"
            "max_queued_messages 0\nmax_queued_bytes 0\nlog_dest stderr\nlog_type error\n"
            + ("user root\n" if os.geteuid() == 0 else "")
        )
        self.proc = subprocess.Popen(
            [shutil.which("mosquitto") or "/usr/sbin/mosquitto", "-c", str(config)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        wait_port(self.port)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)


def lander(port: int, root: Path, client_id: str, *flags: str) -> Proc:
    return Proc([
        sys.executable, "-m", "cloud_spark", "land", "--broker", f"127.0.0.1:{port}",
        "--topic", "outpost/#", "--root", str(root), "--client-id", client_id, *flags,
    ])  # fmt: skip


def plain(port: int, *flags: str) -> Proc:
    return Proc(
        [sys.executable, "-m", "bench.fleet.plain_sub", "--port", str(port), *flags], "stdout"
    )


def _per_point(gateways: list[Gateway]) -> float:
    sent = sum(g.stats.sent_bytes + g.stats.received_bytes for g in gateways)
    return sent / max(1, sum(g.stats.points for g in gateways))


def backlog_drain(work: Path, args: argparse.Namespace) -> dict[str, Any]:
    broker = Mosquitto(work / "mosquitto-backlog")
    port, n = broker.port, args.backlog
    try:
        sub = plain(port, "--client-id", "plain", "--subscribe-only")
        sub.wait_line("connected")
        sub.proc.wait(timeout=30)
        pair_flags = ("--share", "pair")
        for client_id, flags in (("solo", ()), ("pair-a", pair_flags), ("pair-b", pair_flags)):
            proc = lander(port, work / client_id, client_id, *flags)
            proc.wait_line("subscribed")
            proc.stop()
        each = max(1, n // args.gateways)
        n = each * args.gateways
        started = time.monotonic()
        gateways = asyncio.run(
            run_gateways("127.0.0.1", port, args.gateways, each, batching=args.batching)
        )
        published_s = time.monotonic() - started
        messages = sum(g.stats.messages for g in gateways)

        sub = plain(port, "--client-id", "plain", "--count", str(messages))
        t0 = sub.wait_line("connected")
        t1 = sub.wait_line("done", timeout=600)
        plain_rate = n / (t1 - t0)
        sub.proc.wait(timeout=30)

        solo = lander(port, work / "solo", "solo")
        t0 = solo.wait_line("connected as")
        cpu0 = cpu_seconds(solo.proc.pid)
        t1 = wait_landed([solo], n, timeout=600)
        cpu = cpu_seconds(solo.proc.pid) - cpu0
        rss = vm_hwm_mib(solo.proc.pid)
        solo.stop()
        solo_rate = n / (t1 - t0)

        pair = [lander(port, work / name, name, *pair_flags) for name in ("pair-a", "pair-b")]
        t0 = min(p.wait_line("connected as") for p in pair)
        t1 = wait_landed(pair, n, timeout=600)
        for proc in pair:
            proc.stop()
        pair_rate = n / (t1 - t0)
    finally:
        broker.stop()
    return {
        "backlog_points": n,
        "backlog_messages": messages,
        "gateways": args.gateways,
        "publish_points_per_s": round(n / published_s),
        "bytes_per_point_mqtt5": round(_per_point(gateways), 1),
        "plain_messages_per_s": round(plain_rate * messages / n),
        "plain_points_per_s": round(plain_rate),
        "lander_points_per_s": round(solo_rate),
        "lander_vs_plain": round(solo_rate / plain_rate, 3),
        "lander_vs_plain_is": "lander points/s / plain subscriber points/s, same backlog "
        "(= plain drain time / lander drain time)",
        "two_landers_points_per_s": round(pair_rate),
        "two_vs_one": round(pair_rate / solo_rate, 3),
        "two_vs_one_is": "two landers' points/s / one lander's points/s, same backlog",
        "lander_cpu_s_per_10k": round(cpu / n * 10_000, 3),
        "lander_peak_rss_mib": round(rss, 1),
        "lander_most_held": solo.grep(MOST_HELD),
    }


def _latencies_ms(root: Path) -> list[int]:
    out = []
    for path in root.glob("bronze/*/*/part-*.json.gz"):
        committed_ms = path.stat().st_mtime_ns // 1_000_000
        with gzip.open(path, "rt") as handle:
            out += [committed_ms - json.loads(line)["received_ms"] for line in handle]
    return sorted(out)


def _percentile(values: list[int], q: float) -> int:
    return values[min(len(values) - 1, int(q * len(values)))] if values else 0


def live_fleet(work: Path, args: argparse.Namespace) -> dict[str, Any]:
    broker = Mosquitto(work / "mosquitto-live")
    root = work / "live-landing"
    try:
        landers = [
            lander(broker.port, root, f"live-{i}", "--share", "live",
                   "--roll-seconds", str(args.roll_seconds))
            for i in range(args.landers)
        ]  # fmt: skip
        for proc in landers:
            proc.wait_line("subscribed")
        each = max(1, int(args.rate * args.seconds / args.gateways))
        started = time.monotonic()
        v5 = asyncio.run(
            run_gateways("127.0.0.1", broker.port, args.gateways, each,
                         points_per_s_each=args.rate / args.gateways, batching=args.batching)
        )  # fmt: skip
        names = [f"gw311-{i:05d}" for i in range(max(1, args.gateways // 10))]
        v311 = asyncio.run(
            run_gateways("127.0.0.1", broker.port, len(names), each, protocol=4, names=names,
                         batching=args.batching)
        )  # fmt: skip
        total = each * (len(v5) + len(v311))
        done = wait_landed(landers, total, timeout=300)
        for proc in landers:
            proc.stop()
    finally:
        broker.stop()
    latencies = _latencies_ms(root)
    return {
        "live_points": total,
        "landers": args.landers,
        "offered_points_per_s": args.rate,
        "landed_points_per_s": round(total / (done - started)),
        "bytes_per_point_mqtt5": round(_per_point(v5), 1),
        "bytes_per_point_mqtt311": round(_per_point(v311), 1),
        "roll_seconds": args.roll_seconds,
        "latency_ms": {f"p{int(q * 100)}": _percentile(latencies, q) for q in (0.5, 0.9, 0.99)}
        | {"max": latencies[-1] if latencies else 0},
        "landing": str(root),
    }


def silver_check(work: Path) -> dict[str, Any]:
    """silver + quality on the live landing, in a local Spark session."""
    spark = get_spark("fleet-bench", "local[2]", {})
    try:
        out = str(work / "tables")
        root = str(work / "live-landing")
        started = time.monotonic()
        silver = run_job("silver", spark, root, out, job_params("silver", argparse.Namespace()))
        run_job("quality", spark, None, out, job_params("quality", argparse.Namespace()))
        summary = read_table(spark, out, "seq_summary").collect()
        points = read_table(spark, out, "points").count()
        return {
            "silver_rows": silver["rows"],
            "silver_points": points,
            "duplicates_removed": silver["duplicates_removed"],
            "epochs": len(summary),
            "missing_seqs": sum(row["missing"] for row in summary),
            "silver_and_quality_s": round(time.monotonic() - started, 1),
        }
    finally:
        spark.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gateways", type=int, default=100)
    parser.add_argument("--backlog", type=int, default=40_000, help="points queued, drained")
    parser.add_argument("--landers", type=int, default=2, help="landers in the live run")
    parser.add_argument("--rate", type=float, default=1000.0, help="live points/s in all")
    parser.add_argument("--seconds", type=float, default=15.0, help="live run length")
    parser.add_argument("--roll-seconds", type=float, default=1.0, help="the live landers'")
    parser.add_argument("--no-silver", action="store_true", help="skip silver + quality")
    parser.add_argument("--steps", default="backlog,live", help="CSV of backlog,live")
    parser.add_argument("--json", type=Path, help="also write the results here")
    defaults = BatchConfig()
    parser.add_argument("--batched", action="store_true", help="the uplink's batched format")
    parser.add_argument(
        "--batch-count",
        type=int,
        default=defaults.max_count,
        help="rows per batch at most (batch.max_count)",
    )
    parser.add_argument(
        "--batch-bytes",
        type=int,
        default=defaults.max_bytes,
        help="body bytes per batch, about (batch.max_bytes)",
    )
    parser.add_argument(
        "--batch-delay",
        type=float,
        default=defaults.max_delay,
        help="seconds a live row waits at most for its batch (batch.max_delay)",
    )
    parser.add_argument("--compression", choices=("zstd", "zlib", "none"),
                        default=defaults.compression, help="batch.compression")  # fmt: skip
    args = parser.parse_args(argv)
    args.batching = None
    result: dict[str, Any] = {"mode": "unbatched"}
    if args.batched:
        args.batching = BatchConfig(
            max_count=args.batch_count, max_bytes=args.batch_bytes,
            max_delay=args.batch_delay, compression=args.compression,
        )  # fmt: skip
        result = {"mode": "batched", "batch": args.batching.model_dump()}
    print(json.dumps(result), flush=True)
    work = Path(tempfile.mkdtemp(prefix="fleet-bench-"))
    steps = set(args.steps.split(","))
    try:
        if "backlog" in steps:
            result["backlog"] = backlog_drain(work, args)
            print(json.dumps({"backlog": result["backlog"]}), flush=True)
        if "live" in steps:
            result["live"] = live_fleet(work, args)
            print(json.dumps({"live": result["live"]}), flush=True)
            if not args.no_silver:
                result["silver"] = silver_check(work)
                print(json.dumps({"silver": result["silver"]}), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    missing = result.get("silver", {}).get("missing_seqs", 0)
    return 0 if missing == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
