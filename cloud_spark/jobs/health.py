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

**Incremental** (:func:`run`): windows nest in UTC days, so a day's windows depend on the
day's samples and, per series, the last sample before it (the baseline of the first
difference). A run reads the samples from the first day new silver data touched on, plus
each series' latest sample before that day (:func:`cloud_spark.jobs.lookback.latest_before`,
used as a baseline and not counted), and rewrites the touched days and the days whose first
sample of a series follows a touched day's last one (a late sample, or a reset across
midnight, changes that difference). Everything is recomputed when the job never ran with
these parameters, after ``silver --full``, with ``--full``, or when the window does not
divide a day.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import date
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F  # noqa: N812
from pyspark.sql.window import WindowSpec

from cloud_spark import tables
from cloud_spark.jobs import manifest as mf
from cloud_spark.jobs.lookback import DAY_MS, ORDER, dates_of, in_days, latest_before
from cloud_spark.jobs.silver_parse import date_of_ms

COUNTERS = ("requests", "timeouts", "crc_errors", "exceptions", "stale_frames")
DEVICE = ["gateway", "device"]
GATEWAY = ["gateway"]


@dataclass(frozen=True)
class HealthParams:
    """Parameters of the health job (CLI flags)."""

    window_ms: int = 3_600_000
    #: recompute everything (``--full``), not only the days new silver data touched
    full: bool = False


def _delta(counter: str, order: WindowSpec) -> Column:
    prev = F.lag(counter).over(order)
    diff = F.col(counter) - prev
    return F.when(prev.isNull(), F.lit(0)).when(diff < 0, F.col(counter)).otherwise(diff)


def deltas(
    df: DataFrame,
    keys: list[str],
    counters: tuple[str, ...],
    baseline: DataFrame | None = None,
) -> DataFrame:
    """Replace cumulative counters by their increase since the previous sample of ``keys``.

    Adds ``_resets``: 1 when any counter went backwards at this sample. ``baseline`` (same
    columns): the latest sample of each series before ``df``'s; the first samples of ``df``
    are differenced against it, and it is not in the result.
    """
    if baseline is not None:
        df = df.withColumn("_baseline", F.lit(False)).unionByName(
            baseline.withColumn("_baseline", F.lit(True))
        )
    order = Window.partitionBy(*keys).orderBy(*ORDER)
    resets = F.greatest(
        *[
            F.coalesce((F.col(name) < F.lag(name).over(order)).cast("int"), F.lit(0))
            for name in counters
        ],
        F.lit(0),
    )
    result = df.withColumn("_resets", resets).withColumns(
        {name: _delta(name, order) for name in counters}
    )
    if baseline is not None:
        result = result.where(~F.col("_baseline")).drop("_baseline")
    return result


def _window(window_ms: int) -> Column:
    return (F.floor(F.col("event_ms") / F.lit(window_ms)) * F.lit(window_ms)).cast("long")


def device_health(
    diagnostics: DataFrame,
    window_ms: int = HealthParams.window_ms,
    baseline: DataFrame | None = None,
) -> DataFrame:
    """Per device and window: counter increases, error rate, latency.

    ``baseline``: each device's latest sample before ``diagnostics`` (see :func:`deltas`).
    """
    increased = deltas(diagnostics, DEVICE, COUNTERS, baseline)
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


def link_health(
    uplink: DataFrame,
    window_ms: int = HealthParams.window_ms,
    baseline: DataFrame | None = None,
) -> DataFrame:
    """Per gateway and window: connected share, peak backlog, messages dropped.

    ``baseline``: each gateway's latest sample before ``uplink`` (see :func:`deltas`).
    """
    increased = deltas(uplink, GATEWAY, ("dropped",), baseline)
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


def days_to_rewrite(
    samples: DataFrame, baseline: DataFrame, keys: list[str], touched: list[date]
) -> list[date]:
    """The days whose windows change: the touched days that have samples, and every day
    holding a series' first sample after a touched day (its difference starts there)."""
    rows = samples.unionByName(baseline)
    prev = F.lag("event_date").over(Window.partitionBy(*keys).orderBy(*ORDER))
    changed = rows.withColumn("_prev", prev).where(in_days(touched) | F.col("_prev").isin(touched))
    return dates_of(changed)


Summary = Callable[[DataFrame, int, DataFrame | None], DataFrame]


def _recompute(
    spark: SparkSession,
    out: str,
    source: str,
    name: str,
    keys: list[str],
    summary: Summary,
    window_ms: int,
    touched: list[date],
) -> list[date]:
    """Rewrite the days of gold table ``name`` that the ``touched`` days of silver table
    ``source`` change; returns them."""
    frame = tables.read_table(spark, out, source)
    cut = min(touched)
    samples = frame.where(F.col("event_date") >= F.lit(cut)).cache()
    try:
        wanted = samples.select(*keys).distinct()
        baseline = latest_before(frame, wanted, keys, cut).cache()
        days = days_to_rewrite(samples, baseline, keys, touched)
        if days:
            result = summary(samples, window_ms, baseline).where(in_days(days))
            tables.write_table(result, out, name)
        baseline.unpersist()
    finally:
        samples.unpersist()
    return days


def run(spark: SparkSession, root: str, out: str, params: HealthParams) -> dict[str, Any]:
    """Read silver diagnostics, write gold device and link health; returns what was redone.

    Only the days new silver runs touched (and the days their differences reach) are
    recomputed; everything when the job never ran with these parameters, after ``silver
    --full``, with ``params.full``, or when ``window_ms`` does not divide a day.
    """
    del root
    key = repr(replace(params, full=False))
    touched = None if params.full else mf.touched_since(spark, out, "health", key)
    if DAY_MS % params.window_ms:  # a window would straddle midnight
        touched = None
    recomputed: Any = "all"
    if touched is None:
        diagnostics = tables.read_table(spark, out, "device_diagnostics")
        uplink = tables.read_table(spark, out, "uplink_diagnostics")
        device = device_health(diagnostics, params.window_ms)
        tables.write_table(device, out, "device_health", replace_whole=True)
        link = link_health(uplink, params.window_ms)
        tables.write_table(link, out, "link_health", replace_whole=True)
    elif touched:
        device_days = _recompute(
            spark, out, "device_diagnostics", "device_health", DEVICE, device_health,
            params.window_ms, touched,
        )  # fmt: skip
        link_days = _recompute(
            spark, out, "uplink_diagnostics", "link_health", GATEWAY, link_health,
            params.window_ms, touched,
        )  # fmt: skip
        recomputed = len(set(device_days) | set(link_days))
    else:  # nothing new since the last run
        recomputed = 0
    mf.mark_consumed(spark, out, "health", key, full=touched is None)
    dropped = tables.read_table(spark, out, "link_health").agg(F.sum("dropped")).first()
    return {
        "device_windows": tables.read_table(spark, out, "device_health").count(),
        "uplink_dropped": int((dropped[0] if dropped else 0) or 0),
        "recomputed_days": recomputed,
    }
