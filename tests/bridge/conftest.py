"""Fixtures of the bridge tests that publish to an MQTT broker of their own: a mosquitto, and
a Sparkplug host application subscribed to it (the Sparkplug edge node tests and the device
families' end-to-end tests)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.bridge.sparkplug.host import SparkplugHost
from tests.conftest import require
from tests.support.mosquitto import Mosquitto, start_mosquitto


@pytest.fixture
def mosquitto(tmp_path: Path) -> Iterator[Mosquitto]:
    require("mosquitto")
    with start_mosquitto(tmp_path / "mosquitto") as broker:
        yield broker


@pytest.fixture
def host(mosquitto: Mosquitto) -> Iterator[SparkplugHost]:
    with SparkplugHost(mosquitto) as client:
        yield client
