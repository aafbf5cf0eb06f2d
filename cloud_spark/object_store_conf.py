"""S3 for the Spark jobs: the s3a connector's jars, its settings, and what its errors mean.

How this works: PyPI's PySpark ships Hadoop's client but not its S3 connector. When a job's
``--root`` or ``--out`` is on S3 (``s3://`` or ``s3a://``), :func:`s3a_session_conf` returns
the Spark settings that the session needs on top of the user's: ``spark.jars.packages``
gets ``org.apache.hadoop:hadoop-aws`` of exactly the Hadoop version inside this PySpark
(:func:`hadoop_version`, read from its ``hadoop-client-api`` jar; Ivy also fetches the AWS
SDK v2 ``bundle`` that hadoop-aws depends on), merged by :func:`cloud_spark.spark.get_spark`
with the Delta packages. The bundle alone is ~650 MiB, which is why a job on local paths
(``make demo``) never asks for it. Credentials follow S3A's default chain (``fs.s3a.access.key``
/ ``secret.key``, then ``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY`` /
``AWS_SESSION_TOKEN``, then the instance's IAM role); an S3-compatible store is named by
``--s3-endpoint`` or ``AWS_ENDPOINT_URL_S3`` and is then addressed path-style.
:data:`FAIL_FAST` bounds S3A's retries and timeouts so that a dead endpoint stops a job in
seconds, not after S3A's default minutes of retrying. A value the user set with ``--conf``
(the job's, or spark-submit's) wins. A session that existed before the job (spark-submit, a
notebook) gets the Hadoop settings put into it (:func:`apply_to_session`). Before a job
runs, :func:`check_store` asks the store once whether the paths exist, so that a bad store
fails there; :func:`describe_store_error` turns the connector's Java exceptions into one
line naming the bucket, the endpoint or the credentials. ``s3://`` is S3's own URI scheme
(EMR, Databricks, the AWS CLI); Hadoop's connector is registered for ``s3a://``, so
:func:`hadoop_uri` maps one onto the other, unless the cluster serves ``s3://`` itself.
"""

from __future__ import annotations

import importlib.util
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

#: the URI schemes that mean S3; Hadoop's connector serves ``s3a``
S3_SCHEMES = ("s3", "s3a")

#: the Hadoop S3 connector; its version must be the PySpark's own Hadoop version
HADOOP_AWS = "org.apache.hadoop:hadoop-aws"

#: Retries and timeouts of S3A for a job on S3 (``spark.hadoop.`` is added), unless set.
#: S3A's defaults retry a failed connection for minutes (SDK attempts times S3A's own
#: retries, 30 s to connect, 200 s to wait for an answer); these make an endpoint that
#: refuses connections fail in a second or two and one that never answers after two waits
#: of 15 s per request (S3A's minimum timeouts), while S3 throttling (503 SlowDown, its own
#: retry limit) keeps S3A's default patience. A task that fails this way is still retried
#: by Spark on a cluster (``spark.task.maxFailures``). :func:`check_store` makes the first
#: S3 operation of a run a cheap one.
FAIL_FAST: dict[str, str] = {
    "fs.s3a.attempts.maximum": "1",  # the SDK's own retries; S3A retries above it
    "fs.s3a.retry.limit": "1",  # S3A's retries of a failed connection or request
    "fs.s3a.retry.interval": "500ms",
    "fs.s3a.connection.establish.timeout": "15s",  # TCP connect; S3A's minimum
    "fs.s3a.connection.timeout": "15s",  # socket read, never answered; S3A's minimum
    "fs.s3a.connection.acquisition.timeout": "15s",  # S3A's minimum
}

#: the region that signs requests to an S3-compatible endpoint when none is given
_DEFAULT_REGION = "us-east-1"


class ObjectStoreConfigError(RuntimeError):
    """The S3 settings cannot be built (e.g. no Hadoop jar found to match hadoop-aws)."""


def is_s3(path: str | None) -> bool:
    """True for an ``s3://`` or ``s3a://`` path."""
    return bool(path) and urlparse(str(path)).scheme in S3_SCHEMES


def hadoop_uri(path: str, s3_served: bool = False) -> str:
    """``s3://bucket/key`` as ``s3a://bucket/key`` (Hadoop's S3 connector); others unchanged.

    ``s3_served``: the cluster has its own file system for ``s3://`` (EMR's EMRFS,
    Databricks), which is then kept.
    """
    if urlparse(path).scheme == "s3" and not s3_served:
        return "s3a" + path[len("s3") :]
    return path


def s3_scheme_served(spark: Any) -> bool:
    """True when the session's Hadoop configuration names a file system for ``s3://``."""
    return bool(spark.sparkContext._jsc.hadoopConfiguration().get("fs.s3.impl"))


def hadoop_version(spark_home: str | None = None) -> str:
    """The Hadoop version inside this Spark installation (its ``hadoop-client-api`` jar).

    ``spark_home`` defaults to ``SPARK_HOME`` or the PySpark package directory.
    """
    if spark_home is None:
        spark_home = os.environ.get("SPARK_HOME")
    if spark_home is None:  # the PySpark package directory, found without importing it
        spec = importlib.util.find_spec("pyspark")
        spark_home = str(Path(spec.origin).parent) if spec and spec.origin else ""
    jars = Path(spark_home) / "jars"
    pattern = re.compile(r"^hadoop-client-api-(\d+\.\d+\.\d+)\.jar$")
    versions = sorted(m.group(1) for p in jars.glob("hadoop-client-api-*.jar")
                      if (m := pattern.match(p.name)))  # fmt: skip
    if len(versions) != 1:
        raise ObjectStoreConfigError(
            f"cannot tell this Spark's Hadoop version: expected one hadoop-client-api-X.Y.Z.jar "
            f"in {jars}, found {versions or 'none'}; give the connector yourself with "
            f"--conf spark.jars.packages={HADOOP_AWS}:<Spark's Hadoop version>"
        )
    return versions[0]


def s3a_packages(spark_home: str | None = None) -> tuple[str, ...]:
    """Maven coordinates of the S3 connector matching this Spark (its SDK bundle follows)."""
    return (f"{HADOOP_AWS}:{hadoop_version(spark_home)}",)


def fetch_s3a_packages() -> None:
    """Fill the Ivy cache with :func:`s3a_packages` (``make s3a-packages``) unless it holds
    them: one local session started and stopped, so that tests on S3 do not race each other
    to download the SDK bundle into the same cache."""
    from cloud_spark.spark import get_spark, packages_cached  # noqa: PLC0415  (PySpark, late)

    packages = s3a_packages()
    if not packages_cached(packages):
        conf = {"spark.ui.enabled": "false", "spark.jars.packages": ",".join(packages)}
        get_spark("outpost-fetch-s3a-packages", "local[1]", conf).stop()


def endpoint_from_env(env: Mapping[str, str] | None = None) -> str | None:
    """The S3 endpoint the AWS SDKs take from the environment (service-specific first)."""
    env = os.environ if env is None else env
    return env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL") or None


def s3a_settings(
    endpoint: str | None = None,
    region: str | None = None,
    env: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Hadoop settings (``fs.s3a.*``, without ``spark.hadoop.``) for a job on S3.

    ``endpoint`` (else the environment's) selects an S3-compatible store, addressed
    path-style; ``region`` (else ``AWS_REGION`` / ``AWS_DEFAULT_REGION``, else us-east-1
    when an endpoint is given) signs the requests. Includes :data:`FAIL_FAST`.
    """
    env = os.environ if env is None else env
    settings = dict(FAIL_FAST)
    endpoint = endpoint or endpoint_from_env(env)
    region = region or env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION")
    if endpoint:
        parsed = urlparse(endpoint)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise ObjectStoreConfigError(
                f"--s3-endpoint: expected http://HOST:PORT or https://HOST, got {endpoint!r}"
            )
        settings["fs.s3a.endpoint"] = endpoint
        settings["fs.s3a.path.style.access"] = "true"
        settings["fs.s3a.connection.ssl.enabled"] = str(parsed.scheme == "https").lower()
        region = region or _DEFAULT_REGION
    if region:
        settings["fs.s3a.endpoint.region"] = region
    return settings


def s3a_session_conf(
    paths: Sequence[str | None],
    user_conf: Mapping[str, str],
    endpoint: str | None = None,
    region: str | None = None,
    env: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Spark settings to add for a job whose ``paths`` include S3 ones (else ``{}``).

    The user's ``spark.jars.packages`` is kept and hadoop-aws added unless it names one
    already; a ``spark.hadoop.fs.s3a.*`` key the user set is left out, so theirs stands.
    """
    if not any(is_s3(path) for path in paths):
        return {}
    conf = {
        f"spark.hadoop.{key}": value
        for key, value in s3a_settings(endpoint, region, env).items()
        if f"spark.hadoop.{key}" not in user_conf
    }
    theirs = [p for p in user_conf.get("spark.jars.packages", "").split(",") if p]
    if not any(p.startswith(f"{HADOOP_AWS}:") for p in theirs):
        conf["spark.jars.packages"] = ",".join([*theirs, *s3a_packages()])
    return conf


def apply_to_session(spark: Any, conf: Mapping[str, str]) -> None:
    """Put the ``spark.hadoop.*`` keys of ``conf`` into a running session's Hadoop settings.

    A session that existed before (spark-submit made it, or a test's) ignored them when the
    job asked for it; the listing of bronze goes through the SparkContext's Hadoop
    configuration. A key the session was started with (``spark-submit --conf``) stands.
    """
    started_with = spark.sparkContext.getConf()
    hadoop_conf = spark.sparkContext._jsc.hadoopConfiguration()
    for key, value in conf.items():
        if key.startswith("spark.hadoop.") and not started_with.contains(key):
            hadoop_conf.set(key.removeprefix("spark.hadoop."), value)


def check_store(spark: Any, paths: Sequence[str | None]) -> None:
    """Touch each S3 path once (does it exist?), so that a missing bucket, refused
    credentials or a dead endpoint fail here, in one operation's retries, before a job
    has done anything; the exception is the connector's (:func:`describe_store_error`)."""
    jvm, hadoop_conf = spark.sparkContext._jvm, spark.sparkContext._jsc.hadoopConfiguration()
    for path in paths:
        if path and is_s3(path):
            jpath = jvm.org.apache.hadoop.fs.Path(path)
            jpath.getFileSystem(hadoop_conf).exists(jpath)


# -- errors -----------------------------------------------------------------------------------

_S3_PATH = re.compile(r"s3a?://[^\s`'\":,;)]+")


def _bucket_uri(text: str, fallback: str | None) -> str:
    found = _S3_PATH.search(text)
    path = found.group(0) if found else (fallback or "s3a://?")
    parsed = urlparse(path)
    return f"{parsed.scheme}://{parsed.netloc}"


def describe_store_error(
    exc: BaseException, paths: Sequence[str | None], endpoint: str | None
) -> str | None:
    """One line saying what is wrong with the S3 store behind ``exc``, or None if not S3's.

    Recognises the connector's exceptions by their Java class and S3 error code anywhere in
    the exception's text (a ``Py4JJavaError``, or PySpark's own exception classes that
    carry the Java message): a bucket that does not exist, credentials S3 refuses, an
    endpoint that cannot be reached or does not answer, the connector missing.
    """
    text = f"{exc}"
    fallback = next((hadoop_uri(p) for p in paths if p and is_s3(p)), None)
    where = endpoint or "the S3 endpoint"
    if "S3AFileSystem not found" in text or "No FileSystem for scheme \"s3" in text:
        return (
            f"{fallback}: the S3 connector (hadoop-aws) is not on Spark's classpath: give "
            f"spark-submit --packages {','.join(s3a_packages())} (docs/cloud.md, Object stores)"
        )
    if fallback is None and "s3a://" not in text:
        return None
    if "UnknownStoreException" in text or "NoSuchBucket" in text:
        return f"{_bucket_uri(text, fallback)}: the bucket does not exist"
    if any(code in text for code in ("InvalidAccessKeyId", "SignatureDoesNotMatch",
                                     "AccessDeniedException", "AccessDenied",
                                     "NoAuthWithAWSException", "Status Code: 403")):  # fmt: skip
        return (
            f"{_bucket_uri(text, fallback)}: access denied: S3 refused the credentials "
            "(fs.s3a.access.key/secret.key or AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY) or "
            "they may not use this bucket"
        )
    unreachable = ("ConnectException", "Connection refused", "UnknownHostException",
                   "SocketTimeoutException", "Read timed out", "connect timed out",
                   "Unable to execute HTTP request", "ConnectTimeoutException",
                   "AWSClientIOException", "NoHttpResponseException")  # fmt: skip
    if any(marker in text for marker in unreachable):
        return (
            f"{_bucket_uri(text, fallback)}: cannot reach {where} (no connection, or no "
            "answer within fs.s3a.connection.establish.timeout / connection.timeout, "
            "after fs.s3a.retry.limit retries)"
        )
    return None
