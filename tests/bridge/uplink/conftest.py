"""The cloud broker the uplink tests forward to: a real mosquitto on a free port."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import require
from tests.support.mosquitto import Mosquitto, start_mosquitto


@pytest.fixture
def cloud(tmp_path: Path) -> Iterator[Mosquitto]:
    """A mosquitto with persistence (retained messages and sessions survive its restarts)."""
    require("mosquitto")
    with start_mosquitto(tmp_path / "cloud", persistence=True) as broker:
        yield broker
