"""rollups: sample statistics and the time-weighted average, worked by hand."""

from __future__ import annotations

import datetime as dt
import math

import pytest
from pyspark.sql import Row, SparkSession
from pyspark.testing import assertDataFrameEqual

from cloud_spark.jobs.rollups import RollupParams, parse_grain, rollup
from tests.cloud_spark.conftest import T0
from tests.cloud_spark.frames import point, points

S = 1000  # ms
START = dt.datetime(2024, 6, 3, 16, 0, 0)  # T0 as a naive UTC timestamp


def at(seconds: int) -> dt.datetime:
    return START + dt.timedelta(seconds=seconds)


COLUMNS = [
    "grain",
    "window_start",
    "count",
    "min",
    "max",
    "avg",
    "stddev",
    "sum",
    "first",
    "last",
    "twa",
    "covered_s",
]


def test_time_weighted_average_worked_by_hand(spark: SparkSession) -> None:
    """Change-only reporting: a value holds until the next sample (at most max_hold = 120 s).

    samples (s after T0):   0 → 10,   15 → 20,   45 → 5,   70 → 8 (last one)

    1 min windows:
      [0, 60)    10 for 15 s, 20 for 30 s, 5 for 15 s  → (150 + 600 + 75) / 60 = 13.75
                 arithmetic mean (10 + 20 + 5) / 3 = 11.667: the TWA is not the mean
      [60, 120)  5 for 10 s (carried in), 8 for 50 s   → (50 + 400) / 60      = 7.5
      [120, 180) 8 for 60 s, no sample in the window   → 8, count 0
      [180, 240) 8 for 10 s until 70 + 120 = 190 s     → 8 over 10 s covered
    15 min window [0, 900): Σ value·s = 825 + 450 + 480 + 80 = 1835 over 190 s
                            → 9.6578947…, mean of the 4 samples = 10.75
    stddev (sample) of 10, 20, 5 = sqrt(116.667 / 2) = 7.6376; of 10, 20, 5, 8 = sqrt(126.75/3)
    """
    frame = points(
        spark,
        [
            point(1, T0, 10),
            point(2, T0 + 15 * S, 20),
            point(3, T0 + 45 * S, 5),
            point(4, T0 + 70 * S, 8),
        ],
    )
    got = rollup(frame, RollupParams(grains=("1m", "15m"), max_hold_ms=120 * S))
    assertDataFrameEqual(
        got.select(*COLUMNS),
        [
            Row(
                grain="1m",
                window_start=at(0),
                count=3,
                min=5.0,
                max=20.0,
                avg=35 / 3,
                stddev=math.sqrt(175 / 3),
                sum=35.0,
                first=10.0,
                last=5.0,
                twa=13.75,
                covered_s=60.0,
            ),
            Row(
                grain="1m",
                window_start=at(60),
                count=1,
                min=8.0,
                max=8.0,
                avg=8.0,
                stddev=None,
                sum=8.0,
                first=8.0,
                last=8.0,
                twa=7.5,
                covered_s=60.0,
            ),
            Row(
                grain="1m",
                window_start=at(120),
                count=0,
                min=None,
                max=None,
                avg=None,
                stddev=None,
                sum=None,
                first=None,
                last=None,
                twa=8.0,
                covered_s=60.0,
            ),
            Row(
                grain="1m",
                window_start=at(180),
                count=0,
                min=None,
                max=None,
                avg=None,
                stddev=None,
                sum=None,
                first=None,
                last=None,
                twa=8.0,
                covered_s=10.0,
            ),
            Row(
                grain="15m",
                window_start=at(0),
                count=4,
                min=5.0,
                max=20.0,
                avg=10.75,
                stddev=6.5,
                sum=43.0,
                first=10.0,
                last=8.0,
                twa=1835 / 190,
                covered_s=190.0,
            ),
        ],
    )


def test_bad_samples_end_a_hold_but_are_not_averaged(spark: SparkSession) -> None:
    """0 → 10, 20 → bad (999), 40 → 4, max_hold 20 s: 10 holds 20 s, nothing, 4 holds 20 s."""
    frame = points(
        spark,
        [point(1, T0, 10), point(2, T0 + 20 * S, 999, quality="bad"), point(3, T0 + 40 * S, 4)],
    )
    got = rollup(frame, RollupParams(grains=("1m",), max_hold_ms=20 * S))
    assertDataFrameEqual(
        got.select("count", "min", "max", "twa", "covered_s"),
        [Row(count=2, min=4.0, max=10.0, twa=(10 * 20 + 4 * 20) / 40, covered_s=40.0)],
    )


def test_values_are_not_held_past_max_hold(spark: SparkSession) -> None:
    """1 at 0 s, 2 at 600 s, max_hold 90 s: 1 covers [0, 90), 2 covers [600, 690)."""
    frame = points(spark, [point(1, T0, 1), point(2, T0 + 600 * S, 2)])
    got = rollup(frame, RollupParams(grains=("1m", "1h"), max_hold_ms=90 * S))
    assertDataFrameEqual(
        got.select("grain", "window_start", "count", "twa", "covered_s"),
        [
            Row(grain="1m", window_start=at(0), count=1, twa=1.0, covered_s=60.0),
            Row(grain="1m", window_start=at(60), count=0, twa=1.0, covered_s=30.0),
            Row(grain="1m", window_start=at(600), count=1, twa=2.0, covered_s=60.0),
            Row(grain="1m", window_start=at(660), count=0, twa=2.0, covered_s=30.0),
            Row(grain="1h", window_start=at(0), count=2, twa=1.5, covered_s=180.0),
        ],
    )


def test_series_are_separate_and_strings_are_not_rolled_up(spark: SparkSession) -> None:
    frame = points(
        spark,
        [
            point(1, T0, 1, device="a"),
            point(2, T0 + 30 * S, 3, device="a"),
            point(3, T0, 100, device="b"),
            point(4, T0 + 10 * S, "RUN", device="b", name="mode"),
            point(5, T0 + 20 * S, 7, device="a", quality="uncertain"),
        ],
    )
    got = rollup(frame, RollupParams(grains=("1m",), max_hold_ms=30 * S, qualities=("good",)))
    assertDataFrameEqual(
        got.select("device", "point", "count", "avg", "twa", "covered_s"),
        [
            # a: 1 over [0,20), uncertain 7 not weighted [20,30), 3 over [30,60)
            Row(device="a", point="power", count=2, avg=2.0, twa=(20 + 90) / 50, covered_s=50.0),
            Row(device="b", point="power", count=1, avg=100.0, twa=100.0, covered_s=30.0),
        ],
    )


def test_grains_must_nest_into_days() -> None:
    assert parse_grain("15m") == 900_000
    assert parse_grain("90s") == 90_000
    for bad in ("", "m", "0m", "5x", "-1h"):
        with pytest.raises(ValueError, match="bad grain"):
            parse_grain(bad)


def test_grains_that_do_not_nest_are_refused(spark: SparkSession) -> None:
    frame = points(spark, [point(1, T0, 1)])
    with pytest.raises(ValueError, match="multiple"):
        rollup(frame, RollupParams(grains=("1m", "7m")))
