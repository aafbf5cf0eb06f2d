"""The status endpoint of a running gateway: `/metrics` (parsed with prometheus_client's own
parser), `/status` JSON, `outpost status` text, and the HTTP edges (404, 405, HEAD)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gateway.broker.contracts.passwords import hash_password
from tests.gateway.broker.e2e.helpers import RawClient
from tests.outpost.support import (
    ROOT,
    MovingDevice,
    Outpost,
    bridge_config,
    closed_by_server,
    http_get,
    start_outpost,
    status_json,
)
from tests.support.waiting import wait_for


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Outpost]:
    """A gateway with one answering and one silent Modbus device, and a SQLite store."""
    device = MovingDevice(units=(1,))
    port = device.start()
    workdir = tmp_path_factory.mktemp("status")
    config = bridge_config(port, {"meter-1": 1, "meter-2": 2}) + (
        '\n[status]\nbind = "127.0.0.1:0"\nhistory_interval = 0.2\n')
    outpost = start_outpost(workdir, config, "--state-dir", str(workdir / "state"))
    wait_for(lambda: {d["name"]: d["online"] for d in status_json(outpost)["devices"]["devices"]}
               == {"meter-1": True, "meter-2": False}, message="no devices settled")
    yield outpost
    assert outpost.stop() == 0
    device.stop()


@pytest.fixture
def two_clients(gateway: Outpost) -> Iterator[tuple[RawClient, RawClient]]:
    with RawClient(gateway.host, gateway.port) as first, \
            RawClient(gateway.host, gateway.port) as second:
        assert first.connect("ops-first")[3] == 0
        assert second.connect("ops-second")[3] == 0
        first.subscribe(("ops/#", 1))
        for i in range(5):
            second.publish(f"ops/{i}", b"x", qos=1)
        first.receive_publishes(5)
        yield first, second


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def test_metrics_parse_and_follow_the_broker(gateway: Outpost,
                                             two_clients: tuple[RawClient, RawClient]) -> None:
    code, headers, body = http_get(gateway.url("/metrics"))
    assert code == 200
    assert headers["Content-Type"].startswith("text/plain; version=0.0.4")
    text = body.decode()
    families = {f.name: f.type for f in text_string_to_metric_families(text)}
    assert families["outpost_messages_received"] == "counter"
    assert families["outpost_clients_connected"] == "gauge"
    values = samples(text)
    assert values[("outpost_clients_connected", ())] == 2
    assert values[("outpost_messages_received_total", ())] >= 5
    assert values[("outpost_messages_sent_total", ())] >= 5
    assert values[("outpost_device_online", (("device", "meter-1"),))] == 1
    assert values[("outpost_device_online", (("device", "meter-2"),))] == 0
    assert values[("outpost_device_errors_total", (("device", "meter-2"),))] >= 2
    power = values[("outpost_point_value", (("device", "meter-1"), ("point", "power")))]
    assert 150 <= power <= 250  # 200 +- 50 kW from the device
    assert values[("outpost_store_bytes", ())] > 0
    assert values[("process_resident_memory_bytes", ())] > 1 << 20
    assert values[("outpost_info", (("gateway_id", "outpost"), ("version", "outpost 0.1.0")))]
    # Counters only grow.
    with RawClient(gateway.host, gateway.port) as third:
        assert third.connect("ops-third")[3] == 0
        third.publish("ops/more", b"y")
        wait_for(lambda: samples(http_get(gateway.url("/metrics"))[2].decode())[
            ("outpost_clients_connected", ())] == 3, message="no third client counted")
    later = samples(http_get(gateway.url("/metrics"))[2].decode())
    assert later[("outpost_messages_received_total", ())] > values[
        ("outpost_messages_received_total", ())]


def test_status_json(gateway: Outpost, two_clients: tuple[RawClient, RawClient]) -> None:
    status = status_json(gateway, history=True)
    assert status["gateway_id"] == "outpost" and status["uptime_s"] >= 0
    assert status["listeners"] == [f"{gateway.host}:{gateway.port}"]
    assert status["status_url"] == gateway.status_url
    clients = status["clients"]
    assert clients["connected"] == 2
    assert {c["client_id"] for c in clients["list"]} == {"ops-first", "ops-second"}
    first = next(c for c in clients["list"] if c["client_id"] == "ops-first")
    assert (first["protocol"], first["subscriptions"]) == ("3.1.1", 1)
    assert status["messages"]["received"] >= 5
    assert status["store"]["durability"] == "full"
    assert status["store"]["size_bytes"] > 0
    assert status["store"]["path"].endswith("outpost.db")
    devices = {d["name"]: d for d in status["devices"]["devices"]}
    assert (status["devices"]["online"], status["devices"]["offline"]) == (1, 1)
    assert devices["meter-1"]["points"]["power"]["unit"] == "kW"
    assert devices["meter-2"]["errors"] >= 2
    series = status["history"]["points/meter-1/power"]
    assert len(series) >= 2 and all(150 <= v <= 250 for _t, v in series)
    assert status["history_interval_s"] == 0.2
    assert "history" not in status_json(gateway)


def test_outpost_status_prints_a_summary(gateway: Outpost,
                                         two_clients: tuple[RawClient, RawClient]) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "outpost", "status", "--url", gateway.url("")],
        capture_output=True, text=True, timeout=30, cwd=ROOT, check=False,
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert out.startswith("outpost outpost (outpost 0.1.0)")
    assert f"listeners   {gateway.host}:{gateway.port}" in out
    assert "clients     2 connected" in out
    assert "devices: 1 online, 1 offline" in out
    assert "meter-1              online" in out and "meter-2              offline" in out
    assert " kW" in out and "store       " in out and "outpost.db (full)" in out
    assert "ops-first" in out and "ops-second" in out
    raw = subprocess.run(
        [sys.executable, "-m", "outpost", "status", "--url", gateway.url(""), "--json"],
        capture_output=True, text=True, timeout=30, cwd=ROOT, check=True,
    )
    assert json.loads(raw.stdout)["clients"]["connected"] == 2


def test_outpost_status_finds_the_endpoint_in_the_config(gateway: Outpost) -> None:
    port = int(gateway.url("").rsplit(":", 1)[1].strip("/"))
    config = gateway.config_path.parent / "status-only.toml"
    users = gateway.config_path.parent / "status.passwd"  # a LAN bind needs one
    users.write_text(f"ops:{hash_password(b'x', iterations=1000)}\n", encoding="utf-8")
    config.write_text(f'[status]\nbind = "0.0.0.0:{port}"\npassword_file = "{users}"\n',
                      encoding="utf-8")
    result = subprocess.run(
        [sys.executable, "-m", "outpost", "status", "--config", str(config)],
        capture_output=True, text=True, timeout=30, cwd=ROOT, check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "devices: 1 online" in result.stdout


def test_outpost_status_when_nothing_runs(tmp_path: Path) -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    result = subprocess.run(
        [sys.executable, "-m", "outpost", "status", "--url", f"http://127.0.0.1:{port}"],
        capture_output=True, text=True, timeout=30, cwd=ROOT, check=False,
    )
    assert result.returncode == 1
    assert "is outpost running" in result.stderr


def test_http_edges(gateway: Outpost) -> None:
    code, headers, body = http_get(gateway.url("/"))
    assert code == 200 and headers["Content-Type"].startswith("text/html")
    assert "default-src 'none'" in headers["Content-Security-Policy"]
    assert b"<script" in body and b"src=" not in body.replace(b"default-src", b"")
    assert http_get(gateway.url("/nope"))[0] == 404
    code, headers, body = http_get(gateway.url("/status"), method="HEAD")
    assert code == 200 and body == b"" and int(headers["Content-Length"]) > 0
    code, headers, _ = http_get(gateway.url("/status"), method="POST")
    assert code == 405 and headers["Allow"] == "GET, HEAD"
    host, port = gateway.url("").split("//")[1].strip("/").split(":")
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        sock.sendall(b"garbage\r\n\r\n")
        assert sock.recv(100).startswith(b"HTTP/1.1 400")


def test_one_address_cannot_take_every_status_connection(gateway: Outpost) -> None:
    """Connections held open without a request: beyond the address's 8, closed at once, and
    another address is still answered."""
    host, port = gateway.url("").split("//")[1].strip("/").split(":")
    held = []
    try:
        for _ in range(12):
            sock = socket.socket()
            sock.bind(("127.0.0.6", 0))
            sock.connect((host, int(port)))
            held.append(sock)
        wait_for(lambda: sum(closed_by_server(sock) for sock in held) >= 12 - 8,
                 message="the connections beyond the cap are still open")
        assert http_get(gateway.url("/status"))[0] == 200  # from 127.0.0.1
    finally:
        for sock in held:
            sock.close()


def test_status_port_taken_is_a_warning_not_a_failure(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        outpost = start_outpost(tmp_path, f'[status]\nbind = "127.0.0.1:{port}"\n')
        try:
            assert outpost.status_url is None
            with RawClient(outpost.host, outpost.port) as client:
                assert client.connect("ops-works")[3] == 0
            assert f"status endpoint not started: cannot bind 127.0.0.1:{port}" in outpost.log()
        finally:
            assert outpost.stop() == 0


def test_status_disabled(tmp_path: Path) -> None:
    outpost = start_outpost(tmp_path, "[status]\nenabled = false\n")
    try:
        assert outpost.status_url is None
        assert "status page" not in outpost.log()
    finally:
        assert outpost.stop() == 0
