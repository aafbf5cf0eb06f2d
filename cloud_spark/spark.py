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

Every table is a Delta Lake table. The JVM side of Delta is not in the PyPI PySpark: the
session asks Spark to fetch :data:`SPARK_PACKAGES` (Maven coordinates, with their
dependencies) from Maven Central through ``spark.jars.packages`` into an Ivy cache
(:func:`ivy_dir`); with a warm cache no network is needed. A session that cannot fetch them
fails with :class:`SparkPackagesError`, naming the packages and the cache. Under
spark-submit the JVM exists already: the packages must then be given to spark-submit
(``--packages``, :func:`packages_arg`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pyspark
from pyspark import SparkContext
from pyspark.sql import SparkSession

#: the oldest Spark the jobs run on (docs/cloud.md, "Spark version"); below 5: pyproject pin
MIN_SPARK = (4, 0)
MAX_SPARK_MAJOR = 4

#: Delta Lake for Spark 4.2 (``delta-spark_2.13`` 4.4.0 is built against Spark 4.2.0; the
#: pyproject pins pyspark to 4.2.0 to match)
DELTA_VERSION = "4.4.0"

#: Maven coordinates of the JVM packages every session loads (with their dependencies), the
#: one place to add one: e.g. ``"org.apache.hadoop:hadoop-aws:3.4.2"`` for ``s3a://``
SPARK_PACKAGES: tuple[str, ...] = (f"io.delta:delta-spark_2.13:{DELTA_VERSION}",)

#: Dependencies of :data:`SPARK_PACKAGES` that Spark ships itself, in newer versions (Delta's
#: kernel depends on Hadoop 3.4, Parquet 1.16, Jackson 2.13, …): left out of the resolution,
#: so that the classpath holds one copy of each (Spark's) and a session loads 60 MB less
SPARK_PACKAGE_EXCLUDES: tuple[str, ...] = tuple(
    f"{group}:{artifact}"
    for group, artifacts in (
        ("org.apache.hadoop", ("hadoop-client-api", "hadoop-client-runtime")),
        ("org.apache.parquet", ("parquet-column", "parquet-common", "parquet-encoding",
                                "parquet-format-structures", "parquet-hadoop", "parquet-jackson")),
        ("com.fasterxml.jackson.core", ("jackson-core", "jackson-databind", "jackson-annotations")),
        ("org.apache.logging.log4j", ("log4j-api", "log4j-core", "log4j-slf4j2-impl")),
        ("org.slf4j", ("slf4j-api",)),
        ("org.xerial.snappy", ("snappy-java",)),
        ("com.github.luben", ("zstd-jni",)),
        ("io.airlift", ("aircompressor",)),
        ("org.locationtech.jts", ("jts-core",)),
        ("com.google.code.findbugs", ("jsr305",)),
        ("commons-pool", ("commons-pool",)),
    )
    for artifact in artifacts
)  # fmt: skip

#: the Ivy cache of :data:`SPARK_PACKAGES` (``OUTPOST_IVY_DIR`` overrides it)
DEFAULT_IVY_DIR = Path.home() / ".cache" / "outpost" / "ivy"

#: what makes a session a Delta session (SQL ``MERGE``/``OPTIMIZE``/``VACUUM``, ``delta.`path```)
DELTA_CONF: dict[str, str] = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
}

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
    # Delta rebuilds a table's state from its log in this many tasks (default 50, sized for
    # clusters and logs of millions of files): on one machine, 50 tasks for a log of a few
    # hundred entries made a small silver run spend more time scheduling than working
    # (a run with nothing new: 34.6 s -> 2.8 s on a loaded 2-core machine)
    "spark.databricks.delta.snapshotPartitions": "2",
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


def ivy_dir() -> Path:
    """Where Spark keeps the fetched :data:`SPARK_PACKAGES` (``OUTPOST_IVY_DIR`` or the default)."""
    return Path(os.environ.get("OUTPOST_IVY_DIR") or DEFAULT_IVY_DIR)


def packages_arg() -> str:
    """:data:`SPARK_PACKAGES` as spark-submit's ``--packages`` value."""
    return ",".join(SPARK_PACKAGES)


def submit_args() -> list[str]:
    """spark-submit's arguments for :data:`SPARK_PACKAGES` (packages, excludes, Ivy cache)."""
    return [
        "--packages", packages_arg(),
        "--exclude-packages", ",".join(SPARK_PACKAGE_EXCLUDES),
        "--conf", f"spark.jars.ivy={ivy_dir()}",
    ]  # fmt: skip


def package_conf(conf: Mapping[str, str]) -> dict[str, str]:
    """``spark.jars.packages`` and ``spark.jars.ivy`` for a JVM this process launches.

    Packages the user listed in ``conf`` are kept and ours added; an Ivy directory the user
    chose stands. Empty under spark-submit (the JVM and its classpath exist already).
    """
    if under_spark_submit():
        return {}
    theirs = [p for p in conf.get("spark.jars.packages", "").split(",") if p]
    packages = theirs + [p for p in SPARK_PACKAGES if p not in theirs]
    theirs_excluded = [p for p in conf.get("spark.jars.excludes", "").split(",") if p]
    excludes = theirs_excluded + [p for p in SPARK_PACKAGE_EXCLUDES if p not in theirs_excluded]
    settings = {
        "spark.jars.packages": ",".join(packages),
        "spark.jars.excludes": ",".join(excludes),
    }
    if "spark.jars.ivy" not in conf:
        settings["spark.jars.ivy"] = str(ivy_dir())
    return settings


def packages_cached(packages: Sequence[str] = SPARK_PACKAGES) -> bool:
    """True when the jar of every Maven coordinate in `packages` (default:
    :data:`SPARK_PACKAGES`) is in the Ivy cache already (their dependencies not checked)."""
    jars = ivy_dir() / "jars"
    names = [package.split(":") for package in packages]
    return all((jars / f"{group}_{artifact}-{version}.jar").exists()
               for group, artifact, version in names)  # fmt: skip


def fetch_packages() -> None:
    """Fill the Ivy cache with :data:`SPARK_PACKAGES` (``make spark-packages``): one local
    session started and stopped, unless the cache holds them already. Tests then start
    their sessions in parallel from a warm cache instead of racing to download into it."""
    if not packages_cached():
        get_spark("outpost-fetch-packages", "local[1]", {"spark.ui.enabled": "false"}).stop()


class SparkPackagesError(RuntimeError):
    """The JVM packages (:data:`SPARK_PACKAGES`) could not be fetched or loaded."""


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
    settings = {**DEFAULT_CONF, **DELTA_CONF, **local_conf, **(conf or {})}
    launching = SparkContext._active_spark_context is None
    if launching:
        settings.update(package_conf(conf or {}))
    os.environ.update(local_env)  # the JVM inherits this process's environment
    if master is not None:
        builder = builder.master(master)
    elif not under_spark_submit() and "spark.master" not in settings:
        builder = builder.master("local[*]")
    for key, value in settings.items():
        builder = builder.config(key, value)
    try:
        spark = builder.getOrCreate()
    except Exception as exc:  # the JVM exits during launch when Ivy cannot resolve
        if not launching or "JAVA_GATEWAY_EXITED" not in str(exc):
            raise
        raise SparkPackagesError(
            f"cannot fetch {settings.get('spark.jars.packages', packages_arg())} from Maven "
            "Central (Ivy cache "
            f"{settings.get('spark.jars.ivy', 'default')}): the Spark JVM exited while "
            "resolving them; its output above names the failing download"
        ) from exc
    check_delta(spark)
    for key in ("spark.sql.session.timeZone", "spark.sql.sources.partitionOverwriteMode"):
        spark.conf.set(key, settings[key])
    check_spark_version(spark.version)
    return spark


def check_delta(spark: SparkSession) -> None:
    """Raise :class:`SparkPackagesError` when the session has no Delta Lake classes.

    Under spark-submit they come from ``--packages`` (or the cluster's own Delta); a
    missing one would otherwise fail at the first table write with a class-not-found error.
    """
    jvm: Any = spark.sparkContext._jvm  # py4j: the JVM's classes, untyped
    try:
        jvm.java.lang.Class.forName(
            "io.delta.sql.DeltaSparkSessionExtension",
            True,
            jvm.java.lang.Thread.currentThread().getContextClassLoader(),
        )
    except Exception as exc:
        raise SparkPackagesError(
            "this Spark has no Delta Lake classes (io.delta.sql.DeltaSparkSessionExtension): "
            f"submit with --packages {packages_arg()} (docs/cloud.md, On a cluster)"
        ) from exc
