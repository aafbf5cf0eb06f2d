"""Merge a run's new silver rows into silver (Delta ``MERGE`` on the message id).

How this works: an incremental ``silver`` run parses only new bronze files and deduplicates
them among themselves (:func:`cloud_spark.jobs.silver.dedupe`). A message id can also be in
silver already (a duplicate or redelivery landed in a later run). :func:`resolve` joins the
new ledger (``silver/messages`` rows) with the existing ledger rows of the same event dates
and decides, per id present in both, what one full run over all of bronze would have kept:
the copy landed first (smallest ``ingest_ms``, then smallest ``content_hash``, exactly the
order of :func:`~cloud_spark.jobs.silver.dedupe`); ``copies`` add up; the id is a
``conflict`` when either side was one or their content hashes differ.

:func:`merge_into` then merges one table's new rows with a Delta ``MERGE`` on
``(gateway, epoch, seq)``: new ids are inserted, an id the table holds keeps the winner's
row with the summed ``copies``, rows without an id are inserted as they are. The merge is
one atomic commit; a rerun or a retried job never doubles a row.

Exact except for one case the docs name: copies of one id whose *content differs* (an epoch
reused by mistake) can place the two copies in different event dates, or in different
tables (one quarantined, one good); the loser's row stays until ``silver --full``.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F  # noqa: N812

from cloud_spark import tables
from cloud_spark.jobs.silver_parse import date_of_ms

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
    old_day = date_of_ms(F.col("_e_ingest"))
    return both.select(
        *ID,
        (earlier | tie_smaller).alias("_new_wins"),
        (F.col("_e_copies") + F.col("_n_copies")).alias("_copies"),
        (
            F.col("_e_conflict") | F.col("_n_conflict") | (F.col("_e_hash") != F.col("_n_hash"))
        ).alias("_conflict"),
        F.when(F.col("_e_status") == QUARANTINED, old_day).alias("_old_quarantine_date"),
    )


def merge_into(
    spark: SparkSession,
    out: str,
    name: str,
    frame: DataFrame,
    resolution: DataFrame,
    prune: tuple[Any, ...] = (),
) -> None:
    """Delta ``MERGE`` of one table's new rows into the table, on the message id.

    An id the table does not hold is inserted; for one it holds, the row of the copy that
    :func:`resolve` says wins is kept (the new row replaces the old one when it landed
    first) and ``copies`` and ``conflict`` become the sums of both sides. Rows without an id
    never match (``NULL = NULL`` is not true) and are inserted as they are. ``prune`` lists
    the partitions the target rows can be in (empty: all of them): Delta then reads only
    those files. A table that does not exist yet (one a later version added) is created
    with the new rows.
    """
    table = tables.TABLES[name]
    if not tables.is_delta(spark, tables.table_path(out, name)):  # a table added since
        tables.append_table(frame, out, name)
        return
    columns = [f.name for f in table.schema.fields]
    decided = resolution.select(*ID, "_new_wins", "_copies", "_conflict")
    source = tables.conform(frame, table.schema).join(F.broadcast(decided), ID, "left")
    on = " AND ".join(f"t.{col} = s.{col}" for col in ID)
    if prune:
        dates = ", ".join(f"DATE'{day}'" for day in prune)
        on += f" AND t.{table.partition_by[0]} IN ({dates})"
    sums = {"copies": "coalesce(s._copies, t.copies + s.copies)"}
    if "conflict" in columns:
        sums["conflict"] = "coalesce(s._conflict, t.conflict OR s.conflict)"
    replace = ", ".join(f"t.{col} = {sums.get(col, f's.{col}')}" for col in columns)
    add_up = ", ".join(f"t.{col} = {expr}" for col, expr in sums.items())
    view = f"silver_new_{name}"
    source.createOrReplaceTempView(view)
    try:
        spark.sql(
            f"MERGE INTO {tables.sql_name(tables.table_path(out, name))} t USING {view} s"
            f" ON {on}"
            f" WHEN MATCHED AND s._new_wins THEN UPDATE SET {replace}"
            f" WHEN MATCHED THEN UPDATE SET {add_up}"
            f" WHEN NOT MATCHED THEN INSERT ({', '.join(columns)})"
            f" VALUES ({', '.join(f's.{col}' for col in columns)})"
        )
    finally:
        spark.catalog.dropTempView(view)
