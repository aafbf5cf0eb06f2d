"""Faults of ``silver`` on Delta tables: the driver SIGKILLed mid-MERGE, two runs at once.

Each job runs as ``python -m cloud_spark silver`` in its own process group (its Python and
its JVM, the driver), against a copy of the same bronze. After the fault, one more run; then
every silver table and ``quality``'s sequence summary must equal those of a clean run, and
no sequence number may be missing.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.testing import assertDataFrameEqual

from bench.cloud.tsbs_iot import GenConfig, generate
from cloud_spark.jobs import manifest as mf
from cloud_spark.jobs import quality, silver
from cloud_spark.tables import read_table, table_path

SILVER = ("messages", "points", "status", "device_diagnostics", "uplink_diagnostics", "quarantine")

CONFIG = GenConfig(
    rows=3000, gateways=2, devices=10, dup_rate=0.05, late_rate=0.05, bad_rate=0.01,
    outage_rate=6.0, link_outage_rate=30.0, rows_per_file=300,
)  # fmt: skip

JOB_CONF = ("spark.sql.shuffle.partitions=2", "spark.ui.enabled=false",
            "spark.sql.adaptive.enabled=false")  # fmt: skip


def _silver(root: Path, out: Path) -> subprocess.Popen[str]:
    conf = [arg for item in JOB_CONF for arg in ("--conf", item)]
    command = [sys.executable, "-m", "cloud_spark", "silver", "--root", str(root),
               "--out", str(out), "--master", "local[1]", *conf]  # fmt: skip
    return subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True,  # its own process group: the JVM dies with it
    )  # fmt: skip


def _land(source: Path, root: Path, files: list[Path]) -> None:
    for file in files:
        target = root / "bronze" / file.relative_to(source / "bronze")
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(file, target)


def _commits(out: Path, name: str) -> int:
    log = Path(table_path(str(out), name)) / "_delta_log"
    return len(list(log.glob("*.json"))) if log.exists() else 0


def _first_batch_done(
    spark: SparkSession, tmp_path: Path
) -> tuple[Path, Path, Path, list[Path]]:
    """Generated bronze, half of it landed and taken by silver; returns the rest."""
    source, root, out = tmp_path / "generated", tmp_path / "landing", tmp_path / "tables"
    generate(CONFIG, source)
    files = sorted((source / "bronze").rglob("*.json.gz"))
    _land(source, root, files[: len(files) // 2])
    silver.run(spark, str(root), str(out), silver.SilverParams())
    return source, root, out, files[len(files) // 2 :]


def _assert_like_a_clean_run(spark: SparkSession, root: Path, out: Path, clean: Path) -> None:
    silver.run(spark, str(root), str(clean), silver.SilverParams(full=True))
    for name in SILVER:
        assertDataFrameEqual(
            read_table(spark, str(out), name), read_table(spark, str(clean), name),
            checkRowOrder=False,
        )  # fmt: skip
    for tables in (out, clean):
        quality.run(spark, "", str(tables), quality.QualityParams(full=True))
    summary = read_table(spark, str(out), "seq_summary")
    assertDataFrameEqual(summary, read_table(spark, str(clean), "seq_summary"))
    assert summary.count() > 0
    assert summary.where("missing > 0").count() == 0
    assert not mf.pending_runs(spark, str(out))


@pytest.mark.pipeline  # two job processes and three silver runs: `make pipeline-test`
@pytest.mark.timeout(600)
def test_a_silver_run_killed_mid_merge_is_finished_by_the_next(
    spark: SparkSession, tmp_path: Path
) -> None:
    source, root, out, rest = _first_batch_done(spark, tmp_path)
    _land(source, root, rest)
    merged_before = _commits(out, "points")
    job = _silver(root, out)
    try:
        while _commits(out, "points") == merged_before:  # points is merged first
            assert job.poll() is None, job.communicate()[0]
            time.sleep(0.05)
        os.killpg(job.pid, signal.SIGKILL)
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
        job.communicate()
    assert job.returncode == -signal.SIGKILL
    (dead,) = mf.pending_runs(spark, str(out))  # it died with its run claimed, not committed
    assert _commits(out, "messages") < _commits(out, "points") + 1  # the ledger not merged

    result = silver.run(spark, str(root), str(out), silver.SilverParams())

    assert result["files"] == 0  # the dead run's files: finished before looking for new ones
    assert mf.runs(spark, str(out))[-1]["run_id"] == dead["run_id"]
    _assert_like_a_clean_run(spark, root, out, tmp_path / "clean")


@pytest.mark.pipeline
@pytest.mark.timeout(600)
def test_two_silver_runs_started_at_once_do_the_work_once(
    spark: SparkSession, tmp_path: Path
) -> None:
    source, root, out, rest = _first_batch_done(spark, tmp_path)
    _land(source, root, rest)
    jobs = [_silver(root, out), _silver(root, out)]
    outputs = [job.communicate()[0] for job in jobs]
    codes = [job.returncode for job in jobs]
    assert 0 in codes, outputs  # at least one finished the work
    for code, text in zip(codes, outputs, strict=True):
        if code != 0:  # the other one failed cleanly, naming why
            assert "error: another silver run" in text or "Concurrent" in text, text

    again = silver.run(spark, str(root), str(out), silver.SilverParams())

    assert again["files"] == 0
    _assert_like_a_clean_run(spark, root, out, tmp_path / "clean")
