"""Merge a run's new silver rows into the partitions of silver they touch (pure transforms).

How this works: an incremental ``silver`` run parses only new bronze files and deduplicates
them among themselves (:func:`cloud_spark.jobs.silver.dedupe`). A message id can also be in
silver already (a duplicate or redelivery landed in a later run). :func:`resolve` joins the
new ledger (``silver/messages`` rows) with the existing ledger rows of the same event dates
and decides, per id present in both, what one full run over all of bronze would have kept:
the copy landed first (smallest ``ingest_ms``, then smallest ``content_hash``, exactly the
order of :func:`~cloud_spark.jobs.silver.dedupe`); ``copies`` add up; the id is a
``conflict`` when either side was one or their content hashes differ.

:func:`merge` then rebuilds one table's touched partitions: existing rows of those
partitions plus the new rows, one row per id (the winner of :func:`resolve`; for an id that
only appears on both sides because an interrupted run is being redone, the new row), rows
without an id kept as they are. The caller writes the result with dynamic partition
overwrite, so every other partition stays untouched.

Exact except for one case the docs name: copies of one id whose *content differs* (an epoch
reused by mistake) can place the two copies in different event dates; the loser's row stays
in a partition the run did not touch until ``silver --full``.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F  # noqa: N812

ID = ["gateway", "epoch", "seq"]

QUARANTINED = "quarantined"


def has_id() -> Column:
    """True for rows that carry a whole message id."""
    return F.col("gateway").isNotNull() & F.col("epoch").isNotNull() & F.col("seq").isNotNull()


def resolve(existing: DataFrame, new: DataFrame) -> DataFrame:
    """Ids in both ledgers → ``_new_wins``, ``_copies``, ``_conflict``, ``_old_quarantine_date``.

    ``_old_quarantine_date`` is the quarantine partition (ingest date) of the existing copy
    when it was quarantined: that partition must be rewritten too.
    """
    old = existing.select(
        *ID,
        F.col("ingest_ms").alias("_e_ingest"),
        F.col("content_hash").alias("_e_hash"),
        F.col("copies").alias("_e_copies"),
        F.col("conflict").alias("_e_conflict"),
        F.col("status").alias("_e_status"),
    )
    fresh = new.select(
        *ID,
        F.col("ingest_ms").alias("_n_ingest"),
        F.col("content_hash").alias("_n_hash"),
        F.col("copies").alias("_n_copies"),
        F.col("conflict").alias("_n_conflict"),
    )
    both = old.join(fresh, ID)
    earlier = F.col("_n_ingest") < F.col("_e_ingest")
    tie_smaller = (F.col("_n_ingest") == F.col("_e_ingest")) & (F.col("_n_hash") < F.col("_e_hash"))
    old_day = F.date_from_unix_date(F.floor(F.col("_e_ingest") / F.lit(86_400_000)).cast("int"))
    return both.select(
        *ID,
        (earlier | tie_smaller).alias("_new_wins"),
        (F.col("_e_copies") + F.col("_n_copies")).alias("_copies"),
        (
            F.col("_e_conflict") | F.col("_n_conflict") | (F.col("_e_hash") != F.col("_n_hash"))
        ).alias("_conflict"),
        F.when(F.col("_e_status") == QUARANTINED, old_day).alias("_old_quarantine_date"),
    )


def merge(existing: DataFrame, new: DataFrame, resolution: DataFrame) -> DataFrame:
    """One table's touched partitions after the run: one row per id, id-less rows kept.

    ``existing`` holds only the touched partitions; both frames have the table's columns.
    """
    both = existing.withColumn("_new", F.lit(False)).unionByName(
        new.withColumn("_new", F.lit(True))
    )
    loose = both.where(~has_id())
    decided = both.where(has_id()).join(
        F.broadcast(resolution.select(*ID, "_new_wins", "_copies", "_conflict")), ID, "left"
    )
    # the winner sorts first: per resolve(), or the new row of a redone run
    loses = F.when(F.col("_new_wins").isNull(), ~F.col("_new")).otherwise(
        F.col("_new") != F.col("_new_wins")
    )
    rank = F.row_number().over(Window.partitionBy(*ID).orderBy(loses))
    kept = decided.withColumn("_rank", rank).where(F.col("_rank") == 1)
    updates = {"copies": F.coalesce(F.col("_copies"), F.col("copies"))}
    if "conflict" in existing.columns:
        updates["conflict"] = F.coalesce(F.col("_conflict"), F.col("conflict"))
    kept = kept.withColumns(updates).select(*existing.columns)
    return kept.unionByName(loose.select(*existing.columns))
