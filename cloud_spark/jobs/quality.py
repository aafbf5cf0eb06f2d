"""``quality``: missing sequence numbers, out-of-range and stuck values, clock skew.

How this works:

* **Missing sequence numbers** are the proof that nothing was lost between the gateway's
  outbox and the cloud tables. The uplink numbers messages 1, 2, 3, … per (gateway, epoch),
  so for every (gateway, epoch) in the ``silver/messages`` ledger (good *and* quarantined
  messages: a quarantined message was not lost) ``missing = last_seq - distinct seqs``, and
  :func:`seq_gaps` lists each hole as ``[missing_from, missing_to]`` (including a hole before
  the first seq received). Messages after the last one received cannot be seen from here;
  the uplink's ``dropped`` counter (``health``) covers deliberate drops.
  :func:`seq_summary` also counts duplicates removed and ids whose copies disagree.
  An epoch spans many days, so both are built from ``gold/seq_ranges`` (:func:`seq_ranges`:
  per gateway, epoch and event date, the runs of consecutive seqs received, with their
  duplicates and conflicts): a day's ranges depend on that day's ledger rows only, and the
  ranges of all days, merged, give the distinct seqs of an epoch and its holes.
* **Out of range**: a table of ``point, min, max`` (either bound may be null) is joined on
  the point name; consecutive out-of-range samples of a series form one flag (runs found
  with gaps-and-islands), carrying the value furthest outside the range.
* **Stuck**: a numeric series reporting the same value for at least ``stuck_after`` and
  ``stuck_min_samples`` samples (heartbeats included) is a flat line.
* **Clock skew** per device and day: ``received_ms - event_ms`` (device clock against the
  gateway's) beyond ``skew_threshold``, and ``gateway_ahead``: messages the gateway stamped
  later than the lander landed them (the gateway clock runs ahead of the cloud's).
* **Incremental** (:func:`run`): ``seq_ranges`` and ``clock_skew`` are rewritten for the days
  new silver data touched, ``seq_summary`` and ``seq_gaps`` rebuilt from all of the (small)
  ``seq_ranges``. Flags are recomputed per series from the run that was going on at the first
  touched day's midnight (a run that started a week ago goes on, or is cut by a late sample),
  which is read in whole: from its flag's start when it is flagged, else from the series'
  last change of value (:func:`flags_since`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import date
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F  # noqa: N812
from pyspark.sql.types import DoubleType, StringType, StructField, StructType

from cloud_spark import contract as c
from cloud_spark import tables
from cloud_spark.jobs import manifest as mf
from cloud_spark.jobs.lookback import ORDER, in_days, latest_before
from cloud_spark.jobs.silver_parse import date_of_ms

SERIES = ["gateway", "device", "point"]
STREAM = ["gateway", "epoch"]
RANGES_SCHEMA = StructType(
    [
        StructField("point", StringType(), False),
        StructField("min", DoubleType(), True),
        StructField("max", DoubleType(), True),
    ]
)


@dataclass(frozen=True)
class QualityParams:
    """Parameters of the quality job (CLI flags)."""

    ranges: tuple[tuple[str, float | None, float | None], ...] = ()
    stuck_after_ms: int = 3_600_000
    stuck_min_samples: int = 5
    skew_threshold_ms: int = 60_000
    #: recompute everything (``--full``), not only what new silver data touched
    full: bool = False


def seq_ranges(messages: DataFrame) -> DataFrame:
    """Per (gateway, epoch, event_date): every run ``[first_seq, last_seq]`` of consecutive
    seqs received that day, with the duplicates removed and conflicting ids among them."""
    valid = messages.where(F.col("seq") >= c.FIRST_SEQ)
    per_seq = valid.groupBy(*STREAM, "event_date", "seq").agg(
        F.sum(F.col("copies") - 1).alias("duplicates"),
        F.count_if("conflict").alias("conflicts"),
    )
    order = Window.partitionBy(*STREAM, "event_date").orderBy("seq")
    island = F.col("seq") - F.row_number().over(order)
    return (
        per_seq.withColumn("_island", island)
        .groupBy(*STREAM, "event_date", "_island")
        .agg(
            F.min("seq").alias("first_seq"),
            F.max("seq").alias("last_seq"),
            F.sum("duplicates").alias("duplicates"),
            F.sum("conflicts").alias("conflicts"),
        )
        .drop("_island")
    )


def _merged(ranges: DataFrame) -> DataFrame:
    """The ranges of all days merged per (gateway, epoch): the distinct seqs as disjoint,
    non-adjacent ``[first_seq, last_seq]`` intervals."""
    order = Window.partitionBy(*STREAM).orderBy("first_seq", "last_seq")
    reach = F.max("last_seq").over(order.rowsBetween(Window.unboundedPreceding, -1))
    starts = F.coalesce(F.col("first_seq") > reach + 1, F.lit(True))
    islands = ranges.withColumn("_island", F.sum(F.when(starts, 1).otherwise(0)).over(order))
    return islands.groupBy(*STREAM, "_island").agg(
        F.min("first_seq").alias("first_seq"), F.max("last_seq").alias("last_seq")
    )


def summary_from_ranges(ranges: DataFrame) -> DataFrame:
    """:func:`seq_summary` from ``gold/seq_ranges`` rows."""
    received = _merged(ranges).groupBy(*STREAM).agg(
        F.sum(F.col("last_seq") - F.col("first_seq") + 1).alias("received")
    )
    totals = ranges.groupBy(*STREAM).agg(
        F.min("first_seq").alias("first_seq"),
        F.max("last_seq").alias("last_seq"),
        F.sum("duplicates").alias("duplicates"),
        F.sum("conflicts").alias("conflicts"),
    )
    return totals.join(received, STREAM).select(
        *STREAM,
        "first_seq",
        "last_seq",
        "received",
        (F.col("last_seq") - F.col("received")).alias("missing"),
        "duplicates",
        "conflicts",
    )


def gaps_from_ranges(ranges: DataFrame) -> DataFrame:
    """:func:`seq_gaps` from ``gold/seq_ranges`` rows."""
    order = Window.partitionBy(*STREAM).orderBy("first_seq")
    prev = F.coalesce(F.lag("last_seq").over(order), F.lit(c.FIRST_SEQ - 1))
    return (
        _merged(ranges)
        .withColumn("_prev", prev)
        .where(F.col("first_seq") - F.col("_prev") > 1)
        .select(
            *STREAM,
            (F.col("_prev") + 1).alias("missing_from"),
            (F.col("first_seq") - 1).alias("missing_to"),
            (F.col("first_seq") - F.col("_prev") - 1).alias("missing"),
        )
    )


def seq_summary(messages: DataFrame) -> DataFrame:
    """Per (gateway, epoch): first/last seq, received, missing, duplicates, conflicts."""
    return summary_from_ranges(seq_ranges(messages))


def seq_gaps(messages: DataFrame) -> DataFrame:
    """Every hole ``[missing_from, missing_to]`` in the seqs of a (gateway, epoch)."""
    return gaps_from_ranges(seq_ranges(messages))


def _runs(df: DataFrame, flag: Column, keys: list[str]) -> DataFrame:
    """Add ``_run``: consecutive rows (by event time) with equal ``flag`` share a run id."""
    order = Window.partitionBy(*keys).orderBy(*ORDER)
    flagged = df.withColumn("_flag", flag)
    changed = F.coalesce(~F.col("_flag").eqNullSafe(F.lag("_flag").over(order)), F.lit(True))
    return flagged.withColumn("_run", F.sum(F.when(changed, 1).otherwise(0)).over(order))


def out_of_range(points: DataFrame, ranges: DataFrame) -> DataFrame:
    """Flag runs of samples outside ``[min, max]`` of their point (ranges: point/min/max)."""
    numeric = points.where(F.col("value_type") == "number")
    bounds = ranges.withColumnsRenamed({"min": "lo", "max": "hi"})
    joined = numeric.join(F.broadcast(bounds), "point")
    below = F.col("lo") - F.col("value_num")
    above = F.col("value_num") - F.col("hi")
    outside = F.coalesce(below > 0, F.lit(False)) | F.coalesce(above > 0, F.lit(False))
    runs = _runs(joined, outside, SERIES).where(F.col("_flag"))
    excess = F.greatest(F.coalesce(below, F.lit(0.0)), F.coalesce(above, F.lit(0.0)))
    return (
        runs.groupBy(*SERIES, "_run")
        .agg(
            F.min("event_ms").alias("start_ms"),
            F.max("event_ms").alias("end_ms"),
            F.count(F.lit(1)).alias("samples"),
            F.max_by("value_num", excess).alias("value"),
            F.first("lo").alias("lo"),
            F.first("hi").alias("hi"),
        )
        .select(
            *SERIES,
            F.lit("out_of_range").alias("check"),
            "start_ms",
            "end_ms",
            "samples",
            "value",
            F.format_string(
                "outside [%s, %s]",
                F.coalesce(F.col("lo").cast("string"), F.lit("-inf")),
                F.coalesce(F.col("hi").cast("string"), F.lit("inf")),
            ).alias("detail"),
            date_of_ms(F.col("start_ms")).alias("event_date"),
        )
    )


def stuck(points: DataFrame, stuck_after_ms: int, min_samples: int) -> DataFrame:
    """Flag numeric series that repeated one value for ``stuck_after_ms`` or longer."""
    numeric = points.where(F.col("value_type") == "number")
    order = Window.partitionBy(*SERIES).orderBy(*ORDER)
    changed = F.coalesce(F.col("value_num") != F.lag("value_num").over(order), F.lit(True))
    runs = numeric.withColumn("_run", F.sum(F.when(changed, 1).otherwise(0)).over(order))
    grouped = runs.groupBy(*SERIES, "_run").agg(
        F.min("event_ms").alias("start_ms"),
        F.max("event_ms").alias("end_ms"),
        F.count(F.lit(1)).alias("samples"),
        F.first("value_num").alias("value"),
    )
    long_enough = (F.col("end_ms") - F.col("start_ms") >= stuck_after_ms) & (
        F.col("samples") >= min_samples
    )
    return grouped.where(long_enough).select(
        *SERIES,
        F.lit("stuck").alias("check"),
        "start_ms",
        "end_ms",
        "samples",
        "value",
        F.format_string(
            "same value for %.0f s", (F.col("end_ms") - F.col("start_ms")) / 1000.0
        ).alias("detail"),
        date_of_ms(F.col("start_ms")).alias("event_date"),
    )


def clock_skew(points: DataFrame, skew_threshold_ms: int) -> DataFrame:
    """Per device and day: device-vs-gateway skew statistics, gateway-ahead count, and the
    lag from event time to ingest time (what an outage's backlog adds)."""
    skew = (F.col("received_ms") - F.col("event_ms")) / 1000.0
    ahead = (F.col("received_ms") - F.col("ingest_ms")) > skew_threshold_ms
    lag = (F.col("ingest_ms") - F.col("event_ms")) / 1000.0
    timed = (points.where(F.col("received_ms").isNotNull())
             .withColumn("_skew", skew).withColumn("_lag", lag))
    return timed.groupBy("gateway", "device", "event_date").agg(
        F.count(F.lit(1)).alias("samples"),
        F.count_if(F.abs(F.col("_skew")) > skew_threshold_ms / 1000.0).alias("skewed"),
        F.min("_skew").alias("min_skew_s"),
        F.max("_skew").alias("max_skew_s"),
        F.percentile_approx("_skew", 0.5).alias("median_skew_s"),
        F.count_if(ahead).alias("gateway_ahead"),
        F.percentile_approx("_lag", 0.5).alias("median_ingest_lag_s"),
        F.max("_lag").alias("max_ingest_lag_s"),
    )


def ranges_frame(spark: SparkSession, params: QualityParams) -> DataFrame:
    return spark.createDataFrame(list(params.ranges), RANGES_SCHEMA)


def flags(points: DataFrame, ranges: DataFrame, params: QualityParams) -> DataFrame:
    """Out-of-range and stuck flags of a ``silver/points`` frame (pure)."""
    return out_of_range(points, ranges).unionByName(
        stuck(points, params.stuck_after_ms, params.stuck_min_samples)
    )


def _read_from(before: DataFrame, start: DataFrame) -> DataFrame:
    """The samples of ``before`` of each series of ``start`` from its ``_from`` (ms) on;
    a null ``_from`` reads the series from its beginning."""
    bounds = start.agg(
        F.count(F.lit(1)), F.min("_from"), F.count_if(F.col("_from").isNull())
    ).first()
    if bounds is None or not bounds[0]:
        return before.limit(0)
    if not bounds[2]:  # partitions before the earliest start are not read
        before = before.where(F.col("event_date") >= date_of_ms(F.lit(bounds[1])))
    since = F.col("_from").isNull() | (F.col("event_ms") >= F.col("_from"))
    return before.join(start, SERIES).where(since).drop("_from")


def flags_since(
    points: DataFrame, old: DataFrame, ranges: DataFrame, params: QualityParams, cut: date
) -> tuple[DataFrame, DataFrame]:
    """``(new, kept)``: the flags of the series with samples from ``cut`` on, recomputed from
    the run each was in at the cut, and the ``old`` flags that stay.

    A series' runs that end before its last numeric sample before the cut are final (kept
    from ``old``); the run through that sample may go on past the cut or be cut by a late
    sample, so it is recomputed from its start: its flag's start when ``old`` holds one
    (either check), else, for a flat run not flagged yet, the last sample with another
    value. Samples read before a run's start are harmless: runs that end before the last
    sample are dropped from the result.
    """
    numeric = points.where(F.col("value_type") == "number")
    tail = numeric.where(F.col("event_date") >= F.lit(cut))
    wanted = tail.select(*SERIES).distinct()
    # materialized once (one row per series): every part below starts from it
    last = (
        latest_before(numeric, wanted, SERIES, cut)
        .select(*SERIES, "event_ms", "epoch", "seq", F.col("value_num").alias("_v"))
        .localCheckpoint()
    )
    # fresh column ids: Spark 4.2's analyzer fails (INTERNAL_ERROR, conflicting references)
    # to join the checkpoint, whose columns keep the ids of `numeric`, back with `numeric`
    last = last.select([F.col(name).alias(name) for name in last.columns])
    through = old.join(last, SERIES).where(
        (F.col("start_ms") <= F.col("event_ms")) & (F.col("end_ms") >= F.col("event_ms"))
    )
    flagged = through.groupBy(*SERIES).agg(
        F.min("start_ms").alias("_flag_from"), F.count_if(F.col("check") == "stuck").alias("_s")
    )
    unflagged = last.join(flagged.where("_s > 0"), SERIES, "left_anti")
    changed = latest_before(
        numeric.join(unflagged.select(*SERIES, "_v"), SERIES), unflagged.select(*SERIES),
        SERIES, cut, F.col("value_num") != F.col("_v"),
    ).select(*SERIES, F.col("event_ms").alias("_changed"))  # fmt: skip
    start = (
        last.join(flagged, SERIES, "left")
        .join(changed, SERIES, "left")
        .join(unflagged.select(*SERIES, F.lit(True).alias("_flat")), SERIES, "left")
        .select(
            *SERIES,
            # a flat run not flagged yet goes back to the last change (or the beginning)
            F.when(
                F.col("_flat").isNotNull() & F.col("_changed").isNull(), F.lit(None)
            ).otherwise(
                F.least("_flag_from", "_changed", "event_ms")
            ).alias("_from"),
        )
        .localCheckpoint()
    )  # fmt: skip
    before = _read_from(numeric.where(F.col("event_date") < F.lit(cut)), start)
    samples = tail.unionByName(before)
    ends = wanted.join(last.select(*SERIES, F.col("event_ms").alias("_last")), SERIES, "left")
    new = (
        flags(samples, ranges, params)
        .join(ends, SERIES, "left")
        .where(F.col("_last").isNull() | (F.col("end_ms") >= F.col("_last")))
        .drop("_last")
    )
    kept = (
        old.join(ends.withColumn("_redone", F.lit(True)), SERIES, "left")
        .where(F.col("_redone").isNull() | (F.col("end_ms") < F.col("_last")))
        .drop("_redone", "_last")
    )
    return new, kept


def run(spark: SparkSession, root: str, out: str, params: QualityParams) -> dict[str, Any]:
    """Read silver, write seq ranges/summary/gaps, quality flags and clock skew.

    Only what new silver runs touched is recomputed (see the module docstring); everything
    when the job never ran with these parameters, after ``silver --full``, or with
    ``params.full``.
    """
    del root
    key = repr(replace(params, full=False))
    touched = None if params.full else mf.touched_since(spark, out, "quality", key)
    if touched is not None and not touched:  # nothing new since the last run
        mf.mark_consumed(spark, out, "quality", key, full=False)
        return {**_counts(spark, out), "recomputed_days": 0}
    messages = tables.read_table(spark, out, "messages")
    points = tables.read_table(spark, out, "points")
    ranges = ranges_frame(spark, params)
    skew_threshold = params.skew_threshold_ms
    if touched is None:
        tables.write_table(seq_ranges(messages), out, "seq_ranges", replace_whole=True)
        tables.write_table(flags(points, ranges, params), out, "quality_flags")
        skew = clock_skew(points, skew_threshold)
        tables.write_table(skew, out, "clock_skew", replace_whole=True)
    else:
        day = in_days(touched)
        tables.write_table(seq_ranges(messages.where(day)), out, "seq_ranges")
        tables.write_table(clock_skew(points.where(day), skew_threshold), out, "clock_skew")
        # held in the driver (flags are events, not samples): the table is rewritten below
        old = tables.held_in_driver(spark, tables.read_table(spark, out, "quality_flags"))
        new, kept = flags_since(points, old, ranges, params, min(touched))
        tables.write_table(kept.unionByName(tables.conform(new, kept.schema)), out, "quality_flags")
    all_ranges = tables.read_table(spark, out, "seq_ranges")
    tables.write_table(summary_from_ranges(all_ranges), out, "seq_summary")
    tables.write_table(gaps_from_ranges(all_ranges), out, "seq_gaps")
    mf.mark_consumed(spark, out, "quality", key, full=touched is None)
    return {**_counts(spark, out), "recomputed_days": "all" if touched is None else len(touched)}


def _counts(spark: SparkSession, out: str) -> dict[str, int]:
    missing = tables.read_table(spark, out, "seq_summary").agg(F.sum("missing")).first()
    n_flags = tables.read_table(spark, out, "quality_flags").count()
    return {"missing_seq": int((missing[0] if missing else 0) or 0), "quality_flags": n_flags}
