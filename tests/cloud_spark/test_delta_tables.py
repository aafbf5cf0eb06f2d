"""The tables as Delta Lake tables: an independent reader, payload evolution, maintenance.

delta-rs (PyPI ``deltalake``), which shares no code with Spark's Delta, reads every table
the jobs wrote and must find the same rows Spark does.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from bench.cloud.tsbs_iot import GenConfig, generate
from cloud_spark.cli import job_params, run_job
from cloud_spark.jobs import JOBS, maintain, silver
from cloud_spark.jobs import manifest as mf
from cloud_spark.tables import TABLES, is_delta, read_table, table_path
from tests.cloud_spark.conftest import T0, bronze_row, point_payload, write_bronze

CONFIG = GenConfig(
    rows=600, gateways=2, devices=10, dup_rate=0.05, late_rate=0.05, bad_rate=0.02,
    outage_rate=6.0, link_outage_rate=30.0, rows_per_file=100,
)  # fmt: skip


def _all_jobs(spark: SparkSession, root: Path, out: Path) -> None:
    for name in JOBS:
        if name != "report":
            run_job(name, spark, str(root), str(out), job_params(name, _Args()))


class _Args:
    """No flags: every job with its defaults."""


def _canonical(value: Any) -> Any:
    """A cell as both readers agree on it: times as epoch microseconds, dates as ISO text."""
    if hasattr(value, "isoformat") and not hasattr(value, "hour"):
        return value.isoformat()
    if hasattr(value, "timestamp"):
        return round(value.timestamp() * 1_000_000)
    if isinstance(value, list):
        return json.dumps([_canonical(v) for v in value])
    if isinstance(value, float) and math.isnan(value):
        return "NaN"
    return value


def _rows(records: list[dict[str, Any]], columns: list[str]) -> list[tuple[Any, ...]]:
    return sorted(
        (tuple(_canonical(r[c]) for c in columns) for r in records),
        key=lambda row: json.dumps(row, default=str),
    )


@pytest.mark.timeout(600)  # every job once: minutes on a busy 2-core machine
def test_delta_rs_reads_every_table_with_the_rows_spark_wrote(
    spark: SparkSession, tmp_path: Path
) -> None:
    root, out = tmp_path / "landing", tmp_path / "tables"
    generate(CONFIG, root)
    _all_jobs(spark, root, out)
    written = [name for name in TABLES if is_delta(spark, table_path(str(out), name))]
    assert {"messages", "points", "quarantine", "rollups", "seq_summary"} <= set(written)
    for name in written:
        columns = [f.name for f in TABLES[name].schema.fields]
        theirs = DeltaTable(table_path(str(out), name)).to_pyarrow_table().to_pylist()
        ours = [row.asDict() for row in read_table(spark, str(out), name).collect()]
        assert _rows(theirs, columns) == _rows(ours, columns), name
    processed = DeltaTable(str(out / mf.FILES_DIR)).to_pyarrow_table()
    assert processed.num_rows == len(list((root / "bronze").rglob("*.json.gz")))


def test_a_new_payload_field_and_a_new_point_do_not_break_a_run(
    spark: SparkSession, tmp_path: Path
) -> None:
    """A gateway upgraded mid-stream: its payloads gain a field, a device gains a point."""
    root, out = tmp_path / "landing", tmp_path / "tables"
    old = [bronze_row(seq, "devices/m1/power", point_payload(seq, T0 + seq)) for seq in (1, 2)]
    write_bronze(root, "part-1.json.gz", old, ingest_ms=T0)
    silver.run(spark, str(root), str(out), silver.SilverParams())
    payload = json.loads(point_payload(3.5, T0 + 3))
    newer = [
        bronze_row(3, "devices/m1/power", json.dumps({**payload, "source": "ct-2"})),
        bronze_row(4, "devices/m1/power_factor", point_payload(0.97, T0 + 4, unit=None)),
    ]
    write_bronze(root, "part-2.json.gz", newer, ingest_ms=T0 + 5000)
    result = silver.run(spark, str(root), str(out), silver.SilverParams())
    assert result["mode"] == "incremental" and result["quarantined"] == 0
    points = {(r["seq"], r["point"], r["value_num"])
              for r in read_table(spark, str(out), "points").collect()}  # fmt: skip
    assert points == {(1, "power", 1.0), (2, "power", 2.0), (3, "power", 3.5),
                      (4, "power_factor", 0.97)}  # fmt: skip


def test_a_table_written_without_a_column_added_since_reads_it_as_null(
    spark: SparkSession, tmp_path: Path
) -> None:
    out = tmp_path / "tables"
    path = table_path(str(out), "fleet")
    older = spark.createDataFrame([("gw-1", "online")], "gateway string, status string")
    older.write.format("delta").save(path)
    (row,) = read_table(spark, str(out), "fleet").collect()
    assert row["gateway"] == "gw-1" and row["status"] == "online"
    assert row["last_seen_ms"] is None


@pytest.mark.timeout(300)  # two silver runs, OPTIMIZE and VACUUM
def test_maintain_compacts_and_vacuums_without_changing_a_row(
    spark: SparkSession, tmp_path: Path
) -> None:
    root, out = tmp_path / "landing", tmp_path / "tables"
    topic = "devices/m1/power"
    for n in range(2):  # two runs: a merge adds small files to the partition
        seqs = range(n * 5 + 1, n * 5 + 6)
        rows = [bronze_row(seq, topic, point_payload(seq, T0 + seq)) for seq in seqs]
        write_bronze(root, f"part-{n}.json.gz", rows, ingest_ms=T0 + n)
        silver.run(spark, str(root), str(out), silver.SilverParams())
    before = sorted(read_table(spark, str(out), "points").collect())
    points = Path(table_path(str(out), "points"))
    on_disk = len(list(points.rglob("*.parquet")))

    params = maintain.MaintainParams(vacuum_hours=0, only=("points",))
    result = maintain.run(spark, "", str(out), params)

    assert list(result["tables"]) == ["points"]
    assert result["tables"]["points"]["files_before"] > result["tables"]["points"]["files_after"]
    assert result["tables"]["points"]["files_after"] == 1
    assert len(list(points.rglob("*.parquet"))) == 1 < on_disk  # replaced files deleted
    assert sorted(read_table(spark, str(out), "points").collect()) == before
    assert silver.run(spark, str(root), str(out), silver.SilverParams())["files"] == 0
    with pytest.raises(ValueError, match="vacuum-hours"):
        maintain.run(spark, "", str(out), maintain.MaintainParams(vacuum_hours=-1))
    with pytest.raises(ValueError, match="no such table pionts"):
        maintain.run(spark, "", str(out), maintain.MaintainParams(only=("pionts",)))
