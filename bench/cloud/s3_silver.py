"""Benchmark: ``silver`` against the plain Spark job with bronze and tables on S3.

How this works: the TSBS-IoT generator writes N bronze rows to a local directory (reused
when its ``generate.json`` describes the same configuration), a SeaweedFS S3 server is
started on 127.0.0.1 with its data under ``--work`` (tests/support/seaweedfs.py) and the
bronze files are uploaded into a fresh bucket (the same rows as ``run_bench``: seed 7,
250,000 rows a file). One Spark session (``local[2]`` unless ``--master``, the
S3 settings of :mod:`cloud_spark.object_store_conf`: hadoop-aws, path-style, fail-fast
retries) then runs, timing each: the plain job (:mod:`bench.cloud.plain_job`: read the
bronze JSON, drop duplicates on the ids, write a Delta table) and ``silver`` (its first
run: every file), both reading ``s3a://BUCKET/landing/bronze`` and writing Delta tables
under ``s3a://BUCKET/``. Reported: seconds and bronze rows/s of each, the ratio
silver/plain, the upload time, the JVM's CPU seconds per job, the load average at start
and end. Exact counts are checked against the generator manifest.

    .venv/bin/python -m bench.cloud.s3_silver --rows 10000000 --work /tmp/outpost-bench-s3
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import shutil
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from bench.cloud import plain_job
from bench.cloud.run_bench import _prepare, cpu_seconds, jvm_pids
from bench.cloud.tsbs_iot import GenConfig
from cloud_spark import object_store_conf as s3conf
from cloud_spark.cli import job_params, run_job
from cloud_spark.spark import get_spark
from tests.support.seaweedfs import SeaweedFS, start_seaweedfs, unique_bucket


def upload(server: SeaweedFS, local: Path, bucket: str, prefix: str, threads: int = 8) -> int:
    """Every file under ``local`` as an object under ``prefix`` (``threads`` at a time)."""
    client = server.client()
    files = [path for path in sorted(local.rglob("*")) if path.is_file()]

    def put(path: Path) -> None:
        client.upload_file(str(path), bucket, f"{prefix}/{path.relative_to(local)}")

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(put, files))
    return len(files)


def _timed(step: str, rows: int, started: float, cpu_before: float, jvms: list[int],
           result: Any) -> dict[str, Any]:  # fmt: skip
    seconds = time.monotonic() - started
    return {
        "step": step,
        "seconds": round(seconds, 1),
        "bronze_rows": rows,
        "rows_per_s": round(rows / seconds),
        "jvm_cpu_s": round(sum(cpu_seconds(pid) for pid in jvms) - cpu_before, 1),
        "result": result,
    }


def measure(
    server: SeaweedFS, cfg: GenConfig, work: Path, args: argparse.Namespace
) -> dict[str, Any]:
    """Generate, upload, then time the plain job and ``silver`` in one session."""
    manifest, _ = _prepare(cfg, work / "landing", args.workers)
    bucket = server.create_bucket(unique_bucket("bench"))
    started = time.monotonic()
    objects = upload(server, work / "landing" / "bronze", bucket, "landing/bronze")
    uploaded_s = round(time.monotonic() - started, 1)
    root, out = f"s3a://{bucket}/landing", f"s3a://{bucket}/tables"
    conf = {"spark.sql.shuffle.partitions": str(args.shuffle_partitions),
            "spark.ui.enabled": "false",
            "spark.hadoop.fs.s3a.access.key": server.access_key,
            "spark.hadoop.fs.s3a.secret.key": server.secret_key}  # fmt: skip
    conf.update(s3conf.s3a_session_conf([root], conf, server.endpoint, server.region))
    load_start = [round(x, 2) for x in os.getloadavg()]
    spark = get_spark("outpost-bench-s3", args.master, conf)
    try:
        spark.sparkContext.setLogLevel("ERROR")
        jvms = jvm_pids()
        figures: dict[str, Any] = {}
        for step in args.steps:
            cpu_before = sum(cpu_seconds(pid) for pid in jvms)
            began = time.monotonic()
            if step == "plain":
                result: Any = plain_job.run(spark, root, f"s3a://{bucket}/plain")
            else:
                with contextlib.redirect_stdout(io.StringIO()):
                    result = run_job("silver", spark, root, out,
                                     job_params("silver", argparse.Namespace()))  # fmt: skip
                rows_in = result["bronze_rows"]
                if rows_in != manifest["rows"]:
                    raise SystemExit(f"silver read {rows_in} rows, the generator wrote "
                                     f"{manifest['rows']}")  # fmt: skip
            figures[step] = _timed(step, manifest["rows"], began, cpu_before, jvms, result)
    finally:
        spark.stop()
    summary: dict[str, Any] = {
        "rows": manifest["rows"], "objects": objects, "upload_s": uploaded_s,
        "master": args.master, "shuffle_partitions": args.shuffle_partitions,
        "load_start": load_start, "load_end": [round(x, 2) for x in os.getloadavg()],
        **figures,
    }  # fmt: skip
    if "plain" in figures and "silver" in figures:
        summary["silver_vs_plain"] = round(
            figures["silver"]["rows_per_s"] / figures["plain"]["rows_per_s"], 2
        )
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="silver vs a plain job, bronze and tables on S3")
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--work", type=Path, default=Path("/tmp/outpost-bench-s3"))
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--shuffle-partitions", type=int, default=8)
    parser.add_argument("--workers", type=int, default=2, help="generator processes")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--steps", type=lambda text: tuple(text.split(",")), default=("plain", "silver"),
        help="CSV of plain, silver (in this order)",
    )  # fmt: skip
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    if not set(args.steps) <= {"plain", "silver"}:
        parser.error(f"--steps: plain and/or silver, got {','.join(args.steps)}")
    cfg = GenConfig(rows=args.rows, seed=args.seed, rows_per_file=250_000)
    args.work.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(args.work / "seaweedfs", ignore_errors=True)  # earlier runs' buckets
    with start_seaweedfs(args.work / "seaweedfs") as server:
        summary = measure(server, cfg, args.work, args)
    text = json.dumps(summary, default=str)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
