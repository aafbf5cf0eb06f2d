"""Which bronze files ``silver`` has processed, its runs, and what downstream jobs consumed.

How this works: three kinds of Delta tables under ``<out>/_manifest``, each change one
atomic commit.

* ``processed_files`` (partitioned by the file's ``ingest_date``): one row per bronze file
  a run has *claimed*, with the run's id and, once the run is done, the reason a file was
  skipped or cut short (``empty_file``, ``truncated_gzip``, ``vanished``).
* ``silver_runs``: a ``pending`` row per run when it claims its files, a ``done`` row with
  the event dates it touched once every silver table is written (appends only: an append
  never conflicts with another writer).
* ``<job>_consumed``: the runs a downstream job (rollups, availability, …) has taken in
  (:func:`touched_since`, :func:`mark_consumed`).

A run *claims* its files before it changes silver (:func:`claim`): a row in
``silver_runs``, then a Delta ``MERGE`` that inserts the files no run has yet. Two runs that
claim the same files at once conflict in that ``MERGE`` (Delta's optimistic concurrency:
both read the same partitions of ``processed_files`` and both add to them); the loser fails
before it has written anything (:class:`ConcurrentRunError`). A run that finds a ``pending``
run (one that died, or one still going) finishes that run's files first with that run's id
(:func:`pending_runs`, :func:`claimed_files`): every silver write is made idempotent on
``(run id, table)`` (:func:`cloud_spark.tables.idempotent`), so the tables the dead run had
written already are skipped and nothing is counted twice.

**Only recent dates are looked at.** Landers write into the partition of their own clock's
current hour, so a file never appears in an old ingest date. The latest ingest date in
``processed_files`` is the watermark; an incremental run lists the bronze date directories
from ``watermark - relist_days`` on and reads only those partitions of the table
(:func:`processed`), so its fixed cost follows the new data, not the history. ``--full``
replaces ``processed_files`` with everything listed.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F  # noqa: N812
from pyspark.sql.types import ArrayType, DateType, LongType, StringType, StructField, StructType

from cloud_spark import bronze_files as bf
from cloud_spark.tables import is_delta, join_path, read_delta, sql_name

FILES_DIR = "_manifest/processed_files"
RUNS_DIR = "_manifest/silver_runs"

PENDING = "pending"
DONE = "done"

FILES_SCHEMA = StructType(
    [
        StructField("file", StringType(), False),
        StructField("bytes", LongType(), False),
        StructField("reason", StringType(), True),
        StructField("run_id", StringType(), False),
        StructField("committed_ms", LongType(), False),
        StructField("ingest_date", StringType(), False),
    ]
)
RUNS_SCHEMA = StructType(
    [
        StructField("run_id", StringType(), False),
        StructField("full", StringType(), False),
        StructField("files", LongType(), False),
        StructField("event_dates", ArrayType(DateType()), False),
        StructField("committed_ms", LongType(), False),
        StructField("state", StringType(), False),
    ]
)
CONSUMED_SCHEMA = StructType(
    [
        StructField("run_id", StringType(), False),
        StructField("params", StringType(), False),
    ]
)

#: the names of Delta's exceptions that mean another transaction committed first
CONFLICTS = (
    "ConcurrentAppendException",
    "ConcurrentDeleteReadException",
    "ConcurrentDeleteDeleteException",
    "ConcurrentTransactionException",
    "MetadataChangedException",
    "ProtocolChangedException",
    "DELTA_CONCURRENT",
)


class ConcurrentRunError(RuntimeError):
    """Another ``silver`` run committed first to a table this run was writing."""


def is_conflict(exc: BaseException) -> bool:
    """True for Delta's "another transaction committed first" errors."""
    text = str(exc)
    return isinstance(exc, PySparkException | RuntimeError) and any(n in text for n in CONFLICTS)


def new_run_id() -> str:
    return f"{int(time.time() * 1000)}-{uuid.uuid4().hex[:8]}"


def _path(out: str, rel: str) -> str:
    return join_path(out, rel)


def _files(spark: SparkSession, out: str) -> DataFrame:
    return read_delta(spark, _path(out, FILES_DIR), FILES_SCHEMA)


def _runs(spark: SparkSession, out: str) -> DataFrame:
    return read_delta(spark, _path(out, RUNS_DIR), RUNS_SCHEMA)


def manifest_dates(spark: SparkSession, out: str) -> list[str]:
    """The ingest dates of processed files (an empty list: no run has claimed any yet)."""
    frame = _files(spark, out).select("ingest_date").distinct()
    return sorted(row[0] for row in frame.collect())


def processed(spark: SparkSession, out: str, since: str | None = None) -> set[str]:
    """Relative paths of the bronze files claimed by a run (with ``since``: those of the
    ingest dates from ``since`` on and outside any date only; pruned by partition)."""
    frame = _files(spark, out)
    if since is not None:
        frame = frame.where((F.col("ingest_date") >= since) | (F.col("ingest_date") == bf.NO_DATE))
    return {row["file"] for row in frame.select("file").collect()}


def pending_runs(spark: SparkSession, out: str) -> list[dict[str, Any]]:
    """Runs that claimed files and have not finished, oldest first."""
    frame = _runs(spark, out)
    done = frame.where(F.col("state") == DONE).select("run_id")
    pending = frame.where(F.col("state") == PENDING).join(done, "run_id", "left_anti")
    return [row.asDict() for row in pending.orderBy("committed_ms", "run_id").collect()]


def claimed_files(spark: SparkSession, out: str, run_id: str) -> list[bf.BronzeFile]:
    """The files ``run_id`` claimed, sorted by path."""
    rows = _files(spark, out).where(F.col("run_id") == run_id).select("file", "bytes").collect()
    return sorted((bf.BronzeFile(row["file"], row["bytes"]) for row in rows), key=lambda f: f.rel)


def _merge(spark: SparkSession, target: str, source: DataFrame, view: str, sql: str) -> int:
    """Run a ``MERGE`` of ``source`` into the table at ``target``; the rows it inserted."""
    source.createOrReplaceTempView(view)
    try:
        metrics = spark.sql(sql.format(target=sql_name(target), source=view)).first()
    finally:
        spark.catalog.dropTempView(view)
    return int(metrics["num_inserted_rows"]) if metrics is not None else 0


def claim(
    spark: SparkSession, out: str, run_id: str, files: list[bf.BronzeFile], *, full: bool
) -> list[bf.BronzeFile]:
    """Record ``run_id`` as pending and take the ``files`` no other run has; returns those.

    A full run replaces ``processed_files`` with ``files``. Raises
    :class:`ConcurrentRunError` when another run claimed files at the same moment.
    """
    now = int(time.time() * 1000)
    _add_run(spark, out, (run_id, str(full).lower(), len(files), [], now, PENDING))
    rows = [(f.rel, f.size, None, run_id, now, bf.ingest_date_of(f.rel)) for f in files]
    frame = spark.createDataFrame(rows, FILES_SCHEMA).repartition(1, "ingest_date")
    files_path = _path(out, FILES_DIR)
    try:
        if full or not is_delta(spark, files_path):
            writer = frame.write.format("delta").partitionBy("ingest_date")
            writer.mode("overwrite" if full else "append").save(files_path)
            return files
        if not files:
            return []
        dates = ", ".join(f"'{day}'" for day in sorted({bf.ingest_date_of(f.rel) for f in files}))
        inserted = _merge(
            spark,
            files_path,
            frame,
            f"claim_{run_id.replace('-', '_')}",
            "MERGE INTO {target} t USING {source} s"
            f" ON t.ingest_date IN ({dates}) AND t.ingest_date = s.ingest_date"
            " AND t.file = s.file WHEN NOT MATCHED THEN INSERT *",
        )
    except Exception as exc:
        if is_conflict(exc):
            raise ConcurrentRunError(
                f"another silver run claimed bronze files under {out} at the same time; "
                "this run changed nothing (the other one does the work)"
            ) from exc
        raise
    # another run took some of them just before: read back which are this run's
    return files if inserted == len(files) else claimed_files(spark, out, run_id)


def _add_run(spark: SparkSession, out: str, row: tuple[Any, ...]) -> None:
    frame = spark.createDataFrame([row], RUNS_SCHEMA).coalesce(1)
    frame.write.format("delta").mode("append").save(_path(out, RUNS_DIR))


def commit(
    spark: SparkSession,
    out: str,
    run_id: str,
    reasons: dict[str, str],
    event_dates: list[Any],
) -> None:
    """Record that ``run_id`` is done: the reasons of its bad files, the dates it touched."""
    now = int(time.time() * 1000)
    if reasons:
        rows = [(rel, reason, bf.ingest_date_of(rel)) for rel, reason in reasons.items()]
        frame = spark.createDataFrame(rows, "file string, reason string, ingest_date string")
        _merge(
            spark,
            _path(out, FILES_DIR),
            frame,
            f"reasons_{run_id.replace('-', '_')}",
            "MERGE INTO {target} t USING {source} s"
            " ON t.ingest_date = s.ingest_date AND t.file = s.file"
            " WHEN MATCHED THEN UPDATE SET t.reason = s.reason",
        )
    _add_run(spark, out, (run_id, "", 0, sorted(event_dates), now, DONE))


def runs(spark: SparkSession, out: str) -> list[dict[str, Any]]:
    """Every finished silver run (``run_id``, ``full``, ``files``, ``event_dates``,
    ``committed_ms``), oldest first."""
    frame = _runs(spark, out)
    claims = frame.where(F.col("state") == PENDING).select("run_id", "full", "files")
    done = frame.where(F.col("state") == DONE).select("run_id", "event_dates", "committed_ms")
    done = done.dropDuplicates(["run_id"])  # two runs that both finished a dead one
    joined = done.join(claims, "run_id").orderBy("committed_ms", "run_id")
    return [row.asDict() for row in joined.collect()]


def skipped_counts(spark: SparkSession, out: str) -> dict[str, int]:
    """Bronze files skipped or cut short, by reason (for the report)."""
    frame = _files(spark, out)
    rows = frame.where(F.col("reason").isNotNull()).groupBy("reason").count().collect()
    return {row["reason"]: row["count"] for row in rows}


def _consumed_path(out: str, job: str) -> str:
    return join_path(out, f"_manifest/{job}_consumed")


def touched_since(spark: SparkSession, out: str, job: str, params: str) -> list[Any] | None:
    """Event dates touched by the silver runs ``job`` has not consumed yet.

    None means "recompute everything": the job never ran with these ``params``, or a full
    silver run happened since.
    """
    consumed = read_delta(spark, _consumed_path(out, job), CONSUMED_SCHEMA).collect()
    if not consumed or any(row["params"] != params for row in consumed):
        return None
    seen = {row["run_id"] for row in consumed}
    dates: set[Any] = set()
    for run in runs(spark, out):
        if run["run_id"] in seen:
            continue
        if run["full"] == "true":
            return None
        dates |= set(run["event_dates"])
    return sorted(dates)


def mark_consumed(spark: SparkSession, out: str, job: str, params: str, *, full: bool) -> None:
    """Record that ``job`` has taken in every finished silver run so far (with ``params``)."""
    rows = [(run["run_id"], params) for run in runs(spark, out)]
    frame = spark.createDataFrame(rows, CONSUMED_SCHEMA).coalesce(1)
    frame.write.format("delta").mode("overwrite" if full else "append").save(
        _consumed_path(out, job)
    )
