"""The session's local-JVM defaults: applied when this process launches a local JVM, and
never over a setting the user made (conf, spark-defaults.conf, environment)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from pyspark import SparkContext

from cloud_spark.spark import LOCAL_JVM_CONF, LOCAL_JVM_ENV, local_jvm_settings

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def launching(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """As if no JVM ran yet, outside spark-submit, with no user setting anywhere.

    Returns the (empty) Spark configuration directory the defaults file would be read from.
    """
    monkeypatch.setattr(SparkContext, "_active_spark_context", None)
    for name in ("PYSPARK_GATEWAY_PORT", "SPARK_DRIVER_MEMORY", *LOCAL_JVM_ENV):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path))
    return tmp_path


def test_a_local_launch_gets_the_heap_and_the_malloc_arena_limit(launching: Path) -> None:
    for master in (None, "local[2]", "local[*]"):
        assert local_jvm_settings(master, {}) == (LOCAL_JVM_CONF, LOCAL_JVM_ENV)
    assert LOCAL_JVM_CONF["spark.driver.memory"] == "1200m"
    assert LOCAL_JVM_ENV == {"MALLOC_ARENA_MAX": "2"}


def test_the_users_driver_memory_stands(launching: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    settings, _ = local_jvm_settings("local[2]", {"spark.driver.memory": "3g"})
    assert "spark.driver.memory" not in settings
    (launching / "spark-defaults.conf").write_text("# site defaults\n\nspark.driver.memory   4g\n")
    settings, _ = local_jvm_settings("local[2]", {})
    assert "spark.driver.memory" not in settings
    (launching / "spark-defaults.conf").unlink()
    monkeypatch.setenv("SPARK_DRIVER_MEMORY", "5g")
    settings, _ = local_jvm_settings("local[2]", {})
    assert "spark.driver.memory" not in settings


def test_huge_generated_methods_only_with_a_jvm_that_compiles_them(launching: Path) -> None:
    settings, _ = local_jvm_settings("local[2]", {})
    assert "-XX:-DontCompileHugeMethods" in settings["spark.driver.extraJavaOptions"]
    assert settings["spark.sql.codegen.hugeMethodLimit"] == "65535"
    # the user's own JVM options: the limit stays at the jobs' default (8000)
    own = {"spark.driver.extraJavaOptions": "-XX:+UseSerialGC"}
    settings, _ = local_jvm_settings("local[2]", own)
    assert "spark.sql.codegen.hugeMethodLimit" not in settings
    # the user's own limit stands
    settings, _ = local_jvm_settings("local[2]", {"spark.sql.codegen.hugeMethodLimit": "9000"})
    assert "spark.sql.codegen.hugeMethodLimit" not in settings


def test_the_users_malloc_setting_stands(launching: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MALLOC_ARENA_MAX", "8")
    assert local_jvm_settings("local[2]", {}) == (LOCAL_JVM_CONF, {})


def test_nothing_when_the_jvm_is_not_launched_here_or_not_local(
    launching: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert local_jvm_settings("spark://10.0.0.1:7077", {}) == ({}, {})
    assert local_jvm_settings(None, {"spark.master": "yarn"}) == ({}, {})
    monkeypatch.setenv("PYSPARK_GATEWAY_PORT", "40000")
    assert local_jvm_settings("local[2]", {}) == ({}, {})
    monkeypatch.delenv("PYSPARK_GATEWAY_PORT")
    monkeypatch.setattr(SparkContext, "_active_spark_context", object())
    assert local_jvm_settings("local[2]", {}) == ({}, {})


JVM_PROBE = """
import json, os, sys
from pathlib import Path
from cloud_spark.spark import get_spark
conf = dict(arg.split("=", 1) for arg in sys.argv[1:])
spark = get_spark("outpost-jvm-probe", "local[1]", {"spark.ui.enabled": "false", **conf})
me = str(os.getpid())
OPTS = (b"-Xmx", b"-XX:+Use")
for proc in Path("/proc").iterdir():
    try:
        if proc.name.isdigit() and (proc / "stat").read_text().rsplit(")", 1)[1].split()[1] == me:
            args = (proc / "cmdline").read_bytes().split(b"\\0")
            env = (proc / "environ").read_bytes().split(b"\\0")
            if any(b"java" in arg for arg in args[:1]):
                print(json.dumps({
                    "opts": sorted({a.decode() for a in args if a.startswith(OPTS)}),
                    "malloc": [e.decode() for e in env if e.startswith(b"MALLOC_ARENA_MAX=")],
                }))
    except OSError:
        pass
spark.stop()
"""


def _probe(*conf: str) -> str:
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("PYSPARK_GATEWAY_PORT", "SPARK_DRIVER_MEMORY", "MALLOC_ARENA_MAX")
    }
    env["PYTHONPATH"] = str(ROOT)
    done = subprocess.run(
        [sys.executable, "-c", JVM_PROBE, *conf],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip().splitlines()[-1]


def test_the_launched_jvm_runs_with_the_defaults_or_the_users_heap() -> None:
    """The settings reach the JVM itself (its command line and environment)."""
    assert json.loads(_probe()) == {
        "opts": ["-XX:+UseParallelGC", "-Xmx1200m"],
        "malloc": ["MALLOC_ARENA_MAX=2"],
    }
    users = _probe("spark.driver.memory=700m", "spark.driver.extraJavaOptions=-XX:+UseSerialGC")
    assert json.loads(users) == {
        "opts": ["-XX:+UseSerialGC", "-Xmx700m"],
        "malloc": ["MALLOC_ARENA_MAX=2"],
    }
