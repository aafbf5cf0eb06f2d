"""Fixtures of the Sparkplug end-to-end tests: a Modbus simulator (the mosquitto and the host
application come from tests/bridge/conftest.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from bench.bridge.simulator import Simulator


@pytest.fixture
def sim() -> Iterator[Simulator]:
    simulator = Simulator([1], "tcp", size=20)
    simulator.start()
    yield simulator
    simulator.stop()
