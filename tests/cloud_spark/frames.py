"""Tiny silver frames for transform tests (rows built by hand, schema from cloud_spark)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from cloud_spark import schemas
from tests.cloud_spark.conftest import T0


def _date(ms: int) -> dt.date:
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC).date()


def _ts(ms: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC).replace(tzinfo=None)


def point(
    seq: int,
    ms: int,
    value: float | str | None,
    *,
    quality: str = "good",
    device: str = "m1",
    name: str = "power",
    gateway: str = "gw-1",
    received_ms: int | None = None,
    ingest_ms: int | None = None,
) -> dict[str, Any]:
    """One silver point row: ``value`` float → number, str → string, None → null."""
    number = isinstance(value, int | float)
    return {
        "gateway": gateway,
        "epoch": "e-1",
        "seq": seq,
        "device": device,
        "point": name,
        "event_ms": ms,
        "event_ts": _ts(ms),
        "value_num": float(value) if number else None,  # type: ignore[arg-type]
        "value_str": value if isinstance(value, str) else None,
        "value_type": "number" if number else "string" if isinstance(value, str) else "null",
        "unit": None,
        "quality": quality,
        "received_ms": ms if received_ms is None else received_ms,
        "ingest_ms": ms + 100 if ingest_ms is None else ingest_ms,
        "is_late": False,
        "copies": 1,
        "event_date": _date(ms),
    }


def points(spark: SparkSession, rows: Sequence[dict[str, Any]]) -> DataFrame:
    return spark.createDataFrame(list(rows), schemas.POINTS)


def status(spark: SparkSession, rows: Sequence[tuple[int, str, str]]) -> DataFrame:
    """``(seq, device, online|offline)``; event time T0 + seq minutes."""
    return spark.createDataFrame(
        [
            {
                "gateway": "gw-1",
                "epoch": "e-1",
                "seq": seq,
                "device": device,
                "status": value,
                "event_ms": T0 + seq * 60_000,
                "event_ts": _ts(T0 + seq * 60_000),
                "ingest_ms": T0 + seq * 60_000,
                "copies": 1,
                "event_date": _date(T0 + seq * 60_000),
            }
            for seq, device, value in rows
        ],
        schemas.STATUS,
    )


def ledger(spark: SparkSession, rows: Sequence[tuple[str, int, int]], **extra: Any) -> DataFrame:
    """``(epoch, seq, copies)`` rows of silver/messages for gateway gw-1."""
    return spark.createDataFrame(
        [
            {
                "gateway": "gw-1",
                "epoch": epoch,
                "seq": seq,
                "kind": "point",
                "status": "ok",
                "reason": None,
                "copies": copies,
                "conflict": extra.get("conflict", {}).get(seq, False),
                "local_topic": "devices/m1/power",
                "received_ms": extra.get("received", {}).get(seq, T0 + seq * 1000),
                "ingest_ms": extra.get("ingest", {}).get(seq, T0 + seq * 1000 + 100),
                "event_date": _date(T0),
            }
            for epoch, seq, copies in rows
        ],
        schemas.MESSAGES,
    )


def table(spark: SparkSession, schema_name: str, rows: Sequence[dict[str, Any]]) -> DataFrame:
    """Rows for any silver schema; missing columns are null, times filled from event_ms."""
    schema = getattr(schemas, schema_name)
    full = []
    for row in rows:
        filled = {field.name: None for field in schema.fields}
        filled.update({"gateway": "gw-1", "epoch": "e-1", "copies": 1})
        filled.update(row)
        if filled.get("event_ms") is not None:
            filled.setdefault("event_ts", None)
            filled["event_ts"] = filled["event_ts"] or _ts(filled["event_ms"])
            filled["event_date"] = filled["event_date"] or _date(filled["event_ms"])
        full.append(filled)
    return spark.createDataFrame(full, schema)
