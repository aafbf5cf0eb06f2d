"""Every device family in the console, over real HTTP against a running `outpost run`: the
forms come from each family's configuration model, the probe and browse from its `explore`.

The peers are independent implementations: an OPC UA server of node-opcua, an S7 PLC of
node-snap7 (snap7's C server), cpppo's Logix simulator and the @bacnet-js/client BACnet
devices, all as processes. One gateway for
the module; each test adds its device through the generic form, probes (and browses) it
first, applies, sees its values, writes, edits it, and disables it, as a technician would with
the family's page.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Iterator

import pytest

from bridge.catalog import entries
from bridge.families import registered
from gateway.broker.net.security_files import set_password
from tests.bridge.bacnet.support import NodeDevice
from tests.bridge.enip.support import LogixSimulator
from tests.bridge.opcua.support import NodeServer
from tests.bridge.s7.support import S7Server
from tests.outpost.console.support import HttpSession
from tests.outpost.support import Outpost, http_get, start_outpost
from tests.support.waiting import wait_for

CONFIG = """# a gateway without devices: every one is added from the console
[status]
bind = "127.0.0.1:0"

[console]
enabled = true
password_file = "users"
users = { admin = "admin" }
"""


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Outpost]:
    workdir = tmp_path_factory.mktemp("console-families")
    set_password(workdir / "users", "admin", b"admin-secret", iterations=1000)
    outpost = start_outpost(workdir, CONFIG)
    yield outpost
    outpost.stop()


@pytest.fixture(scope="module")
def opcua(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeServer]:
    server = NodeServer(tmp_path_factory.mktemp("node-opcua-pki")).start()
    yield server
    server.kill()


@pytest.fixture(scope="module")
def s7() -> Iterator[S7Server]:
    server = S7Server().start()
    yield server
    server.kill()


@pytest.fixture(scope="module")
def logix() -> Iterator[LogixSimulator]:
    simulator = LogixSimulator().start()
    yield simulator
    simulator.kill()


@pytest.fixture(scope="module")
def bacnet() -> Iterator[NodeDevice]:
    devices = NodeDevice().start()
    yield devices
    devices.kill()


@pytest.fixture
def admin(gateway: Outpost) -> HttpSession:
    session = HttpSession(gateway.url("/"))
    assert session.login("admin", "admin-secret") == 200
    return session


def post(session: HttpSession, path: str, form: dict[str, str]) -> str:
    status, page = session.request(path, {"csrf": session.csrf(), **form})
    assert status == 200, page[-2000:]
    return page


def apply(session: HttpSession, page: str, diff_has: str) -> str:
    """Apply the change a review page shows (its diff must have `diff_has`)."""
    assert diff_has in html.unescape(page), page[-3000:]
    found = re.search(r'action="(/console/changes/[^"]+/apply)"', page)
    assert found is not None, page[-3000:]
    return post(session, found.group(1), {})


def answer(page: str, point: str) -> str:
    found = re.search(rf'data-point="{re.escape(point)}">([^<]*)<', page)
    assert found is not None, page[-3000:]
    return html.unescape(found.group(1))


def error_at(page: str, name: str) -> str:
    found = re.search(rf'data-error-for="{re.escape(name)}">([^<]*)<', page)
    assert found is not None, page[-3000:]
    return html.unescape(found.group(1))


def live_value(gateway: Outpost, device: str, point: str) -> object:
    """The device's last value of the point, as the status page (and the console) has it."""
    devices = json.loads(http_get(gateway.url("/status"))[2])["devices"]["devices"]
    state = next((d for d in devices if d["name"] == device), {})
    return (state.get("points") or {}).get(point, {}).get("value")


def added_live_and_written(gateway: Outpost, admin: HttpSession, kind: str,
                           device: dict[str, str], live: tuple[str, object],
                           write: tuple[str, float]) -> None:
    """Add `device` from its family's form and apply; wait until the `live` point has its
    value; write the `write` point through the console and see the value come back."""
    name = device["name"]
    page = apply(admin, post(admin, f"/console/{kind}/new", device), f"[[bridge.{kind}]]")
    assert f"applied: add device {name}" in page
    point, value = live
    until_live(gateway, name, point, value, f"no {kind} value")
    point, value = write
    status, page = admin.request(f"/console/devices/{name}/write", {
        "csrf": admin.csrf(), "point": point, "value": str(value)})
    assert status == 200 and f"wrote {name}/{point} = {value}" in html.unescape(page), \
        page[-2000:]
    until_live(gateway, name, point, value, "the written value did not come back")


def until_live(gateway: Outpost, device: str, point: str, value: object, what: str) -> None:
    """Wait until the device's point has `value`; else fail with the gateway's log lines
    about the device (what its sessions did)."""
    try:
        wait_for(lambda: live_value(gateway, device, point) == value, 20)
    except AssertionError:
        lines = [line for line in gateway.log().splitlines() if device in line]
        raise AssertionError(f"{what}: {live_value(gateway, device, point)!r}; the log of "
                             f"{device}:\n" + "\n".join(lines[-40:])) from None


def test_every_registered_family_has_its_add_form(admin: HttpSession) -> None:
    """Nothing in the console names a family: each registered one is listed with its form."""
    _, page = admin.request("/console/devices")
    for entry in entries(registered(None)):
        assert f'id="add-{entry.kind}"' in page, entry.kind
        status, form = admin.request(f"/console/{entry.section}/new")
        assert status == 200 and 'name="points.0.name"' in form, entry.kind
        assert f'data-family="{entry.kind}"' in form


def test_an_opc_ua_server_is_browsed_added_live_written_edited_and_disabled(
        gateway: Outpost, opcua: NodeServer, admin: HttpSession) -> None:
    device = {"name": "press", "endpoint": opcua.endpoint, "security_policy": "None",
              "security_mode": "None", "mode": "subscription",
              "points.0.name": "temperature", "points.0.node": "ns=1;s=Temperature",
              "points.0.type": "float64", "points.0.unit": "°C"}
    # A wrong value is shown at its input, before any connection.
    page = post(admin, "/console/opcua/probe", {**device, "endpoint": "http://plc"})
    assert "should match pattern" in error_at(page, "endpoint")
    # Probe and browse: the point read once, the server's variables listed to pick from.
    page = post(admin, "/console/opcua/probe", device)
    assert re.fullmatch(r"2\d(\.\d+)? °C", answer(page, "temperature")), page[-3000:]
    assert "security policy" in page and 'id="found"' in page
    found = dict(re.findall(r'name="found\.(\d+)\.node" value="([^"]+)"', page))
    setpoint = next(i for i, node in found.items() if node == "ns=1;s=Setpoint")
    page = post(admin, "/console/opcua/pick", {
        **device, **{k: html.unescape(v) for k, v in re.findall(
            r'name="(found\.\d+\.[a-z]+)" value="([^"]*)"', page) if not k.endswith(".pick")},
        f"found.{setpoint}.pick": "1"})
    assert 'name="points.1.node" value="ns=1;s=Setpoint"' in page, page[-3000:]
    assert "press" not in (gateway.config_path.read_text())  # a probe writes nothing
    # Add it: the picked row, made writable.
    page = post(admin, "/console/opcua/new", {
        **device, "points.1.name": "Setpoint", "points.1.node": "ns=1;s=Setpoint",
        "points.1.type": "float64", "points.1.writable": "1"})
    page = apply(admin, page, "[[bridge.opcua]]")
    assert "applied: add device press" in page
    wait_for(lambda: live_value(gateway, "press", "temperature") is not None, 20,
             message="no OPC UA value")
    _, page = admin.request("/console/devices/press")
    assert re.search(r'data-live="press/temperature">2\d', page), page[-3000:]
    # A write through the bridge's write path.
    status, page = admin.request("/console/devices/press/write", {
        "csrf": admin.csrf(), "point": "Setpoint", "value": "23.5"})
    assert status == 200 and "wrote press/Setpoint = 23.5" in html.unescape(page), page[-2000:]
    wait_for(lambda: live_value(gateway, "press", "Setpoint") == 23.5, 20,
             message="the written value did not come back")
    # Edit every setting: the form comes filled from the file.
    _, page = admin.request("/console/devices/press/edit")
    assert f'value="{opcua.endpoint}"' in page and 'value="ns=1;s=Setpoint"' in page
    form = dict(re.findall(r'<input (?:type="(?:text|password|hidden)" )?name="([^"]+)"'
                           r'(?: id="[^"]*")? value="([^"]*)"', page))
    form = {k: html.unescape(v) for k, v in form.items() if k != "csrf"}
    page = post(admin, "/console/devices/press/edit", {
        **form, "publishing_interval": "0.2", "security_policy": "None",
        "security_mode": "None", "mode": "subscription", "points.0.type": "float64",
        "points.1.type": "float64", "points.1.writable": "1"})
    page = apply(admin, page, "+publishing_interval = 0.2")
    text = gateway.config_path.read_text()
    assert 'unit = "°C"' in text and "writable = true" in text
    # Disable: the same review, and the list says so.
    page = post(admin, "/console/opcua/press/enabled", {"enabled": "false"})
    apply(admin, page, "+enabled = false")
    wait_for(lambda: "disabled" in admin.request("/console/devices")[1], 10,
             message="not shown disabled")


def test_an_s7_plc_is_probed_added_live_written_and_edited(
        gateway: Outpost, s7: S7Server, admin: HttpSession) -> None:
    device = {"name": "cabinet", "host": "127.0.0.1", "port": str(s7.port), "rack": "0",
              "slot": "1", "poll_interval": "0.2",
              "points.0.name": "temperature", "points.0.address": "DB1.DBD14",
              "points.0.type": "REAL", "points.0.unit": "°C",
              "points.1.name": "setpoint", "points.1.address": "DB1.DBD120",
              "points.1.type": "REAL", "points.1.writable": "1"}
    # A point problem is shown in its row.
    page = post(admin, "/console/s7/probe", {**device, "points.1.type": "INT"})
    assert "2 byte" in error_at(page, "points.1.address"), page[-3000:]
    page = post(admin, "/console/s7/probe", device)
    assert answer(page, "temperature") == "21.5 °C"
    assert answer(page, "setpoint") == "50.0"
    assert "PDU" in page and "plan: 1 request" in page
    added_live_and_written(gateway, admin, "s7", device, ("temperature", 21.5),
                           ("setpoint", 55.5))
    # The device page's own settings and a deadband, changed in place.
    page = post(admin, "/console/devices/cabinet", {
        "host": "127.0.0.1", "port": str(s7.port), "rack": "0", "slot": "1",
        "poll_interval": "0.5", "deadband.temperature": "0.5"})
    apply(admin, page, "+poll_interval = 0.5")
    assert "deadband = 0.5" in gateway.config_path.read_text()
    page = post(admin, "/console/devices/cabinet", {"poll_interval": "inf"})
    assert "finite" in error_at(page, "poll_interval")


def test_a_logix_controller_is_probed_added_live_and_written(
        gateway: Outpost, logix: LogixSimulator, admin: HttpSession) -> None:
    device = {"name": "line", "host": "127.0.0.1", "port": str(logix.port), "path": "1,0",
              "poll_interval": "0.2",
              "points.0.name": "speed", "points.0.tag": "Motor.Speed", "points.0.type": "REAL",
              "points.0.unit": "rpm",
              "points.1.name": "setpoint", "points.1.tag": "Setpoint", "points.1.type": "REAL",
              "points.1.writable": "1",
              "points.2.name": "count", "points.2.tag": "Program:Main.Count",
              "points.2.type": "DINT"}
    # A tag name that cannot be one is shown in its row, before any connection.
    page = post(admin, "/console/enip/probe", {**device, "points.2.tag": "Main Count"})
    assert "not a Logix tag name" in error_at(page, "points.2.tag"), page[-3000:]
    # The probe: the connection, the plan, each point read once by the controller.
    page = post(admin, "/console/enip/probe", device)
    assert answer(page, "speed") == "0.0 rpm" and answer(page, "count") == "0", page[-3000:]
    assert "connection size 4000" in page and "plan: 1 request" in page
    added_live_and_written(gateway, admin, "enip", device, ("speed", 0.0), ("setpoint", 42.5))


def test_a_bacnet_device_behind_a_router_is_probed_added_live_and_written(
        gateway: Outpost, bacnet: NodeDevice, admin: HttpSession) -> None:
    device = {"name": "ahu", "address": bacnet.address, "device_id": "2001", "network": "5",
              "mac": "01", "poll_interval": "0.2",
              "points.0.name": "temperature", "points.0.object": "AI:1",
              "points.1.name": "setpoint", "points.1.object": "AV:1", "points.1.writable": "1"}
    # A device behind a router needs its network and its MAC: refused before any request.
    page = post(admin, "/console/bacnet/probe", {**device, "mac": ""})
    assert "network and mac go together" in page, page[-3000:]
    # The probe: the device's max APDU, the plan, each point read once (the device's units).
    page = post(admin, "/console/bacnet/probe", device)
    assert answer(page, "temperature") == "21.5 °C" and answer(page, "setpoint") == "20.0 °C"
    assert "max APDU" in page and "plan: 1 ReadPropertyMultiple request" in page
    added_live_and_written(gateway, admin, "bacnet", device, ("temperature", 21.5),
                           ("setpoint", 23.5))
