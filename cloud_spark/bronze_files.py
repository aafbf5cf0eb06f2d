"""Which bronze files exist, which ``silver`` has processed, and what was wrong with them.

How this works: bronze is append-only and every file is committed by rename, so a file name
is an identity. :func:`list_bronze` lists the committed ``*.json.gz`` files under
``<root>/bronze`` through Hadoop's FileSystem API (so ``s3a://``, ``abfss://`` and ``gs://``
roots list like local ones), as paths relative to the bronze directory. ``silver`` keeps a
*manifest* of the files it has processed under ``<out>/_manifest/silver_files_by_date``
(Parquet partitioned by the file's ``ingest_date``, one append per run). A run processes
``listed - manifest`` and appends to the manifest only after every silver table is written,
so a run that dies half-way is simply redone.

**Only recent dates are looked at.** Landers write into the partition of their own clock's
current hour, so a file never appears in an old ingest date. The latest ingest date in the
manifest is the *watermark*; an incremental run lists only the bronze date directories from
``watermark - relist_days`` on (:func:`listing_cutoff`) and reads only those partitions of
the manifest, so its fixed cost follows the new data, not the history. (A file that does
land in an older date, say synced late from a lander's local disk, is taken by the next
``--full`` run.) Files outside any ``ingest_date=`` directory are always listed; their
manifest partition is ``ingest_date=none``. A manifest of the earlier, unpartitioned layout
(``_manifest/silver_files``) is rewritten into this one by the first run that finds it. A run
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
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, timedelta
from typing import Any
from urllib.parse import urlparse

from pyspark.sql import SparkSession
from pyspark.sql import functions as F  # noqa: N812
from pyspark.sql.types import ArrayType, DateType, LongType, StringType, StructField, StructType

from cloud_spark import contract as c
from cloud_spark.tables import hadoop_fs, join_path, read_parquet

FILES_DIR = "_manifest/silver_files_by_date"
LEGACY_FILES_DIR = "_manifest/silver_files"  # the unpartitioned manifest of earlier versions
RUNS_DIR = "_manifest/silver_runs"
PENDING_DIR = "_manifest/silver_pending"

REASON_EMPTY = "empty_file"
REASON_TRUNCATED = "truncated_gzip"
REASON_VANISHED = "vanished"

DATE_PREFIX = f"{c.BRONZE_PARTITIONS[0]}="
#: the manifest partition of files outside any ``ingest_date=`` directory
NO_DATE = "none"

FILES_SCHEMA = StructType(
    [
        StructField("file", StringType(), False),
        StructField("bytes", LongType(), False),
        StructField("reason", StringType(), True),
        StructField("run_id", StringType(), False),
        StructField("committed_ms", LongType(), False),
    ]
)
MANIFEST_SCHEMA = StructType([*FILES_SCHEMA.fields, StructField("ingest_date", StringType())])
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


def ingest_date_of(rel: str) -> str:
    """The ingest date of a bronze file from its relative path (:data:`NO_DATE` if none)."""
    first, sep, _ = rel.partition("/")
    return first[len(DATE_PREFIX) :] if sep and first.startswith(DATE_PREFIX) else NO_DATE


def list_bronze(
    spark: SparkSession,
    root: str,
    since: str | None = None,
    on_list: Callable[[str], None] | None = None,
) -> list[BronzeFile]:
    """Every committed bronze file (hidden ``.``/``_`` names skipped), sorted by path; with
    ``since``, only those in ingest dates from ``since`` on (and outside any date).

    Walks the tree with ``listStatus``, one call per directory (``on_list`` is told each
    directory listed, relative to bronze). (``listFiles`` builds a ``LocatedFileStatus`` for
    each file, whose permissions a local filesystem without Hadoop's native library reads by
    running ``ls`` on the file: 5 ms a file, and bronze grows by thousands of files a month.)
    """
    fs, base = hadoop_fs(spark, bronze_dir(root))
    if not fs.exists(base):
        return []
    found = []
    pending = [("", base)]
    while pending:
        prefix, directory = pending.pop()
        if on_list is not None:
            on_list(prefix)
        for status in fs.listStatus(directory):
            path = status.getPath()
            name = path.getName()
            if name.startswith((".", "_")):
                continue
            if status.isDirectory():
                dated = prefix == "" and name.startswith(DATE_PREFIX)
                if not (dated and since is not None and name[len(DATE_PREFIX) :] < since):
                    pending.append((f"{prefix}{name}/", path))
            elif name.endswith(c.BRONZE_SUFFIX):
                found.append(BronzeFile(prefix + name, int(status.getLen())))
    return sorted(found, key=lambda f: f.rel)


def manifest_dates(spark: SparkSession, out: str) -> list[str]:
    """The ingest dates the manifest holds files of (an empty list: no manifest yet)."""
    _migrate_legacy_manifest(spark, out)
    fs, path = hadoop_fs(spark, join_path(out, FILES_DIR))
    if not fs.exists(path):
        return []
    names = [status.getPath().getName() for status in fs.listStatus(path) if status.isDirectory()]
    return sorted(name[len(DATE_PREFIX) :] for name in names if name.startswith(DATE_PREFIX))


def listing_cutoff(dates: list[str], relist_days: int) -> str | None:
    """The first ingest date an incremental run lists: ``relist_days`` before the latest
    date of the manifest (None: list everything)."""
    real = [day for day in dates if day != NO_DATE]
    if not real:
        return None
    return (date.fromisoformat(max(real)) - timedelta(days=relist_days)).isoformat()


def _migrate_legacy_manifest(spark: SparkSession, out: str) -> None:
    fs, legacy = hadoop_fs(spark, join_path(out, LEGACY_FILES_DIR))
    if not fs.exists(legacy):
        return
    _, current = hadoop_fs(spark, join_path(out, FILES_DIR))
    if not fs.exists(current):
        rows = read_parquet(spark, join_path(out, LEGACY_FILES_DIR), FILES_SCHEMA).collect()
        _write_manifest(spark, out, [(*row, ingest_date_of(row["file"])) for row in rows])
    fs.delete(legacy, True)


def _write_manifest(spark: SparkSession, out: str, rows: list[tuple[Any, ...]]) -> None:
    frame = spark.createDataFrame(rows, MANIFEST_SCHEMA).repartition(1, "ingest_date")
    frame.write.mode("append").partitionBy("ingest_date").parquet(join_path(out, FILES_DIR))


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


def processed(spark: SparkSession, out: str, since: str | None = None) -> set[str]:
    """Relative paths of the bronze files already committed to silver (with ``since``: of
    the ingest dates from ``since`` on and outside any date only)."""
    base = join_path(out, FILES_DIR)
    if since is None:
        frame = read_parquet(spark, base, FILES_SCHEMA)
    else:
        dates = [day for day in manifest_dates(spark, out) if day >= since or day == NO_DATE]
        if not dates:
            return set()
        paths = [join_path(base, f"{DATE_PREFIX}{day}") for day in dates]
        frame = spark.read.schema(FILES_SCHEMA).option("basePath", base).parquet(*paths)
    return {row["file"] for row in frame.select("file").collect()}


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
    if full:  # the manifest is replaced (a run dying here is redone in full)
        fs, manifest = hadoop_fs(spark, join_path(out, FILES_DIR))
        fs.delete(manifest, True)
    rows = [(f.rel, f.size, reasons.get(f.rel), run_id, now, ingest_date_of(f.rel)) for f in files]
    _write_manifest(spark, out, rows)
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
