"""Build the SparkSession every job runs in.

How this works: under ``spark-submit`` the JVM already exists (PySpark finds it through
``PYSPARK_GATEWAY_PORT``) and the cluster manager decides the master, so we only add
settings. Run as ``python -m cloud_spark`` the master defaults to ``local[*]``. Every session
uses UTC (``spark.sql.session.timeZone``) and dynamic partition overwrite, which is what makes
re-running a job idempotent: only the partitions a run produces are replaced.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from pyspark.sql import SparkSession

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


def get_spark(
    app_name: str, master: str | None = None, conf: Mapping[str, str] | None = None
) -> SparkSession:
    """Get or create the session; ``master`` defaults to ``local[*]`` outside spark-submit."""
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
    return spark
