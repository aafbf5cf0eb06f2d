"""``alarms``: the alarms' transitions as ``silver/alarm_events``, and ``gold/alarms``: one
row per occurrence of an alarm, with when it was raised, acknowledged and cleared.

How this works:

* :func:`alarm_events` (used by the ``silver`` job) selects the good rows that
  :mod:`cloud_spark.jobs.silver_parse` classified as ``alarm_event`` (local topic
  ``alarms/<alarm>/event``, docs/alarms.md) with their message id, and keeps one row per
  ``(gateway, alarm, transition)``: a gateway killed between saving a transition and knowing
  it published publishes it again after the restart, with another message id. The earliest
  landed copy is kept. Silver merges by message id, so a copy that lands in a later run than
  the first one is in the table too; :func:`unique_transitions` drops it again here.
* :func:`occurrences` numbers each alarm's occurrences: one starts at each transition into
  ``active_unacked`` (a raise, or an unshelve while the condition holds) and lasts until the
  alarm is ``normal`` again. Per occurrence: ``raised_at`` (and the value), the first
  acknowledgement (``acknowledged_at``, who), the first clear (``cleared_at``, the value),
  ``normal_at``, ``time_to_acknowledge_s`` (raised → acknowledged), ``active_s`` (raised →
  cleared) and ``open`` (the alarm's latest occurrence, not normal again yet; an occurrence
  raised again before it was normal ends where the next begins).
* :func:`run` rebuilds ``gold/alarms`` from the whole of ``silver/alarm_events`` (small: a few
  rows per alarm a day) and replaces it.

Pure ``DataFrame -> DataFrame`` transforms apart from :func:`run`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F  # noqa: N812

from cloud_spark import tables
from cloud_spark.jobs import silver_parse as sp

ID = ("gateway", "epoch", "seq")
NATURAL_KEY = ("gateway", "alarm", "transition")


@dataclass(frozen=True)
class AlarmsParams:
    """Parameters of the alarms job (none yet: it always rebuilds)."""


def unique_transitions(events: DataFrame) -> DataFrame:
    """One row per (gateway, alarm, transition): the earliest landed copy."""
    order = Window.partitionBy(*NATURAL_KEY).orderBy("ingest_ms", "epoch", "seq")
    ranked = events.withColumn("_rank", F.row_number().over(order))
    return ranked.where(F.col("_rank") == 1).drop("_rank")


def alarm_events(parsed: DataFrame) -> DataFrame:
    """``silver/alarm_events``: the good alarm event rows of a parsed, deduplicated frame."""
    good = parsed.where(F.col("reason").isNull() & (F.col("kind") == sp.KIND_ALARM_EVENT))
    ts = F.col("ts")
    selected = good.select(
        *ID,
        "alarm",
        F.col("alarm_transition").alias("transition"),
        F.col("alarm_from").alias("from_state"),
        F.col("alarm_to").alias("to_state"),
        F.col("alarm_cause").alias("cause"),
        F.col("value_num"),
        F.col("value_str"),
        F.timestamp_millis(ts).alias("event_ts"),
        ts.alias("ts_ms"),
        F.col("alarm_severity").alias("severity"),
        "alarm_kind",
        F.col("alarm_point").alias("point"),
        F.col("alarm_user").alias("user"),
        "received_ms",
        "ingest_ms",
        "copies",
        sp.date_of_ms(ts).alias("event_date"),
    )
    return unique_transitions(selected)


def occurrences(events: DataFrame) -> DataFrame:
    """``gold/alarms``: one row per occurrence (see the module's text)."""
    series = Window.partitionBy("gateway", "alarm").orderBy("transition")
    starts = (F.col("to_state") == "active_unacked") & (F.col("from_state") != "active_unacked")
    numbered = unique_transitions(events).withColumn(
        "occurrence", F.sum(F.when(starts, 1).otherwise(0)).over(series))
    within = numbered.where(F.col("occurrence") > 0)

    def first_ts(condition: Column) -> Column:
        return F.min(F.when(condition, F.col("event_ts")))

    def first_of(value: str, condition: Column) -> Column:
        return F.min_by(F.col(value), F.when(condition, F.col("transition")))

    start = F.col("transition") == F.col("_first")
    ack = F.col("cause") == "ack"
    clear = F.col("cause") == "clear"
    normal = F.col("to_state") == "normal"
    grouped = within.withColumn(
        "_first", F.min("transition").over(Window.partitionBy("gateway", "alarm", "occurrence"))
    ).groupBy("gateway", "alarm", "occurrence").agg(
        F.max_by("severity", "transition").alias("severity"),
        F.max_by("alarm_kind", "transition").alias("alarm_kind"),
        F.max_by("point", "transition").alias("point"),
        F.min("transition").alias("raised_transition"),
        first_ts(start).alias("raised_at"),
        first_of("value_num", start).alias("raised_value"),
        first_ts(ack).alias("acknowledged_at"),
        first_of("user", ack).alias("acknowledged_by"),
        first_ts(clear).alias("cleared_at"),
        first_of("value_num", clear).alias("cleared_value"),
        first_ts(normal).alias("normal_at"),
    )

    def seconds(later: str, earlier: str) -> Column:
        return (F.unix_micros(F.col(later)) - F.unix_micros(F.col(earlier))) / 1e6

    return grouped.select(
        "gateway", "alarm", F.col("occurrence").cast("long").alias("occurrence"), "severity",
        "alarm_kind", "point", "raised_transition", "raised_at", "raised_value",
        "acknowledged_at", "acknowledged_by", "cleared_at", "cleared_value", "normal_at",
        seconds("acknowledged_at", "raised_at").alias("time_to_acknowledge_s"),
        seconds("cleared_at", "raised_at").alias("active_s"),
        (F.col("normal_at").isNull() & (F.col("occurrence") == F.max("occurrence").over(
            Window.partitionBy("gateway", "alarm")))).alias("open"),
        F.to_date("raised_at").alias("event_date"),
    )


def run(spark: SparkSession, root: str, out: str, params: AlarmsParams) -> dict[str, Any]:
    """Rebuild ``gold/alarms`` from ``silver/alarm_events``."""
    events = tables.read_table(spark, out, "alarm_events")
    gold = occurrences(events)
    tables.write_table(gold, out, "alarms", replace_whole=True)
    counts = gold.agg(F.count(F.lit(1)).alias("occurrences"),
                      F.sum(F.col("open").cast("int")).alias("open")).first()
    return {"occurrences": int(counts["occurrences"] or 0) if counts else 0,
            "open": int(counts["open"] or 0) if counts else 0}
