"""Which bronze files exist, which ``silver`` has processed, and what was wrong with them.

How this works: bronze is append-only and every file is committed by rename, so a file name
is an identity. :func:`list_bronze` lists the committed ``*.json.gz`` files under
``<root>/bronze`` through Hadoop's FileSystem API (so ``s3a://``, ``abfss://`` and ``gs://``
roots list like local ones), as paths relative to the bronze directory. ``silver`` keeps a
*manifest* of the files it has processed under ``<out>/_manifest/silver_files`` (Parquet,
one append per run). A run processes ``listed - manifest`` and appends to the manifest only
after every silver table is written, so a run that dies half-way is simply redone. A run
marks itself pending (``<out>/_manifest/silver_pending``) before it changes silver; the next
run that finds the mark merges every partition it touches instead of appending, which makes
rewriting the same rows idempotent (:mod:`cloud_spark.jobs.silver_merge`). ``--full``
replaces the manifest with everything listed.

Bad files are recorded with a ``reason`` and never retried: ``empty_file`` (zero bytes, not
read), ``truncated_gzip`` (the gzip stream ends early: the complete lines before the break
are read, :func:`check_gzip`), ``vanished`` (listed, then gone before the run finished; Spark
skips it with ``spark.sql.files.ignoreMissingFiles``). The manifest also holds each run's
touched event dates (``<out>/_manifest/silver_runs``): a downstream job records which runs it
has taken in (``<out>/_manifest/<job>_consumed``, :func:`touched_since`) and recomputes only
the days that newer runs touched.
"""

from __future__ import annotations

import time
import uuid
import zlib
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

from pyspark.sql import SparkSession
from pyspark.sql import functions as F  # noqa: N812
from pyspark.sql.types import ArrayType, DateType, LongType, StringType, StructField, StructType

from cloud_spark import contract as c
from cloud_spark.tables import hadoop_fs, join_path, read_parquet

FILES_DIR = "_manifest/silver_files"
RUNS_DIR = "_manifest/silver_runs"
PENDING_DIR = "_manifest/silver_pending"

REASON_EMPTY = "empty_file"
REASON_TRUNCATED = "truncated_gzip"
REASON_VANISHED = "vanished"

FILES_SCHEMA = StructType(
    [
        StructField("file", StringType(), False),
        StructField("bytes", LongType(), False),
        StructField("reason", StringType(), True),
        StructField("run_id", StringType(), False),
        StructField("committed_ms", LongType(), False),
    ]
)
RUNS_SCHEMA = StructType(
    [
        StructField("run_id", StringType(), False),
        StructField("full", StringType(), False),
        StructField("files", LongType(), False),
        StructField("event_dates", ArrayType(DateType()), False),
        StructField("committed_ms", LongType(), False),
    ]
)


@dataclass(frozen=True)
class BronzeFile:
    """A committed bronze file: path relative to ``<root>/bronze`` and its size."""

    rel: str
    size: int


def bronze_dir(root: str) -> str:
    return join_path(root, c.BRONZE_DIR)


def list_bronze(spark: SparkSession, root: str) -> list[BronzeFile]:
    """Every committed bronze file (hidden ``.``/``_`` names skipped), sorted by path.

    Walks the tree with ``listStatus``, one call per directory. (``listFiles`` builds a
    ``LocatedFileStatus`` for each file, whose permissions a local filesystem without
    Hadoop's native library reads by running ``ls`` on the file: 5 ms a file, and bronze
    grows by thousands of files a month.)
    """
    fs, base = hadoop_fs(spark, bronze_dir(root))
    if not fs.exists(base):
        return []
    found = []
    pending = [("", base)]
    while pending:
        prefix, directory = pending.pop()
        for status in fs.listStatus(directory):
            path = status.getPath()
            name = path.getName()
            if name.startswith((".", "_")):
                continue
            if status.isDirectory():
                pending.append((f"{prefix}{name}/", path))
            elif name.endswith(c.BRONZE_SUFFIX):
                found.append(BronzeFile(prefix + name, int(status.getLen())))
    return sorted(found, key=lambda f: f.rel)


def exists(spark: SparkSession, root: str, rel: str) -> bool:
    fs, path = hadoop_fs(spark, join_path(bronze_dir(root), rel))
    return bool(fs.exists(path))


def local_path(root: str, rel: str) -> str | None:
    """The local filesystem path of a bronze file, or None for a remote (object-store) root."""
    parsed = urlparse(root)
    if parsed.scheme not in ("", "file"):
        return None
    return join_path(parsed.path if parsed.scheme else root, c.BRONZE_DIR, rel)


def check_gzip(path: str, chunk: int = 1 << 20) -> bool:
    """True when the file is one or more complete gzip members (a truncated stream: False)."""
    decoder = zlib.decompressobj(wbits=31)
    try:
        with open(path, "rb") as handle:
            while data := handle.read(chunk):
                while data:
                    decoder.decompress(data, 0)
                    data = decoder.unused_data
                    if data:  # a following gzip member (concatenated files are valid)
                        decoder = zlib.decompressobj(wbits=31)
    except (OSError, zlib.error):
        return False
    return decoder.eof


def processed(spark: SparkSession, out: str) -> set[str]:
    """Relative paths of the bronze files already committed to silver."""
    frame = read_parquet(spark, join_path(out, FILES_DIR), FILES_SCHEMA)
    return {row["file"] for row in frame.select("file").distinct().collect()}


def _pending_path(out: str) -> str:
    return join_path(out, PENDING_DIR)


def mark_pending(spark: SparkSession, out: str, run_id: str) -> None:
    """Note that a run starts changing silver; :func:`commit` removes the note."""
    spark.createDataFrame([(run_id,)], "run_id string").coalesce(1).write.mode("overwrite").parquet(
        _pending_path(out)
    )


def interrupted(spark: SparkSession, out: str) -> bool:
    """True when a run changed silver and died before committing (its rows may be there)."""
    fs, path = hadoop_fs(spark, _pending_path(out))
    return bool(fs.exists(path))


def new_run_id() -> str:
    return f"{int(time.time() * 1000)}-{uuid.uuid4().hex[:8]}"


def commit(
    spark: SparkSession,
    out: str,
    run_id: str,
    files: list[BronzeFile],
    reasons: dict[str, str],
    event_dates: list[Any],
    *,
    full: bool,
) -> None:
    """Record a finished run: its files (with reasons) and the event dates it touched."""
    now = int(time.time() * 1000)
    mode = "overwrite" if full else "append"
    rows = [(f.rel, f.size, reasons.get(f.rel), run_id, now) for f in files]
    spark.createDataFrame(rows, FILES_SCHEMA).coalesce(1).write.mode(mode).parquet(
        join_path(out, FILES_DIR)
    )
    run = [(run_id, str(full).lower(), len(files), sorted(event_dates), now)]
    spark.createDataFrame(run, RUNS_SCHEMA).coalesce(1).write.mode(mode).parquet(
        join_path(out, RUNS_DIR)
    )
    fs, pending = hadoop_fs(spark, _pending_path(out))
    fs.delete(pending, True)


def runs(spark: SparkSession, out: str) -> list[dict[str, Any]]:
    """Every committed silver run, oldest first."""
    frame = read_parquet(spark, join_path(out, RUNS_DIR), RUNS_SCHEMA)
    return [row.asDict() for row in frame.orderBy("committed_ms", "run_id").collect()]


def skipped_counts(spark: SparkSession, out: str) -> dict[str, int]:
    """Bronze files skipped or cut short, by reason (for the report)."""
    frame = read_parquet(spark, join_path(out, FILES_DIR), FILES_SCHEMA)
    rows = frame.where(F.col("reason").isNotNull()).groupBy("reason").count().collect()
    return {row["reason"]: row["count"] for row in rows}


CONSUMED_SCHEMA = StructType(
    [
        StructField("run_id", StringType(), False),
        StructField("params", StringType(), False),
    ]
)


def _consumed_path(out: str, job: str) -> str:
    return join_path(out, f"_manifest/{job}_consumed")


def touched_since(spark: SparkSession, out: str, job: str, params: str) -> list[Any] | None:
    """Event dates touched by the silver runs ``job`` has not consumed yet.

    None means "recompute everything": the job never ran with these ``params``, or a full
    silver run happened since.
    """
    consumed = read_parquet(spark, _consumed_path(out, job), CONSUMED_SCHEMA).collect()
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
    """Record that ``job`` has taken in every silver run so far (with ``params``)."""
    rows = [(run["run_id"], params) for run in runs(spark, out)]
    frame = spark.createDataFrame(rows, CONSUMED_SCHEMA).coalesce(1)
    frame.write.mode("overwrite" if full else "append").parquet(_consumed_path(out, job))
