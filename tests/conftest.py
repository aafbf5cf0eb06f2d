"""Fixtures shared by every test layer."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.broker_proc import BrokerProcess, start_broker


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


def require(tool: str) -> str:
    """Path of an external tool, or skip the test when it is missing (not root in CI)."""
    path = shutil.which(tool)
    if path is None:
        pytest.skip(f"{tool} is not installed (make test installs it when run as root)")
    return path
