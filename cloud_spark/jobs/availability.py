"""``availability``: device outages, uptime per device and day, gateway link outages.

How this works:

* The *horizon* is the latest event time seen in the data; nothing is judged beyond it.
* **Silence**: a device is alive while its points report (any quality but ``bad``). When two
  consecutive reports are more than ``expected_interval x gap_factor`` apart, the device was
  down from ``previous report + expected_interval`` until the next report. A device silent
  until the horizon has an *open* outage.
* **Offline**: a retained ``status`` of ``offline`` starts an outage that ends at the
  device's next status event (or is open until the horizon).
* Overlapping outages of one device are merged (gaps-and-islands: a new island starts when
  an outage begins after every earlier one ended); ``cause`` lists what was seen, e.g.
  ``offline+silence``.
* **Uptime** per device and UTC day: ``observed`` is the part of the day between the device's
  first sign of life and the horizon, ``down`` the part of it covered by outages,
  ``uptime_pct = 100 x (1 - down / observed)``.
* **Link outages** per gateway, from two independent sources: ``diagnostics`` (runs of
  ``connected = false`` in the uplink's diagnostics, ending at the next ``connected = true``)
  and ``ingest_delay`` (runs of at least ``link_min_messages`` consecutive messages that
  reached the lander more than ``link_delay`` after the gateway received them; the outage is
  estimated from the first such receive time to the first such landing; this also shows
  cloud-side delays such as a stopped lander).
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F  # noqa: N812

from cloud_spark import tables
from cloud_spark.jobs.silver import date_of_ms

DAY_MS = 86_400_000
DEVICE = ["gateway", "device"]


@dataclass(frozen=True)
class AvailabilityParams:
    """Parameters of the availability job (CLI flags)."""

    expected_interval_ms: int = 60_000
    gap_factor: float = 2.0
    link_delay_ms: int = 120_000
    link_min_messages: int = 10


def horizon(points: DataFrame, status: DataFrame) -> DataFrame:
    """One row, one column ``horizon_ms``: the latest event time in points and status."""
    times = points.select("event_ms").unionByName(status.select("event_ms"))
    return times.agg(F.max("event_ms").alias("horizon_ms"))


def silence_outages(
    points: DataFrame, horizon_df: DataFrame, params: AvailabilityParams
) -> DataFrame:
    """Outages from missing reports: ``gateway, device, start_ms, end_ms, cause, open``."""
    alive = points.where(F.col("quality") != "bad").select(*DEVICE, "event_ms").distinct()
    order = Window.partitionBy(*DEVICE).orderBy("event_ms")
    nxt = F.lead("event_ms").over(order)
    threshold = F.lit(int(params.expected_interval_ms * params.gap_factor))
    steps = alive.withColumn("next_ms", nxt).crossJoin(horizon_df)
    end = F.coalesce(F.col("next_ms"), F.col("horizon_ms"))
    return steps.where(end - F.col("event_ms") > threshold).select(
        *DEVICE,
        (F.col("event_ms") + F.lit(params.expected_interval_ms)).alias("start_ms"),
        end.alias("end_ms"),
        F.lit("silence").alias("cause"),
        F.col("next_ms").isNull().alias("open"),
    )


def offline_outages(status: DataFrame, horizon_df: DataFrame) -> DataFrame:
    """Outages from ``offline`` status events until the next status event."""
    order = Window.partitionBy(*DEVICE).orderBy("event_ms", "epoch", "seq")
    steps = status.withColumn("next_ms", F.lead("event_ms").over(order)).crossJoin(horizon_df)
    return steps.where(F.col("status") == "offline").select(
        *DEVICE,
        F.col("event_ms").alias("start_ms"),
        F.coalesce(F.col("next_ms"), F.greatest(F.col("horizon_ms"), F.col("event_ms"))).alias(
            "end_ms"
        ),
        F.lit("offline").alias("cause"),
        F.col("next_ms").isNull().alias("open"),
    )


def merge_intervals(intervals: DataFrame, keys: list[str]) -> DataFrame:
    """Merge overlapping or touching ``[start_ms, end_ms]`` intervals per ``keys``."""
    order = Window.partitionBy(*keys).orderBy("start_ms", "end_ms")
    earlier = order.rowsBetween(Window.unboundedPreceding, -1)
    prev_end = F.max("end_ms").over(earlier)
    starts = intervals.withColumn(
        "_new", F.when(prev_end.isNull() | (F.col("start_ms") > prev_end), 1).otherwise(0)
    ).withColumn("_island", F.sum("_new").over(order))
    return (
        starts.groupBy(*keys, "_island")
        .agg(
            F.min("start_ms").alias("start_ms"),
            F.max("end_ms").alias("end_ms"),
            F.array_join(F.array_sort(F.collect_set("cause")), "+").alias("cause"),
            F.bool_or("open").alias("open"),
        )
        .drop("_island")
    )


def _with_times(df: DataFrame) -> DataFrame:
    return df.withColumns(
        {
            "start_ts": F.timestamp_millis("start_ms"),
            "duration_s": (F.col("end_ms") - F.col("start_ms")) / 1000.0,
            "event_date": date_of_ms(F.col("start_ms")),
        }
    )


def device_outages(points: DataFrame, status: DataFrame, params: AvailabilityParams) -> DataFrame:
    """Merged device outages from silence and offline status."""
    edge = horizon(points, status)
    both = silence_outages(points, edge, params).unionByName(offline_outages(status, edge))
    return _with_times(merge_intervals(both, DEVICE))


def _days(start: Column, end: Column) -> Column:
    return F.explode(F.sequence(F.floor(start / DAY_MS), F.floor((end - F.lit(1)) / DAY_MS)))


def _overlap(start: Column, end: Column, day: Column) -> Column:
    day_start = day * F.lit(DAY_MS)
    return F.least(end, day_start + F.lit(DAY_MS)) - F.greatest(start, day_start)


def uptime(points: DataFrame, status: DataFrame, outages: DataFrame) -> DataFrame:
    """Uptime per device and UTC day between first sign of life and the horizon."""
    edge = horizon(points, status)
    seen = (
        points.where(F.col("quality") != "bad")
        .select(*DEVICE, "event_ms")
        .unionByName(status.select(*DEVICE, "event_ms"))
        .groupBy(*DEVICE)
        .agg(F.min("event_ms").alias("first_ms"))
        .crossJoin(edge)
    )
    days = seen.where(F.col("horizon_ms") > F.col("first_ms")).withColumn(
        "day", _days(F.col("first_ms"), F.col("horizon_ms"))
    )
    observed = days.withColumn(
        "observed_ms", _overlap(F.col("first_ms"), F.col("horizon_ms"), F.col("day"))
    )
    clipped = outages.join(seen, DEVICE).select(
        *DEVICE,
        F.greatest("start_ms", "first_ms").alias("s"),
        F.least("end_ms", "horizon_ms").alias("e"),
    )
    down = (
        clipped.where(F.col("e") > F.col("s"))
        .withColumn("day", _days(F.col("s"), F.col("e")))
        .withColumn("down_ms", _overlap(F.col("s"), F.col("e"), F.col("day")))
        .groupBy(*DEVICE, "day")
        .agg(F.sum("down_ms").alias("down_ms"), F.count(F.lit(1)).alias("outages"))
    )
    joined = observed.join(down, [*DEVICE, "day"], "left")
    down_ms = F.coalesce(F.col("down_ms"), F.lit(0))
    return joined.select(
        *DEVICE,
        (F.col("observed_ms") / 1000.0).alias("observed_s"),
        (down_ms / 1000.0).alias("down_s"),
        F.when(
            F.col("observed_ms") > 0, F.lit(100.0) * (F.lit(1.0) - down_ms / F.col("observed_ms"))
        ).alias("uptime_pct"),
        F.coalesce(F.col("outages"), F.lit(0)).alias("outages"),
        F.date_from_unix_date(F.col("day").cast("int")).alias("event_date"),
    )


def link_outages_from_diagnostics(uplink: DataFrame) -> DataFrame:
    """Runs of ``connected = false`` per gateway, ending at the next ``connected = true``."""
    order = Window.partitionBy("gateway").orderBy("event_ms", "epoch", "seq")
    changed = F.col("connected") != F.lag("connected").over(order)
    runs = uplink.withColumns(
        {
            "next_ms": F.lead("event_ms").over(order),
            "_run": F.sum(F.when(changed, 1).otherwise(0)).over(order),
        }
    )
    down = runs.where(~F.col("connected")).groupBy("gateway", "_run")
    last_next = F.max_by("next_ms", "event_ms")
    return down.agg(
        F.min("event_ms").alias("start_ms"),
        F.coalesce(last_next, F.max("event_ms")).alias("end_ms"),
        last_next.isNull().alias("open"),
    ).select("gateway", F.lit("diagnostics").alias("source"), "start_ms", "end_ms", "open")


def link_outages_from_delay(
    messages: DataFrame, link_delay_ms: int, min_messages: int = 1
) -> DataFrame:
    """Runs of at least ``min_messages`` messages landed more than ``link_delay_ms`` after
    the gateway received them (a lone late message is a redelivery, not an outage)."""
    timed = messages.where(F.col("received_ms").isNotNull())
    order = Window.partitionBy("gateway").orderBy("received_ms", "epoch", "seq")
    delayed = (F.col("ingest_ms") - F.col("received_ms")) > F.lit(link_delay_ms)
    flagged = timed.withColumn("_delayed", delayed)
    changed = F.col("_delayed") != F.lag("_delayed").over(order)
    runs = flagged.withColumn("_run", F.sum(F.when(changed, 1).otherwise(0)).over(order))
    return (
        runs.where(F.col("_delayed"))
        .groupBy("gateway", "_run")
        .agg(
            F.min("received_ms").alias("start_ms"),
            F.min("ingest_ms").alias("end_ms"),
            F.count(F.lit(1)).alias("_messages"),
        )
        .where(F.col("_messages") >= min_messages)
        .select(
            "gateway",
            F.lit("ingest_delay").alias("source"),
            "start_ms",
            "end_ms",
            F.lit(False).alias("open"),
        )
    )


def link_outages(uplink: DataFrame, messages: DataFrame, params: AvailabilityParams) -> DataFrame:
    both = link_outages_from_diagnostics(uplink).unionByName(
        link_outages_from_delay(messages, params.link_delay_ms, params.link_min_messages)
    )
    return _with_times(both)


def run(spark: SparkSession, root: str, out: str, params: AvailabilityParams) -> dict[str, int]:
    """Read silver, write gold outages, availability and link outages."""
    del root
    points = tables.read_table(spark, out, "points")
    status = tables.read_table(spark, out, "status")
    outages = device_outages(points, status, params).cache()
    try:
        tables.write_table(outages, out, "outages")
        tables.write_table(uptime(points, status, outages), out, "availability")
        n_outages = outages.count()
    finally:
        outages.unpersist()
    link = link_outages(
        tables.read_table(spark, out, "uplink_diagnostics"),
        tables.read_table(spark, out, "messages"),
        params,
    )
    tables.write_table(link, out, "link_outages")
    n_link = tables.read_table(spark, out, "link_outages").count()
    return {"device_outages": n_outages, "link_outages": n_link}
