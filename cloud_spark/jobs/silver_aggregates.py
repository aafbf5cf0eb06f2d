"""Windowed aggregates computed on the gateway: the silver table, and rollups made of them.

How this works:

* :func:`aggregates` selects the good rows that :mod:`cloud_spark.jobs.silver_parse`
  classified as ``aggregate`` (local topic ``<prefix>/<device>/<point>/agg/<window>``) into
  ``silver/aggregates``: one row per message id, the id columns kept, so the ledger
  (``silver/messages``) and ``quality`` prove that no aggregate is missing as for any message.
  The table is partitioned by the UTC date of the window's start.
* :func:`rollups_from_aggregates` turns them into rollup rows (the ``gold/rollups`` schema)
  for every grain that is a whole multiple of the aggregate's window: ``count`` the sum,
  ``min``/``max`` of the windows', ``first``/``last`` of the first and last window that had a
  sample, ``twa`` = Σ mean·covered / Σ covered (the gateway's time-weighted means, weighted by
  how long each knew the value), ``covered_s`` = Σ covered. ``avg``, ``stddev`` and ``sum``
  need the samples and are null. When a window of one point was sent twice (a gateway killed
  between publishing it and saving that it had: the second copy is ``partial``, with another
  id), the copy that covered most is used. When a point sent aggregates over several windows,
  each rollup window uses the shortest that divides it.
* :func:`with_aggregates` is the rule the ``rollups`` job applies: a rollup window takes its
  figures from ``silver/points`` when raw samples of the point fall in it; a window without
  raw samples (every window of a point configured with ``aggregate_send = "instead"``, or
  one whose raw values only carried in) takes them from the aggregates when there are some.

Pure transforms: nothing is read or written here (the jobs do that).
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F  # noqa: N812

from cloud_spark.jobs import silver_parse as sp
from cloud_spark.jobs.silver_merge import ID

SERIES = ["gateway", "device", "point"]
_UNITS_MS = {"s": 1000, "m": 60_000, "h": 3_600_000}


def window_ms_of(column: str) -> Column:
    """The window named in string column `column` (``"1m"``) in ms; null when it is not
    a whole number and ``s``, ``m`` or ``h``."""
    number = F.expr(f"try_cast(substring({column}, 1, length({column}) - 1) AS BIGINT)")
    unit = F.substring(F.col(column), -1, 1)
    factor = F.when(unit == "s", _UNITS_MS["s"]).when(unit == "m", _UNITS_MS["m"]).when(
        unit == "h", _UNITS_MS["h"])
    return number * factor


def aggregates(parsed: DataFrame) -> DataFrame:
    """``silver/aggregates``: the good aggregate rows of a parsed, deduplicated frame."""
    good = parsed.where(F.col("reason").isNull() & (F.col("kind") == sp.KIND_AGGREGATE))
    with_window = good.withColumn("_w", F.substring_index(F.col("local_topic"), "/", -1))
    start, end = F.col("agg_start"), F.col("agg_end")
    return with_window.select(
        *ID,
        "device",
        "point",
        F.col("_w").alias("window"),
        window_ms_of("_w").alias("window_ms"),
        start.alias("start_ms"),
        end.alias("end_ms"),
        F.timestamp_millis(start).alias("window_start"),
        F.timestamp_millis(end).alias("window_end"),
        F.col("agg_mean").alias("mean"),
        F.col("agg_min").alias("min"),
        F.col("agg_max").alias("max"),
        F.col("agg_first").alias("first"),
        F.col("agg_last").alias("last"),
        F.col("agg_count").alias("count"),
        F.col("agg_covered_ms").alias("covered_ms"),
        "unit",
        F.col("agg_partial").alias("partial"),
        "received_ms",
        "ingest_ms",
        "copies",
        sp.date_of_ms(start).alias("event_date"),
    )


def _one_copy_per_window(aggs: DataFrame) -> DataFrame:
    """One row per (series, window, start): the copy that covered most (then counted most,
    then the latest id: deterministic)."""
    order = Window.partitionBy(*SERIES, "window_ms", "start_ms").orderBy(
        F.col("covered_ms").desc(), F.col("count").desc(), F.col("epoch").desc(),
        F.col("seq").desc())
    ranked = aggs.withColumn("_rank", F.row_number().over(order))
    return ranked.where(F.col("_rank") == 1).drop("_rank")


def rollups_from_aggregates(aggs: DataFrame, grains: dict[str, int]) -> DataFrame:
    """Rollup rows (``gold/rollups`` columns) of every grain the aggregates' windows divide."""
    once = _one_copy_per_window(aggs.where(F.col("window_ms").isNotNull()))
    frames = []
    for name, grain_ms in grains.items():
        fits = once.where((F.lit(grain_ms) % F.col("window_ms")) == 0).withColumn(
            "window_ms_g", (F.floor(F.col("start_ms") / grain_ms) * grain_ms).cast("long"))
        shortest = Window.partitionBy(*SERIES, "window_ms_g")
        used = fits.withColumn("_shortest", F.min("window_ms").over(shortest)).where(
            F.col("window_ms") == F.col("_shortest"))
        weighted = F.when(F.col("covered_ms") > 0, F.col("mean") * F.col("covered_ms"))
        sampled = F.col("count") > 0
        rolled = used.groupBy(*SERIES, "window_ms_g").agg(
            F.sum("count").alias("count"),
            F.min("min").alias("min"),
            F.max("max").alias("max"),
            F.min_by(F.when(sampled, F.col("first")), F.when(sampled, F.col("start_ms"))
                     ).alias("first"),
            F.max_by(F.when(sampled, F.col("last")), F.when(sampled, F.col("start_ms"))
                     ).alias("last"),
            F.sum(weighted).alias("weighted"),
            F.sum(F.when(F.col("mean").isNotNull(), F.col("covered_ms"))).alias("covered"),
        )
        frames.append(rolled.select(
            *SERIES,
            F.timestamp_millis("window_ms_g").alias("window_start"),
            F.timestamp_millis(F.col("window_ms_g") + F.lit(grain_ms)).alias("window_end"),
            F.col("count").cast("long").alias("count"),
            "min",
            "max",
            F.lit(None).cast("double").alias("avg"),
            F.lit(None).cast("double").alias("stddev"),
            F.lit(None).cast("double").alias("sum"),
            "first",
            "last",
            F.when(F.col("covered") > 0, F.col("weighted") / F.col("covered")).alias("twa"),
            F.coalesce(F.col("covered") / 1000.0, F.lit(0.0)).alias("covered_s"),
            F.lit(name).alias("grain"),
            sp.date_of_ms(F.col("window_ms_g")).alias("window_date"),
        ))
    result = frames[0]
    for frame in frames[1:]:
        result = result.unionByName(frame)
    return result


def with_aggregates(from_points: DataFrame, from_aggregates: DataFrame) -> DataFrame:
    """Rollups from raw samples, and from aggregates where a window has no raw sample."""
    key = [*SERIES, "grain", "window_start"]
    sampled = from_points.where(F.col("count") > 0).select(*key)
    filling = from_aggregates.join(sampled, key, "left_anti")
    kept = from_points.join(filling.select(*key), key, "left_anti")
    return kept.unionByName(filling.select(*from_points.columns))
