"""Incremental ``quality`` and ``health``: runs after each silver batch equal one full run.

One gateway's stream over four days (points every 30 minutes, device and uplink
diagnostics), numbered in order and landed in three batches. The second batch brings
messages held back from day 2 (late records landing in an earlier day): one cuts an
out-of-range run and one a flat run that both go on across midnight from day 1, one makes
a flat run long enough to be flagged, one fills a diagnostics window, two fill a hole in the
seqs. The third batch starts day 4 with the diagnostics counters reset at midnight. One
message is never delivered (a hole that stays).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession
from pyspark.testing import assertDataFrameEqual

from cloud_spark import contract as c
from cloud_spark.jobs import health, quality, silver
from cloud_spark.tables import read_table
from tests.cloud_spark.conftest import T0, bronze_row, point_payload, write_bronze
from tests.cloud_spark.frames import table

MIN = 60_000
HOUR = 60 * MIN
DAY = 86_400_000
D1 = (T0 // DAY) * DAY  # midnight before T0
D2, D3, D4 = D1 + DAY, D1 + 2 * DAY, D1 + 3 * DAY
QUALITY = quality.QualityParams(
    ranges=(("power", 0.0, 100.0),), stuck_after_ms=2 * HOUR, stuck_min_samples=5
)
HEALTH = health.HealthParams()
GOLD = (
    "seq_ranges", "seq_summary", "seq_gaps", "quality_flags", "clock_skew",
    "device_health", "link_health",
)  # fmt: skip

#: held back from the first batch, landed with the second
HELD = {
    ("power", D2 + 75 * MIN),  # an in-range value inside the out-of-range run
    ("temp", D2 + 5 * HOUR + 15 * MIN),  # another value inside the flat run
    ("level", D2 + 30 * MIN),  # the fifth sample of a flat run: now it is stuck
    ("diagnostics", D2 + 10 * HOUR + 15 * MIN),
    ("power", D2 + 3 * HOUR),
    ("power", D2 + 3 * HOUR + 30 * MIN),
}
LOST = ("uplink", D3 + 15 * HOUR)


@dataclass(frozen=True)
class Message:
    kind: str
    ms: int
    topic: str
    payload: str


def _grid(k: int, ms: int) -> list[Message]:
    """The five messages of one 30-minute slot (``k``: slot number)."""
    power = 150.0 if D1 + 22 * HOUR <= ms <= D2 + 2 * HOUR else 50.0 + k % 3
    temp = 5.0 if ms >= D1 + 20 * HOUR else 20.0 + k % 5
    level = 3.0 if D1 + 23 * HOUR <= ms <= D2 + HOUR else 10.0 + k % 2
    since = k - (D4 - D1) // (30 * MIN) if ms >= D4 else k  # counters restart on day 4
    base = 3 if ms >= D4 else 0
    diagnostics = {
        "ts": ms, "requests": base + 10 * since, "timeouts": since // 4,
        "crc_errors": since // 10, "exceptions": 0, "stale_frames": 0,
        "latency_ms": 5.0 + k % 7,
    }  # fmt: skip
    uplink = {
        "ts": ms, "connected": k % 9 != 0, "backlog_messages": k % 13,
        "backlog_bytes": 100 * (k % 13), "oldest_age_s": None, "dropped": since // 20,
    }  # fmt: skip
    return [
        Message("power", ms, "devices/m1/power", point_payload(power, ms)),
        Message("temp", ms, "devices/m1/temp", point_payload(temp, ms)),
        Message("level", ms, "devices/m1/level", point_payload(level, ms)),
        Message("diagnostics", ms, "devices/m1/diagnostics", json.dumps(diagnostics)),
        Message("uplink", ms, c.UPLINK_DIAGNOSTICS_TOPIC, json.dumps(uplink)),
    ]


def stream() -> list[Message]:
    """Every message of the four days (day 4 until 06:00), in the gateway's order."""
    messages = []
    for k, ms in enumerate(range(D1, D4 + 6 * HOUR, 30 * MIN)):
        messages += _grid(k, ms)
    late_diag = {
        "ts": D2 + 10 * HOUR + 15 * MIN, "requests": 10 * 68 + 5, "timeouts": 17,
        "crc_errors": 6, "exceptions": 0, "stale_frames": 0, "latency_ms": 9.0,
    }  # fmt: skip
    extra_ms = (D2 + 75 * MIN, D2 + 5 * HOUR + 15 * MIN, D2 + 10 * HOUR + 15 * MIN)
    messages += [
        Message("power", extra_ms[0], "devices/m1/power", point_payload(60.0, extra_ms[0])),
        Message("temp", extra_ms[1], "devices/m1/temp", point_payload(6.0, extra_ms[1])),
        Message("diagnostics", extra_ms[2], "devices/m1/diagnostics", json.dumps(late_diag)),
    ]
    return sorted(messages, key=lambda m: m.ms)  # stable: the slot's order stays


def batches() -> list[list[dict[str, Any]]]:
    landed: list[list[dict[str, Any]]] = [[], [], []]
    for seq, message in enumerate(stream(), start=1):
        key = (message.kind, message.ms)
        if key == LOST:
            continue
        number = 1 if key in HELD else 0 if message.ms < D3 + 12 * HOUR else (
            1 if message.ms < D4 else 2
        )  # fmt: skip
        landed[number].append(
            bronze_row(seq, message.topic, message.payload, received_ms=message.ms)
        )
    return landed


@pytest.mark.pipeline  # minutes: `make pipeline-test`
@pytest.mark.timeout(900)  # a dozen Spark jobs on a busy 2-core machine
def test_incremental_quality_and_health_equal_a_full_run(
    spark: SparkSession, tmp_path: Path
) -> None:
    root, inc, full = tmp_path / "landing", tmp_path / "incremental", tmp_path / "full"
    results = []
    for number, rows in enumerate(batches()):
        write_bronze(root, f"part-{number}.json.gz", rows, ingest_ms=D3 + 13 * HOUR + number * DAY)
        silver.run(spark, str(root), str(inc), silver.SilverParams())
        results.append(
            (quality.run(spark, "", str(inc), QUALITY), health.run(spark, "", str(inc), HEALTH))
        )
    assert [(q["recomputed_days"], h["recomputed_days"]) for q, h in results] == [
        ("all", "all"), (2, 2), (1, 1),  # the held-back day 2 and day 3; then day 4
    ]  # fmt: skip
    silver.run(spark, str(root), str(full), silver.SilverParams(full=True))
    quality.run(spark, "", str(full), QUALITY)
    health.run(spark, "", str(full), HEALTH)
    for name in GOLD:
        assertDataFrameEqual(
            read_table(spark, str(inc), name), read_table(spark, str(full), name),
            checkRowOrder=False,
        )  # fmt: skip

    gaps = read_table(spark, str(inc), "seq_gaps").collect()
    assert [row["missing"] for row in gaps] == [1]  # the lost message; the held ones arrived
    flags = read_table(spark, str(inc), "quality_flags").orderBy("point", "check", "start_ms")
    runs = [(row["point"], row["check"], row["start_ms"], row["end_ms"]) for row in flags.collect()]
    assert runs == [
        ("level", "stuck", D1 + 23 * HOUR, D2 + HOUR),
        ("power", "out_of_range", D1 + 22 * HOUR, D2 + HOUR),
        ("power", "out_of_range", D2 + 90 * MIN, D2 + 2 * HOUR),
        ("power", "stuck", D1 + 22 * HOUR, D2 + HOUR),
        ("temp", "stuck", D1 + 20 * HOUR, D2 + 5 * HOUR),
        ("temp", "stuck", D2 + 5 * HOUR + 30 * MIN, D4 + 5 * HOUR + 30 * MIN),
    ]  # fmt: skip
    resets = read_table(spark, str(inc), "device_health").where("counter_resets > 0").collect()
    # the reset at midnight of day 4: 3 requests counted from the reset, then +10
    assert [(row["window_start"].day, row["requests"]) for row in resets] == [(6, 3 + 10)]

    again = quality.run(spark, "", str(inc), QUALITY), health.run(spark, "", str(inc), HEALTH)
    assert [result["recomputed_days"] for result in again] == [0, 0]
    changed = quality.QualityParams(ranges=QUALITY.ranges, stuck_after_ms=3 * HOUR)
    assert quality.run(spark, "", str(inc), changed)["recomputed_days"] == "all"
    assert quality.run(spark, "", str(inc), changed)["recomputed_days"] == 0
    seven_hours = health.HealthParams(window_ms=7 * HOUR)  # windows would cross midnight
    assert health.run(spark, "", str(inc), seven_hours)["recomputed_days"] == "all"
    assert health.run(spark, "", str(inc), seven_hours)["recomputed_days"] == "all"
    forced = health.HealthParams(full=True)
    assert health.run(spark, "", str(inc), forced)["recomputed_days"] == "all"


def test_a_late_sample_rewrites_the_day_of_the_next_sample(spark: SparkSession) -> None:
    """A series silent on day 2: a late sample on day 1 changes day 3's first difference."""
    rows = [(D1 + HOUR, 10), (D1 + 2 * HOUR, 20), (D3 + HOUR, 40), (D3 + 2 * HOUR, 50)]
    frame = table(
        spark, "DEVICE_DIAGNOSTICS",
        [{"seq": n, "device": "m1", "event_ms": ms, "requests": r} for n, (ms, r) in
         enumerate(rows)],
    )  # fmt: skip
    other = table(spark, "DEVICE_DIAGNOSTICS", [{"seq": 9, "device": "m2", "event_ms": D2}])
    days = health.days_to_rewrite(frame.unionByName(other), other.limit(0), health.DEVICE, [
        frame.first()["event_date"]  # type: ignore[index]
    ])  # fmt: skip
    assert [(day - days[0]).days for day in days] == [0, 2]
