"""The S3 settings a job adds to its session (cloud_spark/object_store_conf.py), no JVM.

What the settings do against a real store is test_s3a.py's; here: when they are added,
that a user's value wins, the hadoop-aws version, and the ``s3://`` mapping.
"""

from __future__ import annotations

from pathlib import Path

import pyspark
import pytest

from cloud_spark import object_store_conf as s3


def test_local_paths_add_nothing() -> None:
    assert s3.s3a_session_conf(["/data/landing", "file:///data/tables", None], {}) == {}


def test_an_s3_path_adds_hadoop_aws_of_this_sparks_hadoop_and_fail_fast_settings() -> None:
    conf = s3.s3a_session_conf(["/data/landing", "s3://tables/site"], {}, env={})
    jars = Path(pyspark.__file__).parent / "jars"
    (api,) = jars.glob("hadoop-client-api-*.jar")
    version = api.name.removeprefix("hadoop-client-api-").removesuffix(".jar")
    assert conf["spark.jars.packages"] == f"org.apache.hadoop:hadoop-aws:{version}"
    assert conf["spark.hadoop.fs.s3a.retry.limit"] == s3.FAIL_FAST["fs.s3a.retry.limit"]
    assert "spark.hadoop.fs.s3a.endpoint" not in conf  # AWS itself: the SDK's endpoint


def test_an_endpoint_means_path_style_and_a_default_region() -> None:
    conf = s3.s3a_session_conf(["s3a://b/x"], {}, endpoint="http://127.0.0.1:9000", env={})
    assert conf["spark.hadoop.fs.s3a.endpoint"] == "http://127.0.0.1:9000"
    assert conf["spark.hadoop.fs.s3a.path.style.access"] == "true"
    assert conf["spark.hadoop.fs.s3a.connection.ssl.enabled"] == "false"
    assert conf["spark.hadoop.fs.s3a.endpoint.region"] == "us-east-1"
    from_env = s3.s3a_session_conf(
        ["s3a://b/x"], {}, env={"AWS_ENDPOINT_URL_S3": "https://s3.example", "AWS_REGION": "eu-1"}
    )
    assert from_env["spark.hadoop.fs.s3a.endpoint"] == "https://s3.example"
    assert from_env["spark.hadoop.fs.s3a.connection.ssl.enabled"] == "true"
    assert from_env["spark.hadoop.fs.s3a.endpoint.region"] == "eu-1"


def test_the_users_settings_and_packages_stand() -> None:
    user = {
        "spark.hadoop.fs.s3a.retry.limit": "9",
        "spark.jars.packages": "org.example:thing:1.0,org.apache.hadoop:hadoop-aws:3.4.1",
    }
    conf = s3.s3a_session_conf(["s3a://b/x"], user, env={})
    assert "spark.hadoop.fs.s3a.retry.limit" not in conf
    assert "spark.jars.packages" not in conf  # theirs names a hadoop-aws already
    theirs = s3.s3a_session_conf(["s3a://b/x"], {"spark.jars.packages": "org.example:t:1"}, env={})
    assert theirs["spark.jars.packages"].startswith("org.example:t:1,org.apache.hadoop:hadoop-aws:")


@pytest.mark.parametrize("bad", ["127.0.0.1:9000", "ftp://host", "http://"])
def test_a_bad_endpoint_is_refused_by_name(bad: str) -> None:
    with pytest.raises(s3.ObjectStoreConfigError, match="--s3-endpoint"):
        s3.s3a_session_conf(["s3a://b/x"], {}, endpoint=bad, env={})


def test_no_hadoop_jar_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "jars").mkdir()
    with pytest.raises(s3.ObjectStoreConfigError, match="hadoop-client-api"):
        s3.hadoop_version(str(tmp_path))


def test_s3_maps_to_s3a_unless_the_cluster_serves_s3() -> None:
    assert s3.hadoop_uri("s3://b/landing") == "s3a://b/landing"
    assert s3.hadoop_uri("s3://b/landing", s3_served=True) == "s3://b/landing"
    assert s3.hadoop_uri("s3a://b/x") == "s3a://b/x"
    assert s3.hadoop_uri("/data/s3://x") == "/data/s3://x"
