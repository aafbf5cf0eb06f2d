"""Where the tables live and how they are read and written (the E and L of every job).

How this works: bronze lives under ``<root>/bronze`` (written by the lander); every table a
job writes is a Delta Lake table under ``<out>/<relative path>``, described once in
:data:`TABLES` (path, schema, partition columns). :func:`write_table` projects a frame onto
the table schema (:func:`conform`) and writes it as one Delta commit with *dynamic partition
overwrite*: a re-run replaces exactly the partitions it produces and leaves the others
alone, so running a job twice gives the same table, and a run that dies leaves the table as
it was (a commit is atomic). Tables without partition columns are small summaries and are
replaced whole, and so are the event tables marked ``replace_whole`` (see :class:`Table`).
``silver`` merges into its tables instead (:func:`merge_sql`, Delta ``MERGE``). Reads go
through the Delta log (:func:`read_table`): a table is whatever its latest commit says, so a
reader never sees half a write. Paths are plain strings joined with ``/``, so ``s3a://`` or
``abfss://`` roots work like local directories.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, DataFrameWriter, SparkSession
from pyspark.sql import functions as F  # noqa: N812
from pyspark.sql.types import StructType

from cloud_spark import contract as c
from cloud_spark import schemas as s


@dataclass(frozen=True)
class Table:
    """A table written by a job: relative path, schema, partition columns, overwrite mode.

    ``replace_whole`` marks event tables (outages, flags) that a run recomputes completely
    from silver and whose rows can disappear (late data fills a gap): they are replaced as a
    whole, so no stale partition survives. Every other table is written with dynamic
    partition overwrite.
    """

    path: str
    schema: StructType
    partition_by: tuple[str, ...] = ()
    replace_whole: bool = False


TABLES: dict[str, Table] = {
    "messages": Table("silver/messages", s.MESSAGES, ("event_date",)),
    "points": Table("silver/points", s.POINTS, ("event_date",)),
    "aggregates": Table("silver/aggregates", s.AGGREGATES, ("event_date",)),
    "alarm_events": Table("silver/alarm_events", s.ALARM_EVENTS, ("event_date",)),
    "status": Table("silver/status", s.STATUS, ("event_date",)),
    "device_diagnostics": Table("silver/device_diagnostics", s.DEVICE_DIAGNOSTICS, ("event_date",)),
    "uplink_diagnostics": Table("silver/uplink_diagnostics", s.UPLINK_DIAGNOSTICS, ("event_date",)),
    "quarantine": Table("silver/quarantine", s.QUARANTINE, ("ingest_date",)),
    "rollups": Table("gold/rollups", s.ROLLUPS, ("grain", "window_date")),
    "outages": Table("gold/outages", s.OUTAGES, ("event_date",), replace_whole=True),
    "gateway_outages": Table(
        "gold/gateway_outages", s.GATEWAY_OUTAGES, ("event_date",), replace_whole=True
    ),
    "availability": Table("gold/availability", s.AVAILABILITY, ("event_date",)),
    "link_outages": Table("gold/link_outages", s.LINK_OUTAGES, ("event_date",), replace_whole=True),
    "seq_ranges": Table("gold/seq_ranges", s.SEQ_RANGES, ("event_date",)),
    "seq_summary": Table("gold/seq_summary", s.SEQ_SUMMARY),
    "seq_gaps": Table("gold/seq_gaps", s.SEQ_GAPS),
    "quality_flags": Table(
        "gold/quality_flags", s.QUALITY_FLAGS, ("event_date",), replace_whole=True
    ),
    "clock_skew": Table("gold/clock_skew", s.CLOCK_SKEW, ("event_date",)),
    "device_health": Table("gold/device_health", s.DEVICE_HEALTH, ("event_date",)),
    "link_health": Table("gold/link_health", s.LINK_HEALTH, ("event_date",)),
    "fleet": Table("gold/fleet", s.FLEET, replace_whole=True),
    "alarms": Table("gold/alarms", s.ALARMS, ("event_date",), replace_whole=True),
}


def join_path(base: str, *parts: str) -> str:
    """Join path pieces with ``/`` (works for local paths and object-store URIs)."""
    return "/".join([base.rstrip("/"), *(part.strip("/") for part in parts)])


def table_path(out: str, name: str) -> str:
    return join_path(out, TABLES[name].path)


def conform(df: DataFrame, schema: StructType) -> DataFrame:
    """Select exactly the schema's columns, in order, cast to the schema's types.

    A missing column raises; extra columns are dropped.
    """
    return df.select([F.col(f.name).cast(f.dataType).alias(f.name) for f in schema.fields])


def empty(spark: SparkSession, schema: StructType) -> DataFrame:
    return spark.createDataFrame([], schema)


def read_bronze(spark: SparkSession, root: str, files: list[str] | None = None) -> DataFrame:
    """Bronze records with the explicit bronze schema: all of ``<root>/bronze``, or ``files``.

    ``files`` are paths relative to ``<root>/bronze``; the partition columns still come from
    their directories (``basePath``). A file that vanished since it was listed is skipped and
    a truncated gzip file yields the lines before the break (``ignoreMissingFiles``,
    ``ignoreCorruptFiles``): :mod:`cloud_spark.jobs.manifest` records both with a reason.
    """
    path = join_path(root, c.BRONZE_DIR)
    if files is not None and not files:
        return empty(spark, s.BRONZE)
    reader = (
        spark.read.schema(s.BRONZE)
        .option("mode", "PERMISSIVE")
        .option("columnNameOfCorruptRecord", "_corrupt_record")
        .option("basePath", path)
        .option("ignoreMissingFiles", "true")
        .option("ignoreCorruptFiles", "true")
    )
    if files is not None:  # checked to exist just before; a miss here fails the run (redone)
        return reader.json([join_path(path, rel) for rel in files])
    try:
        return reader.json(path)
    except AnalysisException as exc:
        if "PATH_NOT_FOUND" in str(exc) or "Path does not exist" in str(exc):
            return empty(spark, s.BRONZE)
        raise


def hadoop_fs(spark: SparkSession, path: str) -> tuple[Any, Any]:
    """The Hadoop ``FileSystem`` that holds ``path`` (local, ``s3a://``, …) and the path."""
    # Hadoop's FileSystem has no Python API: reach it through the session's JVM gateway
    jvm: Any = spark.sparkContext._jvm
    jsc: Any = spark.sparkContext._jsc
    jpath = jvm.org.apache.hadoop.fs.Path(path)
    return jpath.getFileSystem(jsc.hadoopConfiguration()), jpath


def is_delta(spark: SparkSession, path: str) -> bool:
    """True when ``path`` holds a Delta table (its ``_delta_log`` exists)."""
    fs, jpath = hadoop_fs(spark, join_path(path, "_delta_log"))
    return bool(fs.exists(jpath))


def read_delta(spark: SparkSession, path: str, schema: StructType) -> DataFrame:
    """The Delta table at ``path`` projected onto ``schema``; empty if there is no table.

    A column of ``schema`` that the table does not have yet (written by an earlier version)
    reads as null, so a table gains a column without a rebuild.
    """
    if not is_delta(spark, path):
        return empty(spark, schema)
    frame = spark.read.format("delta").load(path)
    have = set(frame.columns)
    return frame.select(
        [
            (F.col(f.name) if f.name in have else F.lit(None)).cast(f.dataType).alias(f.name)
            for f in schema.fields
        ]
    )


def read_table(spark: SparkSession, out: str, name: str) -> DataFrame:
    """A table written by a job, or an empty frame with its schema when it does not exist."""
    return read_delta(spark, table_path(out, name), TABLES[name].schema)


def held_in_driver(spark: SparkSession, frame: DataFrame) -> DataFrame:
    """``frame`` collected and made a frame again: a job that rewrites a table from rows it
    read from that table. (A Delta read is a snapshot, so overwriting the table is safe
    anyway; this keeps the plan from reading the table once more at write time.) Only for
    small tables: event tables (outages, flags), not samples."""
    return spark.createDataFrame(frame.collect(), frame.schema)


def _writer(df: DataFrame, name: str, mode: str) -> DataFrameWriter:
    table = TABLES[name]
    # mergeSchema: a table written by an earlier version gains the columns added since
    writer = conform(df, table.schema).write.format("delta").mode(mode)
    writer = writer.option("mergeSchema", "true")
    if table.partition_by:
        writer = writer.partitionBy(*table.partition_by)
    return writer


def write_table(df: DataFrame, out: str, name: str, *, replace_whole: bool = False) -> None:
    """One Delta commit replacing the partitions ``df`` has rows in (dynamic partition
    overwrite); the whole table if it is unpartitioned.

    ``replace_whole`` replaces every partition (a full rebuild), as for the event tables.
    """
    whole = TABLES[name].replace_whole or replace_whole or not TABLES[name].partition_by
    writer = _writer(df, name, "overwrite")
    if not whole:
        writer = writer.option("partitionOverwriteMode", "dynamic")
    writer.save(table_path(out, name))


def append_table(df: DataFrame, out: str, name: str) -> None:
    """Add rows as one Delta commit; nothing already written is touched."""
    _writer(df, name, "append").save(table_path(out, name))


def sql_name(path: str) -> str:
    """The Spark SQL name of the Delta table at ``path`` (``delta.`path```)."""
    if "`" in path:
        raise ValueError(f"a table path may not contain a backquote: {path!r}")
    return f"delta.`{path}`"


@contextmanager
def idempotent(spark: SparkSession, app_id: str, version: int) -> Iterator[None]:
    """Delta writes (also ``MERGE``) inside are committed once per ``(app_id, version)``.

    Delta records the pair in the commit; a write with a pair the table has already seen
    is skipped. A job that dies and is redone with the same pair writes each table once.
    """
    keys = ("spark.databricks.delta.write.txnAppId", "spark.databricks.delta.write.txnVersion")
    spark.conf.set(keys[0], app_id)
    spark.conf.set(keys[1], str(version))
    try:
        yield
    finally:
        for key in keys:
            spark.conf.unset(key)
