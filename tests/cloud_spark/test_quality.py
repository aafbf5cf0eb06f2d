"""quality: missing sequence numbers, out-of-range and stuck values, clock skew."""

from __future__ import annotations

from pyspark.sql import Row, SparkSession
from pyspark.testing import assertDataFrameEqual

from cloud_spark.jobs.quality import (
    QualityParams,
    clock_skew,
    out_of_range,
    ranges_frame,
    seq_gaps,
    seq_summary,
    stuck,
)
from tests.cloud_spark.conftest import T0
from tests.cloud_spark.frames import ledger, point, points

S = 1000


def test_missing_sequence_numbers_per_gateway_epoch(spark: SparkSession) -> None:
    messages = ledger(
        spark,
        [
            ("e-1", 1, 1),
            ("e-1", 2, 3),
            ("e-1", 4, 1),
            ("e-1", 7, 2),
            ("e-2", 1, 1),
            ("e-2", 2, 1),
            ("e-2", 3, 1),
            ("e-3", 3, 1),
            ("e-3", 4, 1),
        ],
        conflict={7: True},
    )
    assertDataFrameEqual(
        seq_summary(messages),
        [
            Row(
                gateway="gw-1",
                epoch="e-1",
                first_seq=1,
                last_seq=7,
                received=4,
                missing=3,
                duplicates=3,
                conflicts=1,
            ),
            Row(
                gateway="gw-1",
                epoch="e-2",
                first_seq=1,
                last_seq=3,
                received=3,
                missing=0,
                duplicates=0,
                conflicts=0,
            ),
            Row(
                gateway="gw-1",
                epoch="e-3",
                first_seq=3,
                last_seq=4,
                received=2,
                missing=2,
                duplicates=0,
                conflicts=0,
            ),
        ],
    )
    assertDataFrameEqual(
        seq_gaps(messages),
        [
            Row(gateway="gw-1", epoch="e-1", missing_from=3, missing_to=3, missing=1),
            Row(gateway="gw-1", epoch="e-1", missing_from=5, missing_to=6, missing=2),
            Row(gateway="gw-1", epoch="e-3", missing_from=1, missing_to=2, missing=2),
        ],
    )


def test_out_of_range_runs(spark: SparkSession) -> None:
    values = [50, 120, 130, 50, -5, 60]
    frame = points(
        spark,
        [point(n, T0 + n * S, v) for n, v in enumerate(values)]
        + [point(10, T0, 1e6, name="other")],
    )
    ranges = ranges_frame(spark, QualityParams(ranges=(("power", 0.0, 100.0),)))
    got = out_of_range(frame, ranges).select(
        "point", "check", "start_ms", "end_ms", "samples", "value", "detail"
    )
    assertDataFrameEqual(
        got,
        [
            Row(
                point="power",
                check="out_of_range",
                start_ms=T0 + S,
                end_ms=T0 + 2 * S,
                samples=2,
                value=130.0,
                detail="outside [0.0, 100.0]",
            ),
            Row(
                point="power",
                check="out_of_range",
                start_ms=T0 + 4 * S,
                end_ms=T0 + 4 * S,
                samples=1,
                value=-5.0,
                detail="outside [0.0, 100.0]",
            ),
        ],
    )


def test_open_ended_ranges(spark: SparkSession) -> None:
    frame = points(spark, [point(1, T0, 5000), point(2, T0 + S, -1e9)])
    ranges = ranges_frame(spark, QualityParams(ranges=(("power", None, 3000.0),)))
    assertDataFrameEqual(
        out_of_range(frame, ranges).select("value", "detail"),
        [Row(value=5000.0, detail="outside [-inf, 3000.0]")],
    )


def test_stuck_values(spark: SparkSession) -> None:
    half_hour = 1800 * S
    flat = [point(n, T0 + n * half_hour, 5) for n in range(5)]  # 0 … 2 h, 5 samples
    flat.append(point(5, T0 + 4 * half_hour + 100 * S, 6))
    short = [point(10 + n, T0 + n * half_hour, 9, device="m2") for n in range(4)]
    got = stuck(points(spark, flat + short), stuck_after_ms=3600 * S, min_samples=5)
    assertDataFrameEqual(
        got.select("device", "check", "start_ms", "end_ms", "samples", "value", "detail"),
        [
            Row(
                device="m1",
                check="stuck",
                start_ms=T0,
                end_ms=T0 + 4 * half_hour,
                samples=5,
                value=5.0,
                detail="same value for 7200 s",
            ),
        ],
    )


def test_clock_skew(spark: SparkSession) -> None:
    frame = points(
        spark,
        [
            point(1, T0, 1, received_ms=T0),
            point(2, T0, 1, received_ms=T0 + 1 * S),
            point(3, T0, 1, received_ms=T0 + 120 * S, ingest_ms=T0 + 121 * S),
            point(4, T0, 1, received_ms=T0 - 90 * S),
            point(5, T0, 1, received_ms=T0 + 200 * S, ingest_ms=T0 + 100 * S),
        ],
    )
    got = clock_skew(frame, skew_threshold_ms=60 * S)
    assertDataFrameEqual(
        got.select(
            "device",
            "samples",
            "skewed",
            "min_skew_s",
            "max_skew_s",
            "median_skew_s",
            "gateway_ahead",
            "median_ingest_lag_s",
            "max_ingest_lag_s",
        ),
        [
            Row(
                device="m1",
                samples=5,
                skewed=3,
                min_skew_s=-90.0,
                max_skew_s=200.0,
                median_skew_s=1.0,
                gateway_ahead=1,
                median_ingest_lag_s=0.1,  # ingest 100 ms after the event (frames.point)
                max_ingest_lag_s=121.0,
            ),
        ],
    )
