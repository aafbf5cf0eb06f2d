"""``rollups``: 1 min / 15 min / 1 h / 1 d aggregates per device point.

How this works:

* **Sample statistics** (count, min, max, avg, stddev, sum, first, last) are computed per
  grain directly from the numeric samples of ``silver/points`` whose quality is accepted
  (``good`` and ``uncertain`` by default). ``first``/``last`` are by event time (then seq).
* **Time-weighted average.** Points report on change (deadband) plus a heartbeat, so a value
  holds until the next sample of the same series. :func:`hold_segments` turns every sample
  into a segment ``[event_ms, end_ms)`` with ``end_ms = min(next sample, event_ms +
  max_hold_ms)``: past ``max_hold_ms`` without news the value is unknown (an outage), not
  held forever. The next sample of *any* quality ends a segment, but only segments of
  accepted numeric samples are weighted. :func:`twa_partials` cuts segments at base-grain
  (1 min) boundaries and sums ``value x overlap`` and ``overlap`` per base window. Those two
  sums add up exactly into every coarser grain (all grains are whole multiples of the base
  grain and aligned to UTC midnight), so coarser TWAs come from the base partials, not from
  the raw segments: ``twa = Σ value·overlap / Σ overlap`` and ``covered_s = Σ overlap``.
  A window can have a TWA without samples (a value carried in from an earlier window): its
  ``count`` is 0 and its sample statistics are null.
* Sample statistics and TWA sums meet in a union + hash aggregate (cheaper than a full outer
  join); ``first``/``last`` use one long ordering key so the aggregation stays hash-based.
* The job caches the narrow points projection and the base partials (each grain reuses
  them); rows are partitioned by ``grain`` and window date, dynamic partition overwrite.
* **Aggregates from the gateway** (``silver/aggregates``, a point configured with
  ``aggregate``): a window without raw samples of its point (every window of a point sent
  with ``aggregate_send = "instead"``) takes its figures from the aggregates, at every grain
  that is a whole multiple of the aggregate's window (:mod:`.silver_aggregates`); a window
  with raw samples keeps the figures computed from them.
* **Incremental.** Every grain nests into a UTC day, so a run recomputes only the days that
  silver runs since the previous rollups touched, plus the day after each (a value held
  past midnight), from the points of those days and the day before (the value carried in):
  :func:`days_to_recompute`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import date, timedelta
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F  # noqa: N812

from cloud_spark import tables
from cloud_spark.jobs import manifest as mf
from cloud_spark.jobs import silver_aggregates as sa
from cloud_spark.jobs.silver_parse import date_of_ms

SERIES = ["gateway", "device", "point"]


@dataclass(frozen=True)
class RollupParams:
    """Parameters of the rollups job (CLI flags of ``python -m cloud_spark rollups``)."""

    grains: tuple[str, ...] = ("1m", "15m", "1h", "1d")
    max_hold_ms: int = 15 * 60_000
    qualities: tuple[str, ...] = ("good", "uncertain")
    #: recompute every day (``--full``), not only the days new silver data touched
    full: bool = False


def parse_grain(text: str) -> int:
    """``"90s"``, ``"1m"``, ``"15m"``, ``"1h"``, ``"1d"`` → milliseconds."""
    units = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
    if len(text) < 2 or text[-1] not in units or not text[:-1].isdigit() or int(text[:-1]) <= 0:
        raise ValueError(f"bad grain {text!r}: use a positive number and s, m, h or d")
    return int(text[:-1]) * units[text[-1]]


def _floor(ms: Column, grain_ms: int) -> Column:
    return (F.floor(ms / F.lit(grain_ms)) * F.lit(grain_ms)).cast("long")


def _accepted(qualities: tuple[str, ...]) -> Column:
    return F.col("value_num").isNotNull() & F.col("quality").isin(*qualities)


def hold_segments(points: DataFrame, max_hold_ms: int, qualities: tuple[str, ...]) -> DataFrame:
    """Segments ``(series, value, seg_start, seg_end)`` during which an accepted value holds."""
    order = Window.partitionBy(*SERIES).orderBy("event_ms", "epoch", "seq")
    nxt = F.lead("event_ms").over(order)
    held_until = F.col("event_ms") + F.lit(max_hold_ms)
    with_end = points.withColumn("seg_end", F.least(F.coalesce(nxt, held_until), held_until))
    return with_end.where(_accepted(qualities) & (F.col("seg_end") > F.col("event_ms"))).select(
        *SERIES,
        F.col("value_num").alias("value"),
        F.col("event_ms").alias("seg_start"),
        "seg_end",
    )


def twa_partials(segments: DataFrame, base_ms: int) -> DataFrame:
    """Per series and base window: ``weighted = Σ value·overlap_ms``, ``covered = Σ overlap``."""
    first_window = _floor(F.col("seg_start"), base_ms)
    last_window = _floor(F.col("seg_end") - F.lit(1), base_ms)
    pieces = segments.withColumn(
        "window_ms", F.explode(F.sequence(first_window, last_window, F.lit(base_ms).cast("long")))
    )
    overlap = F.least(F.col("seg_end"), F.col("window_ms") + F.lit(base_ms)) - F.greatest(
        F.col("seg_start"), F.col("window_ms")
    )
    return (
        pieces.withColumn("overlap", overlap.cast("double"))
        .groupBy(*SERIES, "window_ms")
        .agg(
            F.sum(F.col("value") * F.col("overlap")).alias("weighted"),
            F.sum("overlap").alias("covered"),
        )
    )


def _order_key() -> Column:
    """Event time then seq as one long (ms x 2^20 + seq mod 2^20): first/last stay
    deterministic and the aggregation stays hash-based (a struct key forces a sort)."""
    return F.col("event_ms") * F.lit(1 << 20) + F.pmod(F.col("seq"), F.lit(1 << 20))


def sample_stats(points: DataFrame, grain_ms: int, qualities: tuple[str, ...]) -> DataFrame:
    """count/min/max/avg/stddev/sum/first/last of accepted samples per series and window."""
    order = _order_key()
    return (
        points.where(_accepted(qualities))
        .withColumn("window_ms", _floor(F.col("event_ms"), grain_ms))
        .groupBy(*SERIES, "window_ms")
        .agg(
            F.count("value_num").alias("count"),
            F.min("value_num").alias("min"),
            F.max("value_num").alias("max"),
            F.avg("value_num").alias("avg"),
            F.stddev_samp("value_num").alias("stddev"),
            F.sum("value_num").alias("sum"),
            F.min_by("value_num", order).alias("first"),
            F.max_by("value_num", order).alias("last"),
        )
    )


def _grains(params: RollupParams) -> dict[str, int]:
    grains = {name: parse_grain(name) for name in params.grains}
    base_ms = min(grains.values())
    for name, grain_ms in grains.items():
        if grain_ms % base_ms or (86_400_000 % grain_ms and grain_ms % 86_400_000):
            raise ValueError(f"grain {name} must be a multiple of {base_ms} ms aligned to days")
    return grains


def base_partials(points: DataFrame, params: RollupParams) -> DataFrame:
    """TWA partial sums per series and base-grain (smallest grain) window."""
    base_ms = min(_grains(params).values())
    return twa_partials(hold_segments(points, params.max_hold_ms, params.qualities), base_ms)


def rollup(points: DataFrame, params: RollupParams) -> DataFrame:
    """All grains of ``params.grains`` for a ``silver/points`` frame (pure)."""
    return rollup_from(points, base_partials(points, params), params)


def rollup_from(points: DataFrame, partials: DataFrame, params: RollupParams) -> DataFrame:
    """:func:`rollup` with the base-grain partials given (the job computes them once)."""
    grains = _grains(params)
    frames = []
    stat_names = ["count", "min", "max", "avg", "stddev", "sum", "first", "last"]
    for name, grain_ms in grains.items():
        twa = (
            partials.withColumn("window_ms", _floor(F.col("window_ms"), grain_ms))
            .groupBy(*SERIES, "window_ms")
            .agg(F.sum("weighted").alias("weighted"), F.sum("covered").alias("covered"))
        )
        stats = sample_stats(points, grain_ms, params.qualities)
        # a full outer join as union + hash aggregate: each key has at most one row per side
        both = stats.unionByName(twa, allowMissingColumns=True)
        joined = both.groupBy(*SERIES, "window_ms").agg(
            *[F.max(col).alias(col) for col in [*stat_names, "weighted", "covered"]]
        )
        frames.append(
            joined.select(
                *SERIES,
                F.timestamp_millis("window_ms").alias("window_start"),
                F.timestamp_millis(F.col("window_ms") + F.lit(grain_ms)).alias("window_end"),
                F.coalesce(F.col("count"), F.lit(0)).alias("count"),
                *stat_names[1:],
                F.when(F.col("covered") > 0, F.col("weighted") / F.col("covered")).alias("twa"),
                F.coalesce(F.col("covered") / 1000.0, F.lit(0.0)).alias("covered_s"),
                F.lit(name).alias("grain"),
                date_of_ms(F.col("window_ms")).alias("window_date"),
            )
        )
    result = frames[0]
    for frame in frames[1:]:
        result = result.unionByName(frame)
    return result


DAY_MS = 86_400_000


def days_to_recompute(touched: list[date]) -> tuple[list[date], list[date]]:
    """``(read, write)`` event dates for touched days ``touched``.

    A day's samples change its own windows and, through a value held past midnight, the
    next day's; its windows need the previous day's last values. So the windows of
    ``touched`` and the days after are rewritten, from the points of those days and the
    days before.
    """
    one = timedelta(days=1)
    write = sorted({d for day in touched for d in (day, day + one)})
    read = sorted({d for day in write for d in (day - one, day)})
    return read, write


def run(spark: SparkSession, root: str, out: str, params: RollupParams) -> dict[str, Any]:
    """Read silver points, write gold rollups; returns rows per grain and what was redone.

    Only the days that silver runs since the last rollups touched are recomputed
    (:func:`days_to_recompute`); everything is when rollups never ran with these
    parameters, after ``silver --full``, with ``params.full``, or when a grain or
    ``max_hold_ms`` exceeds a day.
    """
    del root  # rollups read silver only
    key = repr(replace(params, full=False))
    touched = None if params.full else mf.touched_since(spark, out, "rollups", key)
    longest = max(_grains(params).values())
    if longest > DAY_MS or params.max_hold_ms > DAY_MS:
        touched = None
    columns = [*SERIES, "epoch", "seq", "event_ms", "value_num", "quality"]
    points = tables.read_table(spark, out, "points")
    write: list[date] = []
    if touched is not None:
        read, write = days_to_recompute(touched)
        points = points.where(F.col("event_date").isin(read))
    if touched is None or write:
        points = points.select(*columns).cache()
        partials = base_partials(points, params).cache()
        try:
            result = rollup_from(points, partials, params)
            aggregates = tables.read_table(spark, out, "aggregates")
            if touched is not None:
                aggregates = aggregates.where(F.col("event_date").isin(write))
            result = sa.with_aggregates(
                result, sa.rollups_from_aggregates(aggregates, _grains(params)))
            if touched is None:
                tables.write_table(result, out, "rollups", replace_whole=True)
            else:
                result = result.where(F.col("window_date").isin(write))
                tables.write_table(result, out, "rollups")
        finally:
            partials.unpersist()
            points.unpersist()
    mf.mark_consumed(spark, out, "rollups", key, full=touched is None)
    written = tables.read_table(spark, out, "rollups").groupBy("grain").count().collect()
    counts: dict[str, Any] = {row["grain"]: row["count"] for row in written}
    counts["recomputed_days"] = "all" if touched is None else len(write)
    return counts
