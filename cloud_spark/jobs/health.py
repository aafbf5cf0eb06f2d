"""``health``: device (Modbus) and uplink health per time window from diagnostics topics.

How this works: device diagnostics carry *cumulative* counters (requests, timeouts, CRC
errors, exceptions, stale frames) that restart at 0 when the bridge restarts. :func:`deltas`
orders each device's samples by time and takes differences; a negative difference means the
counter was reset, and the new value itself is the increase since the reset
(``counter_resets`` counts those). The first sample of a series has no baseline and adds 0.
:func:`device_health` sums the increases per window (1 h by default) and derives
``error_rate = (timeouts + crc_errors + exceptions) / requests``, plus mean and max latency.
:func:`link_health` summarises the uplink's own diagnostics per gateway and window: share of
samples connected, the largest backlog (messages, bytes, oldest age) and messages dropped
(the ``dropped`` counter, with the same reset handling).
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F  # noqa: N812
from pyspark.sql.window import WindowSpec

from cloud_spark import tables
from cloud_spark.jobs.silver import date_of_ms

COUNTERS = ("requests", "timeouts", "crc_errors", "exceptions", "stale_frames")


@dataclass(frozen=True)
class HealthParams:
    """Parameters of the health job (CLI flags)."""

    window_ms: int = 3_600_000


def _delta(counter: str, order: WindowSpec) -> Column:
    prev = F.lag(counter).over(order)
    diff = F.col(counter) - prev
    return F.when(prev.isNull(), F.lit(0)).when(diff < 0, F.col(counter)).otherwise(diff)


def deltas(df: DataFrame, keys: list[str], counters: tuple[str, ...]) -> DataFrame:
    """Replace cumulative counters by their increase since the previous sample of ``keys``.

    Adds ``_resets``: 1 when any counter went backwards at this sample.
    """
    order = Window.partitionBy(*keys).orderBy("event_ms", "epoch", "seq")
    resets = F.greatest(
        *[
            F.coalesce((F.col(name) < F.lag(name).over(order)).cast("int"), F.lit(0))
            for name in counters
        ],
        F.lit(0),
    )
    return df.withColumn("_resets", resets).withColumns(
        {name: _delta(name, order) for name in counters}
    )


def _window(window_ms: int) -> Column:
    return (F.floor(F.col("event_ms") / F.lit(window_ms)) * F.lit(window_ms)).cast("long")


def device_health(diagnostics: DataFrame, window_ms: int = HealthParams.window_ms) -> DataFrame:
    """Per device and window: counter increases, error rate, latency."""
    increased = deltas(diagnostics, ["gateway", "device"], COUNTERS)
    grouped = increased.withColumn("_w", _window(window_ms)).groupBy("gateway", "device", "_w")
    summed = grouped.agg(
        F.count(F.lit(1)).alias("samples"),
        *[F.sum(name).alias(name) for name in COUNTERS],
        F.avg("latency_ms").alias("latency_avg_ms"),
        F.max("latency_ms").alias("latency_max_ms"),
        F.sum("_resets").alias("counter_resets"),
    )
    errors = F.col("timeouts") + F.col("crc_errors") + F.col("exceptions")
    return summed.select(
        "gateway",
        "device",
        F.timestamp_millis("_w").alias("window_start"),
        "samples",
        *COUNTERS,
        F.when(F.col("requests") > 0, errors / F.col("requests")).alias("error_rate"),
        "latency_avg_ms",
        "latency_max_ms",
        "counter_resets",
        date_of_ms(F.col("_w")).alias("event_date"),
    )


def link_health(uplink: DataFrame, window_ms: int = HealthParams.window_ms) -> DataFrame:
    """Per gateway and window: connected share, peak backlog, messages dropped."""
    increased = deltas(uplink, ["gateway"], ("dropped",))
    grouped = increased.withColumn("_w", _window(window_ms)).groupBy("gateway", "_w")
    return grouped.agg(
        F.count(F.lit(1)).alias("samples"),
        (F.avg(F.col("connected").cast("double")) * 100.0).alias("connected_pct"),
        F.max("backlog_messages").alias("backlog_max_messages"),
        F.max("backlog_bytes").alias("backlog_max_bytes"),
        F.max("oldest_age_s").alias("oldest_age_max_s"),
        F.sum("dropped").alias("dropped"),
    ).select(
        "gateway",
        F.timestamp_millis("_w").alias("window_start"),
        "samples",
        "connected_pct",
        "backlog_max_messages",
        "backlog_max_bytes",
        "oldest_age_max_s",
        "dropped",
        date_of_ms(F.col("_w")).alias("event_date"),
    )


def run(spark: SparkSession, root: str, out: str, params: HealthParams) -> dict[str, int]:
    """Read silver diagnostics, write gold device and link health."""
    del root
    diagnostics = tables.read_table(spark, out, "device_diagnostics")
    uplink = tables.read_table(spark, out, "uplink_diagnostics")
    tables.write_table(device_health(diagnostics, params.window_ms), out, "device_health")
    tables.write_table(link_health(uplink, params.window_ms), out, "link_health")
    dropped = tables.read_table(spark, out, "link_health").agg(F.sum("dropped")).first()
    return {
        "device_windows": tables.read_table(spark, out, "device_health").count(),
        "uplink_dropped": int((dropped[0] if dropped else 0) or 0),
    }
