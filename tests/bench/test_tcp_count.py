"""The wire-size benchmark's counting proxy counts exactly the bytes each way."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench import wire
from bench.uplink.tcp_count import HOST, CountingProxies
from tests.support.mosquitto import Mosquitto, mosquitto_available, start_mosquitto
from tests.support.waiting import wait_for


@pytest.fixture
def cloud(tmp_path: Path) -> Iterator[Mosquitto]:
    if not mosquitto_available():
        pytest.skip("mosquitto is not installed")
    with start_mosquitto(tmp_path / "mosquitto") as broker:
        yield broker


def test_a_connect_and_its_connack_are_counted_to_the_byte(cloud: Mosquitto) -> None:
    proxies = CountingProxies()
    try:
        counted = proxies.open(cloud.port)
        connect = wire.connect("count-me", keepalive=60)
        with socket.create_connection((HOST, counted.port)) as sock:
            sock.sendall(connect)
            assert sock.recv(4) == b"\x20\x02\x00\x00"
            publish = wire.publish("t", b"payload", 1, 7)
            sock.sendall(publish)
            assert sock.recv(4) == b"\x40\x02\x00\x07"  # PUBACK
        wait_for(lambda: counted.snapshot() == (len(connect) + len(publish), 8))
    finally:
        proxies.close()
