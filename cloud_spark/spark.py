"""Build the SparkSession every job runs in.

How this works: under ``spark-submit`` the JVM already exists (PySpark finds it through
``PYSPARK_GATEWAY_PORT``) and the cluster manager decides the master, so we only add
settings. Run as ``python -m cloud_spark`` the master defaults to ``local[*]``. Every session
uses UTC (``spark.sql.session.timeZone``) and dynamic partition overwrite, which is what makes
re-running a job idempotent: only the partitions a run produces are replaced.
When this process launches a local JVM itself (a ``local[…]`` master, not spark-submit),
:func:`local_jvm_settings` also sizes that JVM, which is driver and executor in one, so that
its whole resident set stays near 2 GiB (:data:`LOCAL_JVM_CONF`, :data:`LOCAL_JVM_ENV`); a
setting the user made anywhere Spark reads one (``conf``, ``spark-defaults.conf``,
``SPARK_DRIVER_MEMORY``, the environment) is left as it is.
:func:`check_spark_version` runs first: the jobs use SQL functions that exist only from
Spark 4.0 on (``try_parse_json``, ``try_validate_utf8``, ``date_from_unix_date``…), and an
older cluster would otherwise fail deep inside a plan with an unresolved-function error.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import pyspark
from pyspark import SparkContext
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
    # HotSpot does not compile methods over 8,000 bytes of bytecode (HugeMethodLimit): a
    # generated stage above that runs interpreted. With the limit at 8,000 Spark falls back to
    # per-expression code, split into compilable methods (Spark's configuration docs suggest
    # this value for HotSpot): silver's parse of 2M rows 15.8 s -> 10.4 s. A JVM launched
    # here compiles huge methods and lifts the limit (LOCAL_JVM_CONF).
    "spark.sql.codegen.hugeMethodLimit": "8000",
}


#: Settings for a JVM that :func:`get_spark` launches itself in local mode, where the driver
#: is also the executor. Its resident set is the heap plus 0.4-0.5 GiB outside it (metaspace,
#: JIT code, threads, malloc): a 1200 MiB heap peaked at 1.7 GiB over silver and rollups of
#: 10M bronze rows (bench/cloud/README.md). The jobs keep their big frames on disk
#: (``silver.CACHE_LEVEL``), so the heap need not grow with the data. The parallel
#: collector's own tables are a few MiB where G1's took ~100 MiB at this heap size, and a
#: batch job has no use for G1's short pauses. ``docs/cloud.md``, "Memory", says how to
#: give more. This JVM also compiles methods over HotSpot's 8,000 bytes
#: (``-XX:-DontCompileHugeMethods``), so Spark's whole-stage code may be as large as it
#: gets (the limit back at Spark's own default): silver's parse stage, whose values and
#: reason take it over 8,000 bytes, then keeps whole-stage codegen. Warm silver on 2M rows:
#: 23.6-23.7 s against 26.3-26.4 s, 37 s of JVM CPU against 41 s.
LOCAL_JVM_CONF: dict[str, str] = {
    "spark.driver.memory": "1200m",
    "spark.driver.extraJavaOptions": "-XX:+UseParallelGC -XX:-DontCompileHugeMethods",
    "spark.sql.codegen.hugeMethodLimit": "65535",
}

#: a key of :data:`LOCAL_JVM_CONF` that is right only together with our JVM options
_NEEDS_OUR_JVM_OPTIONS = ("spark.sql.codegen.hugeMethodLimit",)

#: Environment of a locally launched JVM: glibc otherwise gives each of the JVM's many
#: threads its own malloc arena, which adds resident memory outside the heap.
LOCAL_JVM_ENV: dict[str, str] = {"MALLOC_ARENA_MAX": "2"}

#: Environment variables through which a user sets the same thing as a key
_ENV_FOR_KEY = {"spark.driver.memory": "SPARK_DRIVER_MEMORY"}


def spark_defaults_keys() -> set[str]:
    """Keys set in the ``spark-defaults.conf`` that a locally launched spark-submit reads."""
    conf_dir = os.environ.get("SPARK_CONF_DIR") or str(
        Path(os.environ.get("SPARK_HOME") or Path(pyspark.__file__).parent) / "conf"
    )
    try:
        lines = (Path(conf_dir) / "spark-defaults.conf").read_text().splitlines()
    except OSError:
        return set()
    return {line.split()[0] for line in lines if line.strip() and not line.startswith("#")}


def local_jvm_settings(
    master: str | None, conf: Mapping[str, str]
) -> tuple[dict[str, str], dict[str, str]]:
    """The :data:`LOCAL_JVM_CONF` keys and :data:`LOCAL_JVM_ENV` variables to add.

    Empty unless this process is about to launch a local-mode JVM (not under spark-submit,
    no session running yet, master ``local…``). A key the user set (``conf``,
    ``spark-defaults.conf`` or its environment variable) and a variable already in the
    environment are not returned: the user's choice stands.
    """
    effective_master = master or conf.get("spark.master") or "local[*]"
    # a running SparkContext means the JVM exists already (private attribute, no public probe)
    launching = SparkContext._active_spark_context is None
    if under_spark_submit() or not launching or not effective_master.startswith("local"):
        return {}, {}
    user_keys = set(conf) | spark_defaults_keys()
    settings = {
        key: value
        for key, value in LOCAL_JVM_CONF.items()
        if key not in user_keys and _ENV_FOR_KEY.get(key, "") not in os.environ
    }
    if "spark.driver.extraJavaOptions" not in settings:  # the user's JVM may not compile them
        for key in _NEEDS_OUR_JVM_OPTIONS:
            settings.pop(key, None)
    env = {name: value for name, value in LOCAL_JVM_ENV.items() if name not in os.environ}
    return settings, env


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
    local_conf, local_env = local_jvm_settings(master, conf or {})
    settings = {**DEFAULT_CONF, **local_conf, **(conf or {})}
    os.environ.update(local_env)  # the JVM inherits this process's environment
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
