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
* **Out of range**: a table of ``point, min, max`` (either bound may be null) is joined on
  the point name; consecutive out-of-range samples of a series form one flag (runs found
  with gaps-and-islands), carrying the value furthest outside the range.
* **Stuck**: a numeric series reporting the same value for at least ``stuck_after`` and
  ``stuck_min_samples`` samples (heartbeats included) is a flat line.
* **Clock skew** per device and day: ``received_ms - event_ms`` (device clock against the
  gateway's) beyond ``skew_threshold``, and ``gateway_ahead``: messages the gateway stamped
  later than the lander landed them (the gateway clock runs ahead of the cloud's).
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F  # noqa: N812
from pyspark.sql.types import DoubleType, StringType, StructField, StructType

from cloud_spark import contract as c
from cloud_spark import tables
from cloud_spark.jobs.silver import date_of_ms

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


def seq_summary(messages: DataFrame) -> DataFrame:
    """Per (gateway, epoch): first/last seq, received, missing, duplicates, conflicts."""
    valid = messages.where(F.col("seq") >= c.FIRST_SEQ)
    return valid.groupBy(*STREAM).agg(
        F.min("seq").alias("first_seq"),
        F.max("seq").alias("last_seq"),
        F.count_distinct("seq").alias("received"),
        (F.max("seq") - F.count_distinct("seq")).alias("missing"),
        F.sum(F.col("copies") - 1).alias("duplicates"),
        F.count_if("conflict").alias("conflicts"),
    )


def seq_gaps(messages: DataFrame) -> DataFrame:
    """Every hole ``[missing_from, missing_to]`` in the seqs of a (gateway, epoch)."""
    seqs = messages.where(F.col("seq") >= c.FIRST_SEQ).select(*STREAM, "seq").distinct()
    order = Window.partitionBy(*STREAM).orderBy("seq")
    prev = F.coalesce(F.lag("seq").over(order), F.lit(c.FIRST_SEQ - 1))
    return (
        seqs.withColumn("_prev", prev)
        .where(F.col("seq") - F.col("_prev") > 1)
        .select(
            *STREAM,
            (F.col("_prev") + 1).alias("missing_from"),
            (F.col("seq") - 1).alias("missing_to"),
            (F.col("seq") - F.col("_prev") - 1).alias("missing"),
        )
    )


def _runs(df: DataFrame, flag: Column, keys: list[str]) -> DataFrame:
    """Add ``_run``: consecutive rows (by event time) with equal ``flag`` share a run id."""
    order = Window.partitionBy(*keys).orderBy("event_ms", "epoch", "seq")
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
    order = Window.partitionBy(*SERIES).orderBy("event_ms", "epoch", "seq")
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


def run(spark: SparkSession, root: str, out: str, params: QualityParams) -> dict[str, int]:
    """Read silver, write seq summary/gaps, quality flags and clock skew."""
    del root
    messages = tables.read_table(spark, out, "messages")
    points = tables.read_table(spark, out, "points")
    tables.write_table(seq_summary(messages), out, "seq_summary")
    tables.write_table(seq_gaps(messages), out, "seq_gaps")
    flags = out_of_range(points, ranges_frame(spark, params)).unionByName(
        stuck(points, params.stuck_after_ms, params.stuck_min_samples)
    )
    tables.write_table(flags, out, "quality_flags")
    tables.write_table(clock_skew(points, params.skew_threshold_ms), out, "clock_skew")
    missing = tables.read_table(spark, out, "seq_summary").agg(F.sum("missing")).first()
    n_flags = tables.read_table(spark, out, "quality_flags").count()
    return {"missing_seq": int((missing[0] if missing else 0) or 0), "quality_flags": n_flags}
