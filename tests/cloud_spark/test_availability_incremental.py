"""Incremental ``availability``: runs after each silver batch equal one full run.

Three days of two devices, the gateway's status and the uplink's diagnostics, landed in three
batches: the second brings late samples that shorten a silence two days back, a new day with a
killed gateway and a device that falls silent until the end of the data (an open outage); the
third ends that outage.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession
from pyspark.testing import assertDataFrameEqual

from cloud_spark import contract as c
from cloud_spark.jobs import availability, silver
from cloud_spark.tables import read_table
from tests.cloud_spark.conftest import T0, bronze_row, point_payload, write_bronze

MIN = 60_000
DAY = 86_400_000
START = (T0 // DAY) * DAY  # midnight before T0
PARAMS = availability.AvailabilityParams(expected_interval_ms=10 * MIN)
GOLD = ("outages", "gateway_outages", "link_outages", "availability")


class Site:
    """Bronze rows of one gateway, numbered in order."""

    def __init__(self) -> None:
        self.seq = 0

    def _next(self) -> int:
        self.seq += 1
        return self.seq

    def points(self, device: str, start: int, end: int, every: int = 5 * MIN) -> list[Any]:
        return [
            bronze_row(self._next(), f"devices/{device}/power", point_payload(1.0, ms),
                       received_ms=ms)
            for ms in range(start, end, every)
        ]  # fmt: skip

    def diagnostics(self, start: int, end: int, down: tuple[int, int] | None = None) -> list[Any]:
        rows = []
        for ms in range(start, end, 5 * MIN):
            connected = down is None or not down[0] <= ms < down[1]
            payload = {"ts": ms, "connected": connected, "backlog_messages": 0,
                       "backlog_bytes": 0, "oldest_age_s": None, "dropped": 0}  # fmt: skip
            rows.append(bronze_row(self._next(), c.UPLINK_DIAGNOSTICS_TOPIC,
                                   json.dumps(payload), received_ms=ms))  # fmt: skip
        return rows

    def device_status(self, device: str, ms: int, value: str) -> dict[str, Any]:
        return bronze_row(self._next(), f"devices/{device}/status", value, received_ms=ms)

    def gateway_status(self, ms: int, value: str, *, will: bool = False) -> dict[str, Any]:
        row = bronze_row(1, c.GATEWAY_STATUS_TOPIC, value, received_ms=ms, ingest_ms=ms + 50)
        row["seq"] = None
        if will:
            row["received_ms"] = None  # published by the cloud broker: its landing time only
        return row


def batches() -> list[list[dict[str, Any]]]:
    site = Site()
    d1, d2, d3 = START, START + DAY, START + 2 * DAY
    first = [site.gateway_status(d1 + MIN, "online")]
    first += [site.device_status(d, d1 + 30_000, "offline") for d in ("m1", "m2")]
    first += [site.device_status(d, d1 + 40_000, "online") for d in ("m1", "m2")]
    first += site.points("m1", d1 + MIN, d3)
    first += site.points("m2", d1 + MIN, d2 + 6 * 60 * MIN)  # silent from 06:00 on day 2 …
    first += site.points("m2", d2 + 9 * 60 * MIN, d3)  # … until 09:00
    first += site.diagnostics(d1 + MIN, d3, down=(d2 + 60 * MIN, d2 + 90 * MIN))
    second = site.points("m2", d2 + 7 * 60 * MIN, d2 + 8 * 60 * MIN)  # late: 07:00-08:00
    kill, back = d3 + 5 * 60 * MIN, d3 + 5 * 60 * MIN + 12 * MIN
    second += site.points("m1", d3, kill) + site.points("m1", back, d3 + 10 * 60 * MIN)
    second += site.points("m2", d3, kill) + site.points("m2", back, d3 + 14 * 60 * MIN)
    second += site.diagnostics(d3, kill) + site.diagnostics(back, d3 + 14 * 60 * MIN)
    second.append(site.gateway_status(kill + 20_000, "offline", will=True))
    second += [site.device_status(d, back - 30_000, "offline") for d in ("m1", "m2")]
    second += [site.device_status(d, back - 20_000, "online") for d in ("m1", "m2")]
    second.append(site.gateway_status(back, "online"))
    third = site.points("m1", d3 + 16 * 60 * MIN, d3 + 18 * 60 * MIN)  # m1 back at 16:00
    third += site.points("m2", d3 + 14 * 60 * MIN, d3 + 18 * 60 * MIN)
    third += site.diagnostics(d3 + 14 * 60 * MIN, d3 + 18 * 60 * MIN)
    return [first, second, third]


@pytest.mark.pipeline  # minutes: `make pipeline-test`
@pytest.mark.timeout(900)  # a dozen Spark jobs on a busy 2-core machine
def test_incremental_availability_equals_a_full_run(spark: SparkSession, tmp_path: Path) -> None:
    root, inc, full = tmp_path / "landing", tmp_path / "incremental", tmp_path / "full"
    results = []
    for number, rows in enumerate(batches()):
        write_bronze(root, f"part-{number}.json.gz", rows, ingest_ms=START + (number + 3) * DAY)
        silver.run(spark, str(root), str(inc), silver.SilverParams())
        results.append(availability.run(spark, "", str(inc), PARAMS))
    assert results[0]["recomputed_days"] == "all"
    # the second batch reaches back to day 2 (late samples): days 2 and 3
    assert results[1]["recomputed_days"] == 2
    # the third: day 3, where m1's silence was still open
    assert results[2]["recomputed_days"] == 1
    silver.run(spark, str(root), str(full), silver.SilverParams(full=True))
    availability.run(spark, "", str(full), PARAMS)
    for name in GOLD:
        assertDataFrameEqual(
            read_table(spark, str(inc), name), read_table(spark, str(full), name),
            checkRowOrder=False,
        )  # fmt: skip
    assert read_table(spark, str(inc), "gateway_outages").count() == 1  # the kill on day 3
    outages = read_table(spark, str(inc), "outages").orderBy("start_ms").collect()
    # m2 silent 06:00-07:00 and 08:00-09:00 (the late samples split the gap), m1 10:05-16:00
    assert [(row["device"], row["cause"]) for row in outages] == [
        ("m2", "silence"), ("m2", "silence"), ("m1", "silence")
    ]
    assert not any(row["open"] for row in outages)
    again = availability.run(spark, "", str(inc), PARAMS)
    assert again["recomputed_days"] == 0
    assert availability.run(
        spark, "", str(inc), availability.AvailabilityParams(
            expected_interval_ms=10 * MIN, full=True)
    )["recomputed_days"] == "all"  # fmt: skip
