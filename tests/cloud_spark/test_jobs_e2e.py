"""Every job on a generated TSBS-IoT-shaped bronze set: exact counts, idempotent re-runs.

``silver`` runs through the command line (``cloud_spark.cli.main``, what ``python -m
cloud_spark silver`` calls) in the test's Spark session, so no second JVM is started; the
other jobs run through the runner function the CLI uses. test_cli.py runs the module entry
itself in a child process.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F  # noqa: N812
from pyspark.testing import assertDataFrameEqual

from bench.cloud.tsbs_iot import GenConfig, Manifest, generate
from cloud_spark.cli import job_params, main, run_job
from cloud_spark.jobs import JOBS
from cloud_spark.tables import read_table

CONFIG = GenConfig(
    rows=4000,
    gateways=2,
    devices=12,
    dup_rate=0.05,
    late_rate=0.02,
    bad_rate=0.01,
    outage_rate=6.0,
    link_outage_rate=30.0,
    rows_per_file=700,
)


@pytest.fixture(scope="module")
def landed(
    spark: SparkSession, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, Path, Manifest]:
    """Generated bronze, and the tables of ``python -m cloud_spark silver`` over it."""
    base = tmp_path_factory.mktemp("jobs")
    root, out = base / "landing", base / "tables"
    manifest = generate(CONFIG, root)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = main(["silver", "--root", str(root), "--out", str(out), "--master", "local[2]"])
    assert code == 0
    assert spark.sparkContext._jsc is not None  # the test session is still running
    result = json.loads(printed.getvalue().strip().splitlines()[-1])
    assert result["job"] == "silver"
    assert result["bronze_rows"] == manifest.rows
    assert result["late"] == read_table(spark, str(out), "points").where("is_late").count() > 0
    return root, out, manifest


def test_silver_counts_match_what_the_generator_wrote(
    spark: SparkSession, landed: tuple[Path, Path, Manifest]
) -> None:
    _, out, m = landed
    messages = read_table(spark, str(out), "messages")
    assert messages.count() == m.distinct_ids
    assert messages.agg(F.sum(F.col("copies") - 1)).first()[0] == m.duplicates  # type: ignore[index]
    assert read_table(spark, str(out), "points").count() == m.points
    assert read_table(spark, str(out), "status").count() == m.status
    assert read_table(spark, str(out), "device_diagnostics").count() == m.device_diagnostics
    assert read_table(spark, str(out), "uplink_diagnostics").count() == m.uplink_diagnostics
    assert read_table(spark, str(out), "quarantine").count() == m.malformed + m.no_id
    ids = messages.groupBy("gateway", "epoch", "seq").count().where("count > 1")
    assert ids.count() == 0


def test_all_jobs_then_report(spark: SparkSession, landed: tuple[Path, Path, Manifest]) -> None:
    _, out, m = landed
    results = {}
    for job in JOBS[1:]:
        results[job] = run_job(job, spark, None, str(out), job_params(job, argparse.Namespace()))
    assert results["quality"]["missing_seq"] == 0
    assert results["availability"]["device_outages"] >= 1
    assert results["availability"]["link_outages"] >= 1
    assert set(results["rollups"]) == {"1m", "15m", "1h", "1d", "recomputed_days"}
    report = json.loads((out / "report.json").read_text())
    assert report == results["report"]
    assert report["bronze_rows"] == m.rows
    assert report["messages"] == m.distinct_ids
    assert report["duplicates_removed"] == m.duplicates
    assert report["quarantined"] == m.malformed + m.no_id
    assert report["quarantine_reasons"]["missing_id"] == m.no_id
    assert report["missing_seq"] == 0
    assert report["epochs"] == len(m.epochs)
    assert report["late"] >= m.late_injected * 0.5  # landed 5-60 min after their event time
    seq = read_table(spark, str(out), "seq_summary").collect()
    assert {f"{r['gateway']}/{r['epoch']}": r["last_seq"] for r in seq} == m.last_seq


def test_a_rerun_reads_nothing_new_and_a_full_rerun_rewrites_the_same_rows(
    spark: SparkSession, landed: tuple[Path, Path, Manifest]
) -> None:
    root, out, m = landed
    before = {name: read_table(spark, str(out), name).collect() for name in ("points", "messages")}
    params = job_params("silver", argparse.Namespace())
    again = run_job("silver", spark, str(root), str(out), params)
    assert (again["mode"], again["files"], again["rows"]) == ("incremental", 0, 0)
    full = job_params("silver", argparse.Namespace(full=True))
    result = run_job("silver", spark, str(root), str(out), full)
    assert (result["mode"], result["rows"]) == ("full", m.distinct_ids + m.no_id)
    for name, rows in before.items():
        assert len(rows) > 0
        assertDataFrameEqual(read_table(spark, str(out), name), rows)


def test_a_silver_run_over_missing_bronze_writes_empty_tables(
    spark: SparkSession, tmp_path: Path
) -> None:
    result = run_job(
        "silver",
        spark,
        str(tmp_path / "nothing"),
        str(tmp_path / "out"),
        job_params("silver", argparse.Namespace()),
    )
    assert result == {"rows": 0, "bronze_rows": 0, "quarantined": 0, "late": 0,
                      "duplicates_removed": 0, "mode": "full", "files": 0,
                      "files_skipped": {}}
