"""health: counter increases with resets, error rate, uplink backlog and drops."""

from __future__ import annotations

import datetime as dt

from pyspark.sql import Row, SparkSession
from pyspark.testing import assertDataFrameEqual

from cloud_spark.jobs.health import device_health, link_health
from tests.cloud_spark.conftest import T0
from tests.cloud_spark.frames import table

MIN = 60_000
HOUR = dt.datetime(2024, 6, 3, 16)


def test_device_health_sums_counter_increases_across_a_reset(spark: SparkSession) -> None:
    samples = [
        # minute, requests, timeouts, crc_errors, latency
        (0, 10, 1, 0, 10.0),
        (10, 20, 2, 1, 20.0),
        (20, 5, 0, 0, 30.0),  # the bridge restarted: counters start again
        (30, 15, 1, 0, 40.0),
        (70, 25, 1, 0, 50.0),  # next hour
    ]
    frame = table(
        spark,
        "DEVICE_DIAGNOSTICS",
        [
            {
                "seq": n,
                "device": "m1",
                "event_ms": T0 + m * MIN,
                "requests": r,
                "timeouts": t,
                "crc_errors": c,
                "exceptions": 0,
                "stale_frames": 0,
                "latency_ms": lat,
            }
            for n, (m, r, t, c, lat) in enumerate(samples)
        ],
    )
    got = device_health(frame, window_ms=60 * MIN)
    assertDataFrameEqual(
        got.select(
            "window_start",
            "samples",
            "requests",
            "timeouts",
            "crc_errors",
            "error_rate",
            "latency_avg_ms",
            "latency_max_ms",
            "counter_resets",
        ),
        [
            # increases: +0 (first), +10/+1/+1, +5/0/0 (reset), +10/+1/0 → 25 requests, 3 errors
            Row(
                window_start=HOUR,
                samples=4,
                requests=25,
                timeouts=2,
                crc_errors=1,
                error_rate=3 / 25,
                latency_avg_ms=25.0,
                latency_max_ms=40.0,
                counter_resets=1,
            ),
            Row(
                window_start=HOUR + dt.timedelta(hours=1),
                samples=1,
                requests=10,
                timeouts=0,
                crc_errors=0,
                error_rate=0.0,
                latency_avg_ms=50.0,
                latency_max_ms=50.0,
                counter_resets=0,
            ),
        ],
    )


def test_link_health_backlog_and_drops(spark: SparkSession) -> None:
    rows = [
        (0, True, 0, 0, None, 0),
        (30, False, 50, 5000, 30.0, 0),
        (45, False, 120, 12000, 45.5, 3),
        (70, True, 0, 0, None, 3),
    ]
    frame = table(
        spark,
        "UPLINK_DIAGNOSTICS",
        [
            {
                "seq": n,
                "event_ms": T0 + m * MIN,
                "connected": c,
                "backlog_messages": b,
                "backlog_bytes": by,
                "oldest_age_s": age,
                "dropped": d,
            }
            for n, (m, c, b, by, age, d) in enumerate(rows)
        ],
    )
    got = link_health(frame, window_ms=60 * MIN)
    assertDataFrameEqual(
        got.drop("gateway", "event_date"),
        [
            Row(
                window_start=HOUR,
                samples=3,
                connected_pct=100 / 3,
                backlog_max_messages=120,
                backlog_max_bytes=12000,
                oldest_age_max_s=45.5,
                dropped=3,
            ),
            Row(
                window_start=HOUR + dt.timedelta(hours=1),
                samples=1,
                connected_pct=100.0,
                backlog_max_messages=0,
                backlog_max_bytes=0,
                oldest_age_max_s=None,
                dropped=0,
            ),
        ],
    )
