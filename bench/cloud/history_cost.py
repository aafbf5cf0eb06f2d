"""Fixed cost of an incremental ``silver`` run as bronze history grows.

    .venv/bin/python -m bench.cloud.history_cost [--history 10000,500000] [--new-rows 10000]
        [--new-files 10] [--files-per-day 1000] [--unpruned] [--work /tmp/history-cost]
        [--master local[2]]

For each history size: ``--history`` tiny bronze files (one record each), ``--files-per-day``
in each ingest date (history grows by days, as it does), recorded in silver's manifest as
processed (claimed and committed through :mod:`cloud_spark.jobs.manifest`, as earlier runs
would have, in one Delta commit), then ``--new-rows`` point records in ``--new-files`` files
landed the day after, and one incremental ``silver`` run over them, timed; then one more run
with nothing new to do (``nothing_new_run_s``: the fixed cost alone), timed. Also timed: the
listing and the manifest read that run does (pruned by ingest date) and, with
``--unpruned``, what an unpruned run would do on the same tree (the whole tree, the whole
manifest). Prints one JSON line per history size and the ratios of the run times (the goal:
within 10 %). One Spark session for every size; the first size runs once more first, to
warm the JVM.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from cloud_spark import bronze_files as bf
from cloud_spark.jobs import manifest as mf
from cloud_spark.jobs import silver
from cloud_spark.records import encode_record, partition_dir
from cloud_spark.spark import get_spark

DAY_MS = 86_400_000
START_MS = 1_717_200_000_000  # 2024-06-01 00:00 UTC


def _record(seq: int, ingest_ms: int, gateway: str) -> bytes:
    payload = {"value": seq * 0.5, "unit": "kW", "ts": ingest_ms - 100, "quality": "good"}
    return encode_record({
        "gateway": gateway, "epoch": "e-1", "seq": seq,
        "local_topic": f"devices/meter-{seq % 10}/power", "received_ms": ingest_ms - 100,
        "remote_topic": f"outpost/{gateway}/devices/meter-{seq % 10}/power",
        "payload": json.dumps(payload), "payload_encoding": "utf8",
        "ingest_ms": ingest_ms, "lander_id": "bench",
    })  # fmt: skip


def write_history(root: Path, files: int, per_day: int) -> int:
    """``files`` one-record bronze files, ``per_day`` a day (content shared: never read);
    returns the number of days."""
    blob = gzip.compress(_record(1, START_MS, "gw-history"), mtime=0)
    days = max(1, files // per_day)
    per_hour = max(1, per_day // 24)
    for n in range(files):
        ingest_ms = START_MS + (n // per_hour) % (days * 24) * 3_600_000
        rel = f"{partition_dir(ingest_ms)}/part-{ingest_ms}-history-{n:07d}.json.gz"
        path = root / "bronze" / rel
        if n % per_hour == 0:
            path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(blob)
    return days


def write_new(root: Path, rows: int, files: int, days: int) -> None:
    ingest_ms = START_MS + days * DAY_MS + 3_600_000
    directory = root / "bronze" / partition_dir(ingest_ms)
    directory.mkdir(parents=True, exist_ok=True)
    per_file = rows // files
    for f in range(files):
        lines = b"".join(
            _record(seq, ingest_ms + seq, "gw-new")
            for seq in range(f * per_file + 1, (f + 1) * per_file + 1)
        )
        (directory / f"part-{ingest_ms}-new-{f:04d}.json.gz").write_bytes(gzip.compress(lines))


def _timed(fn: Any) -> tuple[Any, float]:
    started = time.monotonic()
    result = fn()
    return result, time.monotonic() - started


def measure(
    spark: SparkSession, work: Path, args: argparse.Namespace, history: int
) -> dict[str, Any]:
    shutil.rmtree(work, ignore_errors=True)
    root, out = work / "landing", work / "tables"
    days, write_s = _timed(lambda: write_history(root, history, args.files_per_day))
    files = bf.list_bronze(spark, str(root))
    run_id = mf.new_run_id()
    mf.claim(spark, str(out), run_id, files, full=False)
    mf.commit(spark, str(out), run_id, {}, [])
    write_new(root, args.new_rows, args.new_files, days)

    since = bf.listing_cutoff(mf.manifest_dates(spark, str(out)), 1)
    pruned_list, pruned_list_s = _timed(lambda: bf.list_bronze(spark, str(root), since))
    _, pruned_read_s = _timed(lambda: mf.processed(spark, str(out), since))
    figures: dict[str, Any] = {}
    if args.unpruned:
        full_list, full_list_s = _timed(lambda: bf.list_bronze(spark, str(root)))
        _, full_read_s = _timed(lambda: mf.processed(spark, str(out)))
        figures = {
            "unpruned_listed_files": len(full_list),
            "unpruned_listing_s": round(full_list_s, 3),
            "unpruned_manifest_read_s": round(full_read_s, 3),
        }
    load = os.getloadavg()[0]
    result, run_s = _timed(lambda: silver.run(spark, str(root), str(out), silver.SilverParams()))
    assert result["rows"] == args.new_rows and result["mode"] == "incremental", result
    idle, idle_s = _timed(lambda: silver.run(spark, str(root), str(out), silver.SilverParams()))
    assert idle["files"] == 0, idle
    return {
        "history_files": history,
        "history_days": days,
        "new_rows": args.new_rows,
        "silver_run_s": round(run_s, 2),
        "nothing_new_run_s": round(idle_s, 3),
        "listed_files": len(pruned_list),
        "listing_s": round(pruned_list_s, 3),
        "manifest_read_s": round(pruned_read_s, 3),
        **figures,
        "history_written_s": round(write_s, 1),
        "load_avg_before_after": [round(load, 1), round(os.getloadavg()[0], 1)],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--history", default="10000,500000", help="CSV of history sizes (files)")
    parser.add_argument("--new-rows", type=int, default=10_000)
    parser.add_argument("--new-files", type=int, default=10)
    parser.add_argument("--files-per-day", type=int, default=1000, help="history density")
    parser.add_argument("--unpruned", action="store_true", help="also time an unpruned look")
    parser.add_argument("--work", type=Path, default=Path("/tmp/history-cost"))
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args(argv)
    sizes = [int(part) for part in args.history.split(",")]
    spark = get_spark("history-cost", args.master, {"spark.ui.enabled": "false"})
    spark.sparkContext.setLogLevel("ERROR")
    try:
        measure(spark, args.work, args, sizes[0])  # warm-up
        results = [measure(spark, args.work, args, size) for size in sizes]
    finally:
        spark.stop()
        shutil.rmtree(args.work, ignore_errors=True)
    for result in results:
        print(json.dumps(result), flush=True)
    ratio = results[-1]["silver_run_s"] / results[0]["silver_run_s"]
    idle = results[-1]["nothing_new_run_s"] / results[0]["nothing_new_run_s"]
    print(json.dumps({"run_time_ratio_largest_to_smallest": round(ratio, 3),
                      "nothing_new_ratio_largest_to_smallest": round(idle, 3)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
