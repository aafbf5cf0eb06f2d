"""``maintain``: compact the Delta tables (``OPTIMIZE``) and delete unreferenced files (``VACUUM``).

How this works: every silver run and every gold job adds a few small files per partition
it touches, and each Delta commit that replaces or merges rows leaves the replaced files on
disk (a reader of an older version may still need them). For every table under ``--out``
that exists (:data:`cloud_spark.tables.TABLES` and the bookkeeping tables of
:mod:`cloud_spark.jobs.manifest`), ``OPTIMIZE`` rewrites the small files of each partition
into fewer large ones (one commit; readers and writers carry on, a concurrent writer that
touched the same files retries or fails cleanly), then ``VACUUM`` deletes the files no
version younger than ``vacuum_hours`` references. The default keeps Delta's own 7 days:
a query or a job running longer than the retention could otherwise lose files under its
feet, which is why Delta refuses a shorter one unless told (we tell it only when the user
asks for less). Schedule it daily or weekly, never more often than the longest job runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pyspark.sql import SparkSession

from cloud_spark import tables
from cloud_spark.jobs import manifest as mf

#: Delta's default retention (``delta.deletedFileRetentionDuration``: 7 days)
DEFAULT_VACUUM_HOURS = 168.0

_RETENTION_CHECK = "spark.databricks.delta.retentionDurationCheck.enabled"


@dataclass(frozen=True)
class MaintainParams:
    """Parameters of ``python -m cloud_spark maintain``."""

    #: keep files that a version younger than this references (``--vacuum-hours``)
    vacuum_hours: float = DEFAULT_VACUUM_HOURS
    #: skip ``VACUUM`` (``--no-vacuum``): compaction only
    vacuum: bool = True
    #: only these tables (``--table``, repeatable; names of :func:`table_paths`); all if empty
    only: tuple[str, ...] = ()


def table_paths(out: str) -> dict[str, str]:
    """Every table a job may have written under ``out``, by name."""
    paths = {name: tables.table_path(out, name) for name in tables.TABLES}
    for rel in (mf.FILES_DIR, mf.RUNS_DIR):
        paths[rel] = tables.join_path(out, rel)
    return paths


def _files(spark: SparkSession, name: str) -> int:
    return int(spark.sql(f"DESCRIBE DETAIL {name}").first()["numFiles"])  # type: ignore[index]


def run(spark: SparkSession, root: str, out: str, params: MaintainParams) -> dict[str, Any]:
    """``OPTIMIZE`` then ``VACUUM`` each existing table; the files before and after."""
    del root
    if params.vacuum_hours < 0:
        raise ValueError(f"--vacuum-hours must be 0 or more, got {params.vacuum_hours}")
    paths = table_paths(out)
    unknown = sorted(set(params.only) - set(paths))
    if unknown:
        raise ValueError(f"--table: no such table {', '.join(unknown)} (known: {', '.join(paths)})")
    found: dict[str, Any] = {}
    short = params.vacuum_hours < DEFAULT_VACUUM_HOURS
    if short:
        spark.conf.set(_RETENTION_CHECK, "false")
    try:
        for name, path in paths.items():
            if (params.only and name not in params.only) or not tables.is_delta(spark, path):
                continue
            sql = tables.sql_name(path)
            before = _files(spark, sql)
            spark.sql(f"OPTIMIZE {sql}")
            if params.vacuum:
                spark.sql(f"VACUUM {sql} RETAIN {params.vacuum_hours} HOURS").collect()
            found[name] = {"files_before": before, "files_after": _files(spark, sql)}
    finally:
        if short:
            spark.conf.unset(_RETENTION_CHECK)
    return {"tables": found, "vacuum_hours": params.vacuum_hours if params.vacuum else None}
