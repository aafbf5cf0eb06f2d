"""Build the SparkSession every job runs in.

How this works: under ``spark-submit`` the JVM already exists (PySpark finds it through
``PYSPARK_GATEWAY_PORT``) and the cluster manager decides the master, so we only add
settings. Run as ``python -m cloud_spark`` the master defaults to ``local[*]``. Every session
uses UTC (``spark.sql.session.timeZone``) and dynamic partition overwrite, which is what makes
re-running a job idempotent: only the partitions a run produces are replaced.
:func:`check_spark_version` runs first: the jobs use SQL functions that exist only from
Spark 4.0 on (``try_parse_json``, ``try_validate_utf8``, ``date_from_unix_date``…), and an
older cluster would otherwise fail deep inside a plan with an unresolved-function error.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import pyspark
from pyspark.sql import SparkSession

#: the oldest Spark the jobs run on (docs/cloud.md, "Spark version"); below 5: pyproject pin
MIN_SPARK = (4, 0)
MAX_SPARK_MAJOR = 4

DEFAULT_CONF: dict[str, str] = {
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.sources.partitionOverwriteMode": "dynamic",
    "spark.ui.showConsoleProgress": "false",
    # partitioned writes without sorting by partition first (few event dates per run)
    "spark.sql.maxConcurrentOutputFileWriters": "16",
}


def under_spark_submit() -> bool:
    """True when this Python process was started by spark-submit (the JVM exists already)."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


class SparkVersionError(RuntimeError):
    """The Spark running the job is outside the supported range."""


def check_spark_version(version: str) -> None:
    """Raise :class:`SparkVersionError` naming the version found and the one needed."""
    parts = version.split(".")
    try:
        found = (int(parts[0]), int(parts[1]))
    except (IndexError, ValueError):
        raise SparkVersionError(f"cannot read the Spark version {version!r}") from None
    if found < MIN_SPARK or found[0] > MAX_SPARK_MAJOR:
        need = f">= {MIN_SPARK[0]}.{MIN_SPARK[1]}, < {MAX_SPARK_MAJOR + 1}"
        raise SparkVersionError(
            f"outpost cloud jobs need Spark {need}; this is Spark {version} "
            "(see docs/cloud.md, Spark version)"
        )


def get_spark(
    app_name: str, master: str | None = None, conf: Mapping[str, str] | None = None
) -> SparkSession:
    """Get or create the session; ``master`` defaults to ``local[*]`` outside spark-submit.

    The PySpark library and the JVM it talks to are both checked: under spark-submit the
    cluster's Spark may differ from the pip-installed one.
    """
    check_spark_version(pyspark.__version__)
    builder = SparkSession.builder.appName(app_name)
    settings = {**DEFAULT_CONF, **(conf or {})}
    if master is not None:
        builder = builder.master(master)
    elif not under_spark_submit() and "spark.master" not in settings:
        builder = builder.master("local[*]")
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    for key in ("spark.sql.session.timeZone", "spark.sql.sources.partitionOverwriteMode"):
        spark.conf.set(key, settings[key])
    check_spark_version(spark.version)
    return spark
