"""Fixtures of the Sparkplug end-to-end tests: a mosquitto, a Modbus simulator, a host."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.bridge.simulator import Simulator
from tests.bridge.sparkplug.host import SparkplugHost
from tests.conftest import require
from tests.support.mosquitto import Mosquitto, start_mosquitto


@pytest.fixture
def mosquitto(tmp_path: Path) -> Iterator[Mosquitto]:
    require("mosquitto")
    with start_mosquitto(tmp_path / "mosquitto") as broker:
        yield broker


@pytest.fixture
def sim() -> Iterator[Simulator]:
    simulator = Simulator([1], "tcp", size=20)
    simulator.start()
    yield simulator
    simulator.stop()


@pytest.fixture
def host(mosquitto: Mosquitto) -> Iterator[SparkplugHost]:
    with SparkplugHost(mosquitto) as client:
        yield client
