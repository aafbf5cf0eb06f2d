"""Aggregates from the gateway in silver and in rollups, on tiny inline frames."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession

from cloud_spark import schemas
from cloud_spark.jobs import silver
from cloud_spark.jobs import silver_aggregates as sa
from cloud_spark.jobs.rollups import RollupParams, rollup
from tests.cloud_spark.conftest import T0, bronze_frame, bronze_row, point_payload
from tests.cloud_spark.frames import _date, _ts, point, points

M = 60_000
TOPIC = "devices/m1/power/agg/1m"


def agg(start: int, mean: float | None, count: int, covered: int = M, *, lo: float = 0.0,
        hi: float = 0.0, first: float | None = 0.0, last: float | None = 0.0,
        partial: bool = False, **extra: Any) -> str:
    body = {"ts": start + M, "start": start, "end": start + M, "mean": mean, "min": lo,
            "max": hi, "first": first, "last": last, "count": count, "covered_ms": covered,
            "unit": "kW", "partial": partial, **extra}
    return json.dumps(body)


def tables_of(spark: SparkSession, rows: list[dict[str, Any]]) -> dict[str, DataFrame]:
    """The silver tables this test reads, from one parse held in memory."""
    parsed = silver.parse(bronze_frame(spark, rows), silver.SilverParams()).cache()
    return {"aggregates": sa.aggregates(parsed), "quarantine": silver.quarantine(parsed),
            "messages": silver.messages(parsed), "points": silver.points(parsed)}


def aggregate_row(seq: int, start: int, window_ms: int, mean: float | None, count: int,
                  covered: int, lo: float, hi: float, first: float | None,
                  last: float | None, partial: bool = False) -> dict[str, Any]:
    """One ``silver/aggregates`` row."""
    return {"gateway": "gw-1", "epoch": "e-1", "seq": seq, "device": "m1", "point": "power",
            "window": f"{window_ms // M}m", "window_ms": window_ms, "start_ms": start,
            "end_ms": start + window_ms, "window_start": _ts(start),
            "window_end": _ts(start + window_ms), "mean": mean, "min": float(lo),
            "max": float(hi), "first": None if first is None else float(first),
            "last": None if last is None else float(last), "count": count, "covered_ms": covered,
            "unit": "kW", "partial": partial, "received_ms": start + window_ms,
            "ingest_ms": start + window_ms + 100, "copies": 1, "event_date": _date(start)}


def aggregates_frame(spark: SparkSession, rows: list[dict[str, Any]]) -> DataFrame:
    return spark.createDataFrame(rows, schemas.AGGREGATES)


def test_aggregates_land_in_their_table_with_their_ids(spark: SparkSession) -> None:
    rows = [
        bronze_row(1, TOPIC, agg(T0, 12.5, 60, lo=10, hi=15, first=11, last=14)),
        bronze_row(1, TOPIC, agg(T0, 12.5, 60, lo=10, hi=15, first=11, last=14)),  # a copy
        bronze_row(2, "devices/m1/power/agg/15m", agg(T0, None, 0, 0, first=None, last=None,
                                                      partial=True)),
        bronze_row(4, TOPIC, agg(T0 + M, 1.0, "x")),  # type: ignore[arg-type]
        bronze_row(5, TOPIC, agg(T0 + M, 1.0, 1).replace(f'"end": {T0 + 2 * M}',
                                                         f'"end": {T0 + M}')),
        bronze_row(6, "devices/m1/power/agg", agg(T0, 1.0, 1)),  # no window: unknown
        bronze_row(7, "devices/m1/power", point_payload(3.0, T0)),
    ]
    out = tables_of(spark, rows)
    got = {r["seq"]: r for r in out["aggregates"].collect()}
    assert sorted(got) == [1, 2]
    one = got[1]
    assert (one["device"], one["point"], one["window"], one["window_ms"]) == (
        "m1", "power", "1m", M)
    assert (one["start_ms"], one["end_ms"], one["mean"], one["min"], one["max"], one["first"],
            one["last"], one["count"], one["covered_ms"], one["unit"], one["partial"],
            one["copies"]) == (T0, T0 + M, 12.5, 10.0, 15.0, 11.0, 14.0, 60, M, "kW", False, 2)
    assert one["window_start"] == dt.datetime(2024, 6, 3, 16, 0)
    assert one["event_date"] == dt.date(2024, 6, 3)
    assert got[2]["window_ms"] == 15 * M and got[2]["mean"] is None and got[2]["partial"]
    reasons = {r["seq"]: r["reason"] for r in out["quarantine"].collect()}
    assert reasons[4] == "wrong_type:count"
    assert reasons[5] == "invalid_value:end"
    assert reasons[6] == "unknown_topic"
    # the ledger holds every id, aggregates as their own kind: quality sees every seq
    kinds = {r["seq"]: (r["kind"], r["status"]) for r in out["messages"].collect()}
    assert kinds[1] == ("aggregate", "ok") and kinds[4] == ("aggregate", "quarantined")
    assert sorted(kinds) == [1, 2, 4, 5, 6, 7]
    assert [r["seq"] for r in out["points"].collect()] == [7]


def test_rollups_of_an_instead_point_come_from_its_aggregates(spark: SparkSession) -> None:
    """Two 1-minute windows of a point that sends only aggregates; the second was sent twice
    (killed between publishing and saving: the second copy is partial and covers less).

    [0, 1m):  mean 10 over 60 s, 60 samples, min 8, max 12, first 9, last 11
    [1m, 2m): mean 20 over 30 s, 30 samples, min 15, max 25, first 16, last 24
              (copy: mean 18 over 20 s, partial)
    15 min [0, 15m): twa = (10·60 + 20·30) / 90 = 13.33…, count 90, min 8, max 25,
                     first 9, last 24, covered 90 s
    """
    rows = [
        aggregate_row(1, T0, M, 10.0, 60, M, 8, 12, 9, 11),
        aggregate_row(2, T0 + M, M, 20.0, 30, 30_000, 15, 25, 16, 24, partial=True),
        aggregate_row(3, T0 + M, M, 18.0, 20, 20_000, 15, 22, 16, 20, partial=True),
    ]
    aggs = aggregates_frame(spark, rows)
    grains = {"1m": M, "15m": 15 * M, "30s": 30_000}
    got = {(r["grain"], r["window_start"]): r
           for r in sa.rollups_from_aggregates(aggs, grains).collect()}
    assert not [k for k in got if k[0] == "30s"]  # a 1 m window does not split into 30 s
    start = dt.datetime(2024, 6, 3, 16, 0)
    quarter = got["15m", start]
    assert quarter["twa"] == pytest.approx((10 * 60 + 20 * 30) / 90)
    assert (quarter["count"], quarter["min"], quarter["max"], quarter["first"], quarter["last"],
            quarter["covered_s"]) == (90, 8.0, 25.0, 9.0, 24.0, 90.0)
    assert quarter["avg"] is None and quarter["stddev"] is None
    minute = got["1m", start + dt.timedelta(minutes=1)]
    assert (minute["twa"], minute["count"], minute["covered_s"]) == (20.0, 30, 30.0)

    # the rollups job's rule: raw samples win where there are some, aggregates fill the rest
    raw = points(spark, [point(9, T0 + 5_000, 100.0)])
    params = RollupParams(grains=("1m", "15m"), max_hold_ms=30_000)
    merged = sa.with_aggregates(rollup(raw, params), sa.rollups_from_aggregates(
        aggs, {"1m": M, "15m": 15 * M}))
    rows_by = {(r["grain"], r["window_start"]): r for r in merged.collect()}
    assert rows_by["1m", start]["twa"] == 100.0  # the raw sample's window
    assert rows_by["1m", start + dt.timedelta(minutes=1)]["twa"] == 20.0  # aggregates only
    assert rows_by["15m", start]["twa"] == 100.0  # the quarter had a raw sample
    assert len(rows_by) == 3


def test_rows_of_several_windows_use_the_shortest(spark: SparkSession) -> None:
    rows = [aggregate_row(1, T0, M, 10.0, 60, M, 0, 0, 0, 0),
            aggregate_row(2, T0, 15 * M, 99.0, 900, 15 * M, 0, 0, 0, 0)]
    got = sa.rollups_from_aggregates(aggregates_frame(spark, rows), {"15m": 15 * M}).collect()
    assert [(r["twa"], r["count"]) for r in got] == [(10.0, 60)]
