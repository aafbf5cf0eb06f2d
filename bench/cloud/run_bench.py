"""Benchmark: ``silver`` and ``rollups`` on N generated bronze rows in ``local[2]``.

How this works: the TSBS-IoT generator (:mod:`bench.cloud.tsbs_iot`) writes N bronze rows
(reused when ``generate.json`` already describes the same configuration), then one Spark
session (``local[2]`` unless ``--master``) runs the two jobs through the same entry points as
``python -m cloud_spark``, timing each. Reported per job: wall time and rows/s (silver: bronze
rows in; rollups: silver points in). Peak memory is the high-water resident set
(``VmHWM`` from ``/proc``) of this Python process and of the driver JVM it started (in local
mode the driver is the executor). Exact counts are checked against the generator manifest.

    .venv/bin/python -m bench.cloud.run_bench --rows 10000000 --work /tmp/outpost-bench
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
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bench.cloud.tsbs_iot import GenConfig, generate
from cloud_spark.cli import job_params, run_job
from cloud_spark.spark import get_spark


def peak_rss_mb(pid: int | str = "self") -> float:
    """High-water resident set size of a process in MiB (Linux ``VmHWM``)."""
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return 0.0


def jvm_pids() -> list[int]:
    """Java processes started by this Python process (the local-mode Spark driver)."""
    me, found = os.getpid(), []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            stat = (entry / "stat").read_text()
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            if ppid == me and b"java" in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
    return found


def _prepare(cfg: GenConfig, root: Path, workers: int) -> tuple[dict[str, Any], float | None]:
    marker = root / "generate.json"
    if marker.exists() and json.loads(marker.read_text())["config"] == asdict(cfg):
        return json.loads(marker.read_text())["manifest"], None
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    started = time.monotonic()
    manifest = generate(cfg, root, workers)
    return asdict(manifest), time.monotonic() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="silver + rollups benchmark")
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--work", type=Path, default=Path("/tmp/outpost-bench"))
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--driver-memory", default="3g")
    parser.add_argument("--shuffle-partitions", type=int, default=8)
    parser.add_argument("--workers", type=int, default=2, help="generator processes")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)

    cfg = GenConfig(rows=args.rows, seed=args.seed, rows_per_file=250_000)
    root, out = args.work / "landing", args.work / "tables"
    manifest, gen_s = _prepare(cfg, root, args.workers)
    shutil.rmtree(out, ignore_errors=True)
    conf = {
        "spark.driver.memory": args.driver_memory,
        "spark.sql.shuffle.partitions": str(args.shuffle_partitions),
        "spark.ui.enabled": "false",
    }
    started = time.monotonic()
    spark = get_spark("outpost-bench", args.master, conf)
    session_s = time.monotonic() - started
    figures: dict[str, Any] = {
        "rows": args.rows,
        "master": args.master,
        "driver_memory": args.driver_memory,
        "shuffle_partitions": args.shuffle_partitions,
        "generate_s": gen_s,
        "session_s": round(session_s, 1),
    }
    inputs = {"silver": manifest["rows"], "rollups": manifest["points"]}
    for job in ("silver", "rollups"):
        started = time.monotonic()
        with contextlib.redirect_stdout(io.StringIO()):
            result = run_job(job, spark, str(root), str(out), job_params(job, argparse.Namespace()))
        elapsed = time.monotonic() - started
        figures[job] = {
            "seconds": round(elapsed, 1),
            "input_rows": inputs[job],
            "rows_per_s": round(inputs[job] / elapsed),
            "result": result,
        }
    silver = figures["silver"]["result"]
    figures["checks"] = {
        "distinct_ids": (silver["rows"] - manifest["no_id"], manifest["distinct_ids"]),
        "duplicates_removed": (silver["duplicates_removed"], manifest["duplicates"]),
        "quarantined": (silver["quarantined"], manifest["malformed"] + manifest["no_id"]),
        "points": (silver.get("point", 0), manifest["points"]),
    }
    figures["peak_rss_mb"] = {
        "python": round(peak_rss_mb()),
        "jvm": round(sum(peak_rss_mb(pid) for pid in jvm_pids())),
    }
    spark.stop()
    ok = all(got == want for got, want in figures["checks"].values())
    figures["checks_ok"] = ok
    text = json.dumps(figures, indent=2, default=str)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    print(
        f"silver  {figures['silver']['rows_per_s']:>10,} rows/s "
        f"({figures['silver']['seconds']} s for {inputs['silver']:,} bronze rows)\n"
        f"rollups {figures['rollups']['rows_per_s']:>10,} rows/s "
        f"({figures['rollups']['seconds']} s for {inputs['rollups']:,} points)\n"
        f"peak RSS: driver JVM {figures['peak_rss_mb']['jvm']} MiB, "
        f"python {figures['peak_rss_mb']['python']} MiB; exact counts "
        f"{'match' if ok else 'DIFFER'}",
        file=sys.stderr,
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
