"""Fixtures of the listener and access-control tests."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.gateway.broker.auth.support import SecureBroker, broker_pool


@pytest.fixture
def secure_broker(tmp_path: Path) -> Iterator[Callable[[str, int], SecureBroker]]:
    """`secure_broker(config_text, listeners)`: brokers stopped after the test."""
    with broker_pool(tmp_path) as start:
        yield start
