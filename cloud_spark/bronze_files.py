"""Which bronze files exist, and what can be wrong with one.

How this works: bronze is append-only and every file is committed by rename, so a file name
is an identity. :func:`list_bronze` lists the committed ``*.json.gz`` files under
``<root>/bronze`` through Hadoop's FileSystem API (so ``s3a://``, ``abfss://`` and ``gs://``
roots list like local ones), as paths relative to the bronze directory. Which of them
``silver`` has processed is its manifest's business (:mod:`cloud_spark.jobs.manifest`).

**Only recent dates are listed.** Landers write into the partition of their own clock's
current hour, so a file never appears in an old ingest date: an incremental run lists only
the bronze date directories from ``watermark - relist_days`` on (:func:`listing_cutoff`; the
watermark is the latest ingest date processed). (A file that does land in an older date,
say synced late from a lander's local disk, is taken by the next ``--full`` run.) Files
outside any ``ingest_date=`` directory are always listed (:data:`NO_DATE`).

Bad files get a ``reason`` and are never retried: ``empty_file`` (zero bytes, not read),
``truncated_gzip`` (the gzip stream ends early: the complete lines before the break are
read, :func:`check_gzip`), ``vanished`` (listed, then gone before the run finished; Spark
skips it with ``spark.sql.files.ignoreMissingFiles``).
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, timedelta
from urllib.parse import urlparse

from pyspark.sql import SparkSession

from cloud_spark import contract as c
from cloud_spark.tables import hadoop_fs, join_path

REASON_EMPTY = "empty_file"
REASON_TRUNCATED = "truncated_gzip"
REASON_VANISHED = "vanished"

DATE_PREFIX = f"{c.BRONZE_PARTITIONS[0]}="
#: the manifest partition of files outside any ``ingest_date=`` directory
NO_DATE = "none"


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


def listing_cutoff(dates: list[str], relist_days: int) -> str | None:
    """The first ingest date an incremental run lists: ``relist_days`` before the latest
    of the processed ingest ``dates`` (None: list everything)."""
    real = [day for day in dates if day != NO_DATE]
    if not real:
        return None
    return (date.fromisoformat(max(real)) - timedelta(days=relist_days)).isoformat()


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
