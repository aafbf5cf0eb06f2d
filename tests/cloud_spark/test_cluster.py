"""The jobs on a real Spark standalone cluster started from the pyspark installation.

A master and two workers (``spark-class org.apache.spark.deploy.master.Master`` /
``...deploy.worker.Worker``) listen on 127.0.0.1; ``spark-submit --master spark://…`` runs
``silver`` and ``report`` with the package shipped as a zip (``--py-files``) and the entry
script copied alone into an empty directory, run from a directory outside the checkout with
no ``PYTHONPATH``: the checkout is not what the driver imports. Executors run in their own
JVMs under the workers (their work directories are checked).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pyspark
import pytest

from bench.cloud.tsbs_iot import GenConfig, generate
from cloud_spark.spark import submit_args

ROOT = Path(__file__).resolve().parents[2]
SPARK_BIN = Path(pyspark.__file__).parent / "bin"


def _port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _env(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SPARK_HOME")}
    env.update(
        SPARK_LOCAL_IP="127.0.0.1",
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_DRIVER_PYTHON=sys.executable,
        SPARK_LOG_DIR=str(tmp / "logs"),
        SPARK_DAEMON_MEMORY="256m",
        SPARK_SUBMIT_OPTS="-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
    )
    return env


def _wait_for(proc: subprocess.Popen[str], log: Path, text: str, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while text not in log.read_text(errors="replace"):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise AssertionError(f"never saw {text!r}:\n{log.read_text(errors='replace')}")
        time.sleep(0.2)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[str]:
    """``spark://127.0.0.1:PORT`` of a master with two one-core workers."""
    env, port = _env(tmp_path), _port()
    procs: list[subprocess.Popen[str]] = []
    try:
        log = tmp_path / "master.log"
        master = subprocess.Popen(
            [str(SPARK_BIN / "spark-class"), "org.apache.spark.deploy.master.Master",
             "--host", "127.0.0.1", "--port", str(port), "--webui-port", str(_port())],
            env=env, stdout=log.open("w"), stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        procs.append(master)
        _wait_for(master, log, "I have been elected leader")
        url = f"spark://127.0.0.1:{port}"
        for index in range(2):
            log = tmp_path / f"worker-{index}.log"
            worker = subprocess.Popen(
                [str(SPARK_BIN / "spark-class"), "org.apache.spark.deploy.worker.Worker", url,
                 "--host", "127.0.0.1", "--cores", "1", "--memory", "768m",
                 "--webui-port", str(_port()), "--work-dir", str(tmp_path / f"work-{index}")],
                env=env, stdout=log.open("w"), stderr=subprocess.STDOUT, text=True,
            )  # fmt: skip
            procs.append(worker)
            _wait_for(worker, log, "Successfully registered with master")
        yield url
    finally:
        for proc in reversed(procs):
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()


def build_artifact(dest: Path) -> tuple[Path, Path]:
    """The package as a zip for ``--py-files`` and the entry script alone in its directory."""
    archive = dest / "outpost_cloud.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for path in sorted((ROOT / "cloud_spark").rglob("*.py")):
            zf.write(path, path.relative_to(ROOT))
    entry_dir = dest / "entry"
    entry_dir.mkdir()
    entry = entry_dir / "outpost_jobs.py"
    shutil.copyfile(ROOT / "cloud_spark" / "__main__.py", entry)
    return archive, entry


@pytest.mark.pipeline  # minutes: `make pipeline-test`
@pytest.mark.timeout(900)
def test_silver_and_report_run_under_spark_submit_on_a_standalone_cluster(
    cluster: str, tmp_path: Path
) -> None:
    root, out = tmp_path / "landing", tmp_path / "tables"
    manifest = generate(GenConfig(rows=3000, gateways=2, devices=10, rows_per_file=800), root)
    archive, entry = build_artifact(tmp_path)
    submit = [
        str(SPARK_BIN / "spark-submit"), "--master", cluster, "--py-files", str(archive),
        *submit_args(),
        "--driver-memory", "512m", "--executor-memory", "512m", "--total-executor-cores", "2",
        "--executor-cores", "1", "--conf", "spark.ui.enabled=false",
        "--conf", "spark.sql.shuffle.partitions=4", str(entry),
    ]  # fmt: skip
    started = time.monotonic()
    for job in ("silver", "report"):
        done = subprocess.run(
            [*submit, job, "--root", str(root), "--out", str(out)],
            cwd=tmp_path, env=_env(tmp_path), capture_output=True, text=True, timeout=600,
            check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-4000:]
        if job == "silver":  # the job's one JSON line, among whatever else Spark prints
            (line,) = [ln for ln in done.stdout.splitlines() if ln.startswith('{"job"')]
            result = json.loads(line)
    print(f"cluster jobs took {time.monotonic() - started:.0f} s")
    assert result["bronze_rows"] == manifest.rows
    assert result["rows"] == manifest.distinct_ids + manifest.no_id
    report = json.loads((out / "report.json").read_text())
    assert report["messages"] == manifest.distinct_ids
    executors = list(tmp_path.glob("work-*/app-*/*/stderr"))
    assert len({path.parts[-4] for path in executors}) == 2  # executors under both workers
