"""Aggregates through the jobs on disk: silver (full, then incremental), quality, rollups.

A gateway that sends one point raw and another only as one-minute aggregates; the second
silver run lands a late copy of an aggregate and the rest of the seq. quality finds no hole,
the aggregate's copy is counted once, and the rollups of the aggregated point come from its
windows.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from cloud_spark import tables
from cloud_spark.jobs import quality, rollups, silver
from tests.cloud_spark.conftest import T0, bronze_row, point_payload, write_bronze

M = 60_000
TOPIC = "devices/m1/flow/agg/1m"


def window(start: int, mean: float, count: int) -> str:
    return json.dumps({"ts": start + M, "start": start, "end": start + M, "mean": mean,
                       "min": mean - 1, "max": mean + 1, "first": mean, "last": mean,
                       "count": count, "covered_ms": M, "unit": "m3/h", "partial": False})


@pytest.mark.pipeline  # minutes: `make pipeline-test`
def test_aggregates_through_silver_quality_and_rollups(spark: SparkSession,
                                                        tmp_path: Path) -> None:
    root, out = str(tmp_path / "landing"), str(tmp_path / "tables")
    first = [bronze_row(1, TOPIC, window(T0, 10.0, 60)),
             bronze_row(2, "devices/m1/power", point_payload(5.0, T0 + 1000)),
             bronze_row(3, TOPIC, window(T0 + M, 20.0, 60))]
    write_bronze(tmp_path / "landing", "a.json.gz", first, ingest_ms=T0 + 2 * M)
    silver.run(spark, root, out, silver.SilverParams())
    later = [bronze_row(3, TOPIC, window(T0 + M, 20.0, 60)),  # a copy landed again
             bronze_row(4, TOPIC, window(T0 + 2 * M, 30.0, 60))]
    write_bronze(tmp_path / "landing", "b.json.gz", later, ingest_ms=T0 + 4 * M)
    silver.run(spark, root, out, silver.SilverParams())

    aggs = {r["seq"]: r for r in tables.read_table(spark, out, "aggregates").collect()}
    assert sorted(aggs) == [1, 3, 4] and aggs[3]["copies"] == 2
    quality.run(spark, root, out, quality.QualityParams())
    assert tables.read_table(spark, out, "seq_gaps").count() == 0

    rollups.run(spark, root, out, rollups.RollupParams(grains=("1m", "15m")))
    got = {(r["point"], r["grain"], r["window_start"]): r
           for r in tables.read_table(spark, out, "rollups").collect()}
    start = dt.datetime(2024, 6, 3, 16, 0)
    quarter = got["flow", "15m", start]
    assert quarter["twa"] == pytest.approx(20.0) and quarter["count"] == 180
    assert got["flow", "1m", start + dt.timedelta(minutes=2)]["twa"] == 30.0
    assert got["power", "1m", start]["twa"] == 5.0  # the raw point as before
