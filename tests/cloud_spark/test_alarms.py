"""Alarm events in silver (one row per (gateway, alarm, transition)) and gold/alarms (one row
per occurrence with raised / acknowledged / cleared times), on tiny inline frames."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from cloud_spark import schemas
from cloud_spark.jobs import alarms, silver
from tests.cloud_spark.conftest import T0, bronze_frame, bronze_row

TOPIC = "alarms/boiler-hot/event"


def event(number: int, old: str, new: str, cause: str, seconds: float, value: Any = 92.5,
          user: str | None = None, **extra: Any) -> str:
    return json.dumps({"alarm": "boiler-hot", "transition": number, "from": old, "to": new,
                       "cause": cause, "value": value, "ts": T0 + int(seconds * 1000),
                       "severity": "high", "kind": "high", "point": "boiler/temp",
                       "user": user, **extra})


def tables_of(spark: SparkSession, rows: list[dict[str, Any]]) -> dict[str, DataFrame]:
    return silver.silver_tables(bronze_frame(spark, rows), silver.SilverParams())


def test_alarm_events_land_once_per_transition(spark: SparkSession) -> None:
    raised = event(1, "normal", "active_unacked", "raise", 0)
    rows = [
        bronze_row(1, TOPIC, raised),
        bronze_row(1, TOPIC, raised),  # the same message landed twice
        bronze_row(5, TOPIC, raised, epoch="e-1"),  # published again after a kill: new id
        bronze_row(2, TOPIC, event(2, "active_unacked", "active_acked", "ack", 30, user="olga")),
        bronze_row(3, TOPIC, event(3, "active_acked", "burning", "clear", 60)),
        bronze_row(4, TOPIC, event(0, "normal", "active_unacked", "raise", 60)),
        bronze_row(6, "alarms/boiler-hot/state", raised),  # the retained state: not an event
        bronze_row(7, "alarms/event", raised),
    ]
    out = tables_of(spark, rows)
    got = {r["transition"]: r for r in out["alarm_events"].collect()}
    assert sorted(got) == [1, 2]
    first = got[1]
    assert (first["seq"], first["copies"], first["from_state"], first["to_state"],
            first["cause"], first["value_num"], first["severity"], first["alarm_kind"],
            first["point"]) == (1, 2, "normal", "active_unacked", "raise", 92.5, "high",
                                "high", "boiler/temp")
    assert first["event_ts"] == dt.datetime(2024, 6, 3, 16, 0)
    assert got[2]["user"] == "olga"
    reasons = {r["seq"]: r["reason"] for r in out["quarantine"].collect()}
    assert reasons == {3: "invalid_value:state", 4: "invalid_value:transition",
                       6: "unknown_topic", 7: "unknown_topic"}
    assert {r["seq"] for r in out["messages"].collect()} == {1, 2, 3, 4, 5, 6, 7}


def events_frame(spark: SparkSession, rows: list[tuple[Any, ...]]) -> DataFrame:
    """(transition, from, to, cause, seconds, value, user, seq) rows of one alarm."""
    full = [{"gateway": "gw-1", "epoch": "e-1", "seq": seq, "alarm": "boiler-hot",
             "transition": number, "from_state": old, "to_state": new, "cause": cause,
             "value_num": value, "value_str": None,
             "event_ts": dt.datetime(2024, 6, 3, 16, 0) + dt.timedelta(seconds=seconds),
             "ts_ms": T0 + seconds * 1000, "severity": "high", "alarm_kind": "high",
             "point": "boiler/temp", "user": user, "received_ms": 0, "ingest_ms": seq,
             "copies": 1, "event_date": dt.date(2024, 6, 3)}
            for number, old, new, cause, seconds, value, user, seq in rows]
    return spark.createDataFrame(full, schemas.ALARM_EVENTS)


def test_occurrences_with_their_times(spark: SparkSession) -> None:
    frame = events_frame(spark, [
        (1, "normal", "active_unacked", "raise", 0, 91.0, None, 1),
        (2, "active_unacked", "active_acked", "ack", 40, 93.0, "olga", 2),
        (3, "active_acked", "normal", "clear", 100, 80.0, None, 3),
        (3, "active_acked", "normal", "clear", 100, 80.0, None, 9),  # a copy from a later run
        # second occurrence: cleared before it was acknowledged
        (4, "normal", "active_unacked", "raise", 200, 95.0, None, 4),
        (5, "active_unacked", "cleared_unacked", "clear", 230, 70.0, None, 5),
        (6, "cleared_unacked", "active_unacked", "raise", 260, 96.0, None, 6),  # third
        (7, "active_unacked", "shelved", "shelve", 270, 96.0, "olga", 7),
    ])
    got = {r["occurrence"]: r for r in alarms.occurrences(frame).collect()}
    assert sorted(got) == [1, 2, 3]
    one, two, three = got[1], got[2], got[3]
    assert (one["raised_value"], one["acknowledged_by"], one["cleared_value"],
            one["time_to_acknowledge_s"], one["active_s"], one["open"]) == (
        91.0, "olga", 80.0, 40.0, 100.0, False)
    assert one["normal_at"] == dt.datetime(2024, 6, 3, 16, 1, 40)
    assert (two["raised_transition"], two["acknowledged_at"], two["active_s"],
            two["normal_at"], two["open"]) == (4, None, 30.0, None, False)
    assert (three["raised_transition"], three["cleared_at"], three["open"]) == (6, None, True)
    assert one["event_date"] == dt.date(2024, 6, 3)


def test_the_gateway_publishes_exactly_the_contract_s_alarm_event() -> None:
    from bridge.alarms.machine import AlarmState, Cause, step
    from cloud_spark import contract as c

    _, transition = step(AlarmState("boiler-hot", number=6), Cause.RAISE, 1717430400100, 92.5)
    assert transition is not None
    body = json.loads(transition.payload("high", "high", "boiler/temperature"))
    assert list(body) == list(c.ALARM_EVENT_FIELDS) == list(c.EXAMPLE_ALARM_EVENT)
    assert body == c.EXAMPLE_ALARM_EVENT
