"""availability: outages from silence and offline status, uptime, link outages."""

from __future__ import annotations

import datetime as dt

from pyspark.sql import Row, SparkSession
from pyspark.testing import assertDataFrameEqual

from cloud_spark.jobs.availability import (
    AvailabilityParams,
    device_outages,
    link_outages,
    uptime,
)
from tests.cloud_spark.conftest import T0
from tests.cloud_spark.frames import ledger, point, points, status, table

S = 1000
DAY = dt.date(2024, 6, 3)
PARAMS = AvailabilityParams(
    expected_interval_ms=60 * S, gap_factor=2.0, link_delay_ms=120 * S, link_min_messages=2
)


def fleet(spark: SparkSession):  # type: ignore[no-untyped-def]
    """m1: reports at 0, 60, 120, 600, 660 s.  m2: 0, 60, then 300…660 every 60 s, and
    offline at 120 s, online at 300 s.  m3: 0 and 60 s, then silent.  Horizon: 660 s."""
    rows = [point(n, T0 + s * S, 1, device="m1") for n, s in enumerate([0, 60, 120, 600, 660])]
    m2_times = [0, 60, *range(300, 661, 60)]
    rows += [point(100 + n, T0 + s * S, 1, device="m2") for n, s in enumerate(m2_times)]
    rows += [point(200 + n, T0 + s * S, 1, device="m3") for n, s in enumerate([0, 60])]
    rows.append(point(300, T0 + 90 * S, None, device="m3", quality="bad"))
    return points(spark, rows), status(spark, [(2, "m2", "offline"), (5, "m2", "online")])


def test_outages_from_silence_and_offline_status_are_merged(spark: SparkSession) -> None:
    pts, sts = fleet(spark)
    got = device_outages(pts, sts, PARAMS).select(
        "device", "start_ms", "end_ms", "duration_s", "cause", "open", "event_date"
    )
    assertDataFrameEqual(
        got,
        [
            # m1: silent from 120 s; due by 180 s; back at 600 s
            Row(
                device="m1",
                start_ms=T0 + 180 * S,
                end_ms=T0 + 600 * S,
                duration_s=420.0,
                cause="silence",
                open=False,
                event_date=DAY,
            ),
            # m2: offline 120-300 s and silent 120-300 s (due at 60 + 60): one outage
            Row(
                device="m2",
                start_ms=T0 + 120 * S,
                end_ms=T0 + 300 * S,
                duration_s=180.0,
                cause="offline+silence",
                open=False,
                event_date=DAY,
            ),
            # m3: last good report at 60 s (bad quality does not count), still silent
            Row(
                device="m3",
                start_ms=T0 + 120 * S,
                end_ms=T0 + 660 * S,
                duration_s=540.0,
                cause="silence",
                open=True,
                event_date=DAY,
            ),
        ],
    )


def test_uptime_per_device_and_day(spark: SparkSession) -> None:
    pts, sts = fleet(spark)
    outages = device_outages(pts, sts, PARAMS)
    got = uptime(pts, sts, outages)
    assertDataFrameEqual(
        got.select("device", "observed_s", "down_s", "uptime_pct", "outages", "event_date"),
        [
            Row(
                device="m1",
                observed_s=660.0,
                down_s=420.0,
                uptime_pct=100 * (1 - 420 / 660),
                outages=1,
                event_date=DAY,
            ),
            Row(
                device="m2",
                observed_s=660.0,
                down_s=180.0,
                uptime_pct=100 * (1 - 180 / 660),
                outages=1,
                event_date=DAY,
            ),
            Row(
                device="m3",
                observed_s=660.0,
                down_s=540.0,
                uptime_pct=100 * (1 - 540 / 660),
                outages=1,
                event_date=DAY,
            ),
        ],
    )


def test_uptime_splits_an_outage_across_midnight(spark: SparkSession) -> None:
    midnight = 1_717_459_200_000  # 2024-06-04T00:00:00Z
    pts = points(
        spark,
        [
            point(1, midnight - 600 * S, 1),
            point(2, midnight - 540 * S, 1),
            point(3, midnight + 300 * S, 1),
        ],
    )
    sts = status(spark, [])
    got = uptime(pts, sts, device_outages(pts, sts, PARAMS))
    # silent from -540 s; due at -480 s; back at +300 s: 480 s down before midnight, 300 after
    assertDataFrameEqual(
        got.select("event_date", "observed_s", "down_s", "outages"),
        [
            Row(event_date=DAY, observed_s=600.0, down_s=480.0, outages=1),
            Row(event_date=dt.date(2024, 6, 4), observed_s=300.0, down_s=300.0, outages=1),
        ],
    )


def test_link_outages_from_diagnostics_and_from_delays(spark: SparkSession) -> None:
    uplink = table(
        spark,
        "UPLINK_DIAGNOSTICS",
        [
            {"seq": n, "event_ms": T0 + s * S, "connected": c}
            for n, (s, c) in enumerate(
                [(0, True), (30, False), (60, False), (90, True), (120, False)]
            )
        ],
    )
    messages = ledger(
        spark,
        [("e-1", seq, 1) for seq in range(1, 7)],
        received={1: T0, 2: T0 + 10 * S, 3: T0 + 20 * S, 4: T0 + 600 * S, 5: T0 + 700 * S,
                  6: T0 + 710 * S},
        ingest={1: T0 + 100, 2: T0 + 500 * S, 3: T0 + 500 * S + 100, 4: T0 + 600 * S + 100,
                5: T0 + 1000 * S, 6: T0 + 710 * S + 100},
    )  # fmt: skip
    # 5 alone landed late (a redelivery): fewer than link_min_messages, not an outage
    got = link_outages(uplink, messages, PARAMS).select(
        "source", "start_ms", "end_ms", "duration_s", "open"
    )
    assertDataFrameEqual(
        got,
        [
            # the diagnostics say 30-90 s and from 120 s on (open); messages 2-3 were
            # received at 10-20 s and landed from 500 s on: one outage, seen by both
            Row(
                source="diagnostics+ingest_delay",
                start_ms=T0 + 10 * S,
                end_ms=T0 + 500 * S,
                duration_s=490.0,
                open=True,
            ),
        ],
    )
