"""Benchmark: ``silver`` against a plain job, ``rollups``, and an incremental ``silver`` run.

How this works: the TSBS-IoT generator (:mod:`bench.cloud.tsbs_iot`) writes N bronze rows
(reused when ``generate.json`` already describes the same configuration), then one Spark
session (``local[2]`` unless ``--master``) runs, timing each: the plain baseline job
(:mod:`bench.cloud.plain_job`), ``silver`` (its first run: every file), ``rollups``, and then,
after ``--new-rows`` more rows are landed (a second generated set starting the hour after
the first ends, new gateway epochs), ``silver`` again, which processes only the new files.
Both jobs go through the same entry points as ``python -m cloud_spark``. Reported per job:
wall time and rows/s (silver and plain: bronze rows in; rollups: silver points in), the
ratio silver/plain and the ratio second/first silver run. Peak memory is the high-water resident set
(``VmHWM`` from ``/proc``) of this Python process and of the driver JVM it started (in local
mode the driver is the executor): per step too, by resetting the JVM's mark after each one
(``clear_refs``), and the whole command's peak is the largest of them. Also reported: the JVM
CPU seconds of each step (less sensitive than wall time to other work on the machine), the
load average at start and end, and the JVM options as launched. The heap is the jobs' own
default (:mod:`cloud_spark.spark`) unless ``--driver-memory`` is given. ``--steps`` runs a
subset (for iterating; the figures in the README are of whole runs). Exact counts are
checked against the generator manifest.

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
from dataclasses import asdict, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.cloud import plain_job
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


def reset_peak_rss(pid: int) -> None:
    """Start a new high-water mark for ``pid`` (Linux: writing 5 to ``clear_refs``)."""
    with contextlib.suppress(OSError):
        Path(f"/proc/{pid}/clear_refs").write_text("5")


def jvm_options(pid: int) -> list[str]:
    """The JVM's own options (``-Xmx…``, ``-XX:…``) from its command line, as launched."""
    with contextlib.suppress(OSError):
        args = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
        return [arg for arg in args if arg.startswith(("-X", "-XX:"))]
    return []


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time a process has used so far (less sensitive to load than wall)."""
    with contextlib.suppress(OSError, IndexError, ValueError):
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
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


def _run(job: str, spark: Any, root: Path, out: Path) -> Any:
    with contextlib.redirect_stdout(io.StringIO()):
        return run_job(job, spark, str(root), str(out), job_params(job, argparse.Namespace()))


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def _timed(started: float, rows: int, result: Any) -> dict[str, Any]:
    elapsed = time.monotonic() - started
    return {
        "seconds": round(elapsed, 1),
        "input_rows": rows,
        "rows_per_s": round(rows / elapsed),
        "result": result,
    }


def _step_peak(jvms: list[int], cpu: dict[str, float], step: str) -> int:
    """Peak driver JVM RSS since the last call, in MiB; starts the next step's mark.

    Also records in ``cpu[step]`` the JVM CPU seconds the step used.
    """
    peak = round(sum(peak_rss_mb(pid) for pid in jvms))
    for pid in jvms:
        reset_peak_rss(pid)
    used = sum(cpu_seconds(pid) for pid in jvms)
    cpu[step] = round(used - sum(cpu.values()), 1)
    return peak


NEW_PREFIX = "part-new-"


def _remove_new_batch(root: Path) -> None:
    for file in (root / "bronze").rglob(f"{NEW_PREFIX}*"):
        file.unlink()


def _land_new_batch(cfg: GenConfig, root: Path, scratch: Path, rows: int) -> dict[str, Any]:
    """Generate ``rows`` more, starting the hour after the last bronze hour, and land them."""
    last = max(
        datetime.strptime(f"{d.parent.name[-10:]} {d.name[-2:]}", "%Y-%m-%d %H").replace(tzinfo=UTC)
        for d in (root / "bronze").glob("ingest_date=*/ingest_hour=*")
    )
    start_ms = int(last.timestamp() * 1000) + 3_600_000
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    new_cfg = replace(cfg, rows=rows, seed=cfg.seed + 1, start_ms=start_ms)
    manifest = generate(new_cfg, scratch)
    for file in (scratch / "bronze").rglob("*.json.gz"):
        target = root / "bronze" / file.parent.relative_to(scratch / "bronze")
        target.mkdir(parents=True, exist_ok=True)
        file.rename(target / f"{NEW_PREFIX}{file.name}")
    return asdict(manifest)


STEPS = ("plain", "silver", "rollups", "incremental")


def _steps(text: str) -> tuple[str, ...]:
    steps = tuple(part.strip() for part in text.split(",") if part.strip())
    unknown = [step for step in steps if step not in STEPS]
    if unknown or not steps:
        raise argparse.ArgumentTypeError(
            f"unknown step {', '.join(unknown) or '(none)'}; choose from {','.join(STEPS)}"
        )
    if "silver" not in steps and any(step in steps for step in ("rollups", "incremental")):
        raise argparse.ArgumentTypeError("rollups and incremental need the silver step")
    return steps


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="silver + rollups benchmark")
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--work", type=Path, default=Path("/tmp/outpost-bench"))
    parser.add_argument("--master", default="local[2]")
    parser.add_argument(
        "--driver-memory", help="spark.driver.memory (default: the jobs' own, cloud_spark.spark)"
    )
    parser.add_argument("--shuffle-partitions", type=int, default=8)
    parser.add_argument("--workers", type=int, default=2, help="generator processes")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument(
        "--new-rows", type=int, default=100_000, help="landed after the first silver run"
    )
    parser.add_argument(
        "--plain-format", choices=("delta", "parquet"), default="delta",
        help="the plain job's output: a Delta table like silver's, or Parquet files",
    )  # fmt: skip
    parser.add_argument(
        "--steps", type=_steps, default=STEPS,
        help="comma-separated subset of plain,silver,rollups,incremental (default: all)",
    )  # fmt: skip
    parser.add_argument(
        "--conf", action="append", default=[], metavar="KEY=VALUE",
        help="extra Spark setting (repeatable; for trying settings)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    steps = set(args.steps) - ({"incremental"} if not args.new_rows else set())

    cfg = GenConfig(rows=args.rows, seed=args.seed, rows_per_file=250_000)
    root, out = args.work / "landing", args.work / "tables"
    manifest, gen_s = _prepare(cfg, root, args.workers)
    shutil.rmtree(out, ignore_errors=True)
    conf = {
        "spark.sql.shuffle.partitions": str(args.shuffle_partitions),
        "spark.ui.enabled": "false",
        **dict(item.split("=", 1) for item in args.conf),
    }
    if args.driver_memory:
        conf["spark.driver.memory"] = args.driver_memory
    load_start = _load()
    started = time.monotonic()
    spark = get_spark("outpost-bench", args.master, conf)
    session_s = time.monotonic() - started
    jvms = jvm_pids()
    figures: dict[str, Any] = {
        "rows": args.rows,
        "master": args.master,
        "driver_memory": spark.sparkContext.getConf().get("spark.driver.memory", "1g"),
        "jvm_options": [opt for pid in jvms for opt in jvm_options(pid)],
        "shuffle_partitions": args.shuffle_partitions,
        "plain_format": args.plain_format,
        "extra_conf": args.conf,
        "steps": [step for step in STEPS if step in steps],
        "generate_s": gen_s,
        "session_s": round(session_s, 1),
    }
    cpu: dict[str, float] = {}
    peaks = {"session": _step_peak(jvms, cpu, "session")}
    _remove_new_batch(root)
    inputs = {"silver": manifest["rows"], "rollups": manifest["points"]}
    if "plain" in steps:
        started = time.monotonic()
        plain_out = str(args.work / f"plain-{args.plain_format}")
        plain_rows = plain_job.run(spark, str(root), plain_out, args.plain_format)
        figures["plain"] = _timed(started, manifest["rows"], {"rows": plain_rows})
        peaks["plain"] = _step_peak(jvms, cpu, "plain")
    for job in ("silver", "rollups"):
        if job in steps:
            started = time.monotonic()
            result = _run(job, spark, root, out)
            figures[job] = _timed(started, inputs[job], result)
            peaks[job] = _step_peak(jvms, cpu, job)
    if "plain" in steps and "silver" in steps:
        figures["silver_vs_plain"] = round(
            figures["silver"]["rows_per_s"] / figures["plain"]["rows_per_s"], 2
        )
    if "incremental" in steps:
        new = _land_new_batch(cfg, root, args.work / "new-landing", args.new_rows)
        started = time.monotonic()
        result = _run("silver", spark, root, out)
        figures["silver_incremental"] = _timed(started, new["rows"], result)
        figures["incremental_ratio"] = round(
            figures["silver_incremental"]["seconds"] / figures["silver"]["seconds"], 3
        )
        peaks["incremental"] = _step_peak(jvms, cpu, "incremental")
    figures["checks"] = {}
    if "silver" in steps:
        silver = figures["silver"]["result"]
        figures["checks"] = {
            "distinct_ids": (silver["rows"] - manifest["no_id"], manifest["distinct_ids"]),
            "duplicates_removed": (silver["duplicates_removed"], manifest["duplicates"]),
            "quarantined": (silver["quarantined"], manifest["malformed"] + manifest["no_id"]),
            "points": (silver.get("point", 0), manifest["points"]),
        }
    if "incremental" in steps:
        incremental = figures["silver_incremental"]["result"]
        figures["checks"]["incremental_rows"] = (incremental["bronze_rows"], new["rows"])
    figures["peak_rss_mb"] = {
        "python": round(peak_rss_mb()),
        "jvm": max(peaks.values()),
        "jvm_by_step": peaks,
    }
    figures["jvm_cpu_s"] = cpu
    figures["load_average"] = {"start": load_start, "end": _load()}
    spark.stop()
    ok = all(got == want for got, want in figures["checks"].values())
    figures["checks_ok"] = ok
    text = json.dumps(figures, indent=2, default=str)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    print(_summary(figures, inputs, args.new_rows), file=sys.stderr)
    return 0 if ok else 1


def _summary(figures: dict[str, Any], inputs: dict[str, int], new_rows: int) -> str:
    lines = []
    if "silver" in figures:
        silver = figures["silver"]
        lines.append(
            f"silver  {silver['rows_per_s']:>10,} rows/s "
            f"({silver['seconds']} s for {inputs['silver']:,} bronze rows)"
        )
    if "plain" in figures:
        plain = figures["plain"]
        ratio = figures.get("silver_vs_plain")
        lines.append(
            f"plain   {plain['rows_per_s']:>10,} rows/s ({plain['seconds']} s)"
            + (f"; silver/plain {ratio}" if ratio is not None else "")
        )
    if "silver_incremental" in figures:
        lines.append(
            f"silver second run ({new_rows:,} new rows): "
            f"{figures['silver_incremental']['seconds']} s = "
            f"{figures['incremental_ratio']:.1%} of the first"
        )
    if "rollups" in figures:
        rollups = figures["rollups"]
        lines.append(
            f"rollups {rollups['rows_per_s']:>10,} rows/s "
            f"({rollups['seconds']} s for {inputs['rollups']:,} points)"
        )
    peak, load = figures["peak_rss_mb"], figures["load_average"]
    lines.append(
        f"peak RSS: driver JVM {peak['jvm']} MiB (heap {figures['driver_memory']}; by step "
        f"{peak['jvm_by_step']}), python {peak['python']} MiB; load average "
        f"{load['start'][0]} -> {load['end'][0]}; exact counts "
        f"{'match' if figures['checks_ok'] else 'DIFFER'}\n"
        f"driver JVM CPU seconds by step: {figures['jvm_cpu_s']}"
    )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
