"""The console over plain HTTP: its `[console]` settings, the status endpoint beside it, and the
ACL editor of the broker page (a listener with an ACL file: the broker reads the new rules)."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.bridge.simulator import Simulator
from gateway.base.settings import ConfigError
from gateway.broker.net.security_files import set_password
from outpost.config import parse_config
from outpost.console.auth import Accounts
from outpost.console.devices import NEW_BUS
from tests.bridge.support import SocatPair
from tests.gateway.broker.e2e.helpers import PahoClient
from tests.outpost.console.support import PASSWORDS, HttpSession, f32, start_site
from tests.outpost.support import Outpost, http_get, start_outpost
from tests.support.mosquitto import free_port
from tests.support.waiting import wait_for


def test_console_needs_a_password_file_and_a_user(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config({"console": {"enabled": True}}, "outpost.toml", tmp_path)
    assert any(line.startswith("console:") and "password_file" in line
               for line in caught.value.errors), caught.value.errors
    set_password(tmp_path / "users", "alice", b"secret", iterations=1000)
    with pytest.raises(ConfigError) as caught:
        parse_config({"console": {"enabled": True, "password_file": "users",
                                  "users": {"alice": "root"}}}, "outpost.toml", tmp_path)
    assert any(line.startswith("console.users.alice") for line in caught.value.errors)
    config = parse_config({"console": {"enabled": True, "password_file": "users",
                                       "users": {"alice": "admin"}}}, "outpost.toml", tmp_path)
    assert config.console.users == {"alice": "admin"}


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Outpost]:
    workdir = tmp_path_factory.mktemp("console-http")
    set_password(workdir / "users", "admin", b"admin-secret", iterations=1000)
    (workdir / "acl").write_text("topic read public/#\n", encoding="utf-8")
    port = free_port()
    config = f"""
[[listeners]]
bind = "127.0.0.1:{port}"
acl_file = "acl"

[status]
bind = "127.0.0.1:0"

[console]
enabled = true
password_file = "users"
users = {{ admin = "admin" }}
"""
    outpost = start_outpost(workdir, config, listen=None)
    yield outpost
    outpost.stop()


def test_the_status_endpoint_stays_beside_the_console(gateway: Outpost) -> None:
    code, _, body = http_get(gateway.url("/status"))
    assert code == 200 and b'"gateway_id"' in body
    code, _, body = http_get(gateway.url("/metrics"))
    assert code == 200 and b"outpost_uptime_seconds" in body
    code, _, body = http_get(gateway.url("/"))
    assert code == 200 and b"outpost status" in body
    assert f"console on {gateway.url('/console/')}" in gateway.log()


def test_an_acl_is_checked_written_and_read_by_the_broker(gateway: Outpost) -> None:
    acl = gateway.config_path.parent / "acl"
    admin = HttpSession(gateway.url("/"))
    assert admin.login("admin", "admin-secret") == 200
    status, page = admin.request("/console/broker")
    assert status == 200 and "topic read public/#" in page
    csrf = admin.csrf("/console/broker")
    status, page = admin.request("/console/broker/acl/0", {"csrf": csrf,
                                                           "acl": "topic fly public/#\n"})
    assert 'data-error-for="acl.0"' in page
    assert acl.read_text() == "topic read public/#\n"  # refused: nothing written
    with PahoClient(gateway) as client:
        client.connect()
        assert client.subscribe("private/#", 1) == [0x80]  # the ACL denies it
    admin.request("/console/broker/acl/0", {"csrf": csrf,
                                            "acl": "topic read public/#\ntopic read private/#\n"})
    assert "private/#" in acl.read_text()
    assert "console: admin acl:" in gateway.log()
    wait_for(lambda: "reload: done" in gateway.log(), 10, message="no reload")
    with PahoClient(gateway) as client:
        client.connect()
        assert client.subscribe("private/#", 1) == [1]  # the broker read the new rules


def test_failed_logins_slow_the_next_ones_from_that_address(tmp_path: Path) -> None:
    set_password(tmp_path / "users", "alice", b"secret", iterations=1000)
    set_password(tmp_path / "users", "mallory", b"hers", iterations=1000)
    console = parse_config({"console": {"enabled": True, "password_file": "users",
                                        "users": {"alice": "admin"}}},
                           "outpost.toml", tmp_path).console
    accounts = Accounts(console)
    clock = [1000.0]

    async def attempts() -> list[str | None]:
        now = lambda: clock[0]  # noqa: E731
        return [await accounts.login("alice", "wrong", "10.0.0.9", now),
                await accounts.login("mallory", "hers", "10.0.0.9", now),  # no role
                await accounts.login("alice", "secret", "10.0.0.7", now)]

    assert asyncio.run(attempts()) == [None, None, "admin"]
    assert accounts.throttle.failures("address 10.0.0.9", clock[0]) == 2
    assert accounts.throttle.gap(2) == 1.0  # 0.5 s, doubled
    # the right password took its own count back: nothing slows 10.0.0.7 or alice
    assert accounts.throttle.failures("address 10.0.0.7", clock[0]) == 0
    assert accounts.throttle.failures("user alice", clock[0]) == 1  # the wrong one


def test_a_probe_reads_a_meter_on_a_new_serial_bus(gateway: Outpost, tmp_path: Path) -> None:
    pair = SocatPair(tmp_path, "rs485").start()
    simulator = Simulator([1], "rtu", device=str(pair.b), size=400, baudrate=9600)
    simulator.start()
    try:
        simulator.set_registers(1, "input", 0, f32(229.9))
        admin = HttpSession(gateway.url("/"))
        assert admin.login("admin", "admin-secret") == 200
        status, page = admin.request("/console/devices/probe", {
            "csrf": admin.csrf(), "name": "meter-9", "map": "eastron-sdm630", "bus": NEW_BUS,
            "unit_id": "1", "bus.name": "rs485", "bus.type": "rtu", "bus.device": str(pair.a),
            "bus.baudrate": "9600", "bus.parity": "N"})
        assert status == 200
        answer = re.search(r'data-point="voltage_l1">([^<]*)<', page)
        assert answer is not None and answer.group(1) == "229.9 V", page[-3000:]
        assert "meter-9" not in gateway.config_path.read_text()  # a probe writes nothing
    finally:
        simulator.stop()
        pair.stop()


def test_a_device_is_disabled_through_the_change_review_and_not_by_a_viewer(
        tmp_path: Path) -> None:
    """The button proposes `enabled = false` (diff shown), applying it writes the file with its
    comments and the reload stops the device; a viewer sees no button and is refused."""
    site = start_site(tmp_path)
    try:
        original = site.config_path.read_text()
        viewer = HttpSession(site.outpost.url("/"))
        assert viewer.login("viewer", PASSWORDS["viewer"]) == 200
        status, page = viewer.request("/console/devices/plc")
        assert status == 200 and "/enabled" not in page
        status, _ = viewer.request("/console/devices/plc/enabled",
                                   {"csrf": viewer.csrf(), "enabled": "false"})
        assert status == 403 and site.config_path.read_text() == original

        admin = HttpSession(site.outpost.url("/"))
        assert admin.login("admin", PASSWORDS["admin"]) == 200
        status, page = admin.request("/console/devices/plc/enabled",
                                     {"csrf": admin.csrf(), "enabled": "false"})
        assert status == 200 and "+enabled = false" in page, page[-2000:]
        assert site.config_path.read_text() == original  # only proposed so far
        apply = re.search(r'action="(/console/changes/[^"]+/apply)"', page)
        assert apply is not None
        admin.request(apply.group(1), {"csrf": admin.csrf()})
        text = site.config_path.read_text()
        assert "enabled = false" in text and "# The PLC: a setpoint" in text
        assert text.startswith("# The site's gateway: this comment must survive")
        wait_for(lambda: "disabled" in (admin.request("/console/devices")[1]), 10,
                 message="the device list does not show the device disabled")
        _, page = admin.request("/console/devices/plc")
        assert 'value="true"' in page and ">enable</button>" in page

        def bridge_says_disabled() -> bool:
            devices = json.loads(http_get(site.outpost.url("/status"))[2])["devices"]["devices"]
            return any(d["name"] == "plc" and d.get("disabled") for d in devices)

        wait_for(bridge_says_disabled, 10, message="the bridge still runs the device")
    finally:
        site.outpost.stop()
        site.simulator.stop()
