"""Discovery configs as Home Assistant reads them: value templates rendered with Jinja2 for
the payloads the bridge publishes (bridge/report.py), the gateway's own entities for its
`$SYS` reports, a tombstone's availability."""

from __future__ import annotations

import json
from typing import Any

import pytest

from bridge.config import BridgeConfig
from bridge.homeassistant.config import HomeAssistantConfig
from bridge.homeassistant.discovery import discovery_messages, tombstone
from bridge.homeassistant.gateway import GatewayInfo, gateway_state
from bridge.point import Value
from bridge.report import point_payload
from tests.bridge.homeassistant.ha import available, state

BRIDGE = BridgeConfig.model_validate({
    "buses": [{"name": "b", "type": "tcp", "host": "127.0.0.1"}],
    "devices": [{"name": "plc", "bus": "b", "unit_id": 1, "address_base": 0, "points": [
        {"name": "alarm", "table": "discrete", "address": 0},
        {"name": "relay", "table": "coil", "address": 1, "writable": True},
        {"name": "trip", "address": 3, "type": "bit", "bit": 2},
        {"name": "level", "address": 4, "unit": "cm"},
        {"name": "mode", "address": 5, "enum": {"0": "off", "1": "auto"}},
    ]}],
    "serial": [{"name": "gps", "device": "/dev/ttyS9", "parser": "nmea", "points": [
        {"name": "fix", "field": "GGA.6", "type": "bool"}]}],
})


def configs(info: GatewayInfo | None = None) -> dict[str, tuple[str, dict[str, Any]]]:
    """Object id -> (component, config)."""
    raw = discovery_messages(BRIDGE, HomeAssistantConfig(enabled=True), "gw", info)
    return {topic.split("/")[3]: (topic.split("/")[1], json.loads(payload))
            for topic, payload in raw.items()}


def reading(value: Value, quality: str = "good") -> bytes:
    return point_payload(value, "null", 1_700_000_000_000, quality)


@pytest.mark.parametrize("object_id", ["plc_alarm", "plc_relay", "plc_trip", "gps_fix"])
def test_a_bool_reads_on_off_and_unknown_when_null(object_id: str) -> None:
    component, config = configs()[object_id]
    assert component in ("binary_sensor", "switch")
    assert state(component, config, reading(True)) == "on"
    assert state(component, config, reading(False)) == "off"
    assert state(component, config, reading(None, "bad")) == "unknown"


def test_numbers_and_labels_read_their_value_and_unknown_when_null() -> None:
    found = configs()
    for object_id, value, shown in (("plc_level", 42, "42"), ("plc_mode", "auto", "auto")):
        component, config = found[object_id]
        assert state(component, config, reading(value)) == shown
        assert state(component, config, reading(None, "bad")) == "unknown"


def test_the_gateway_entities_read_its_reports() -> None:
    found = configs(GatewayInfo("1.2.3", uplink=True))
    status = found["gateway-status"][1]
    assert state("binary_sensor", status, gateway_state(GatewayInfo("1.2.3"), "gw", True)) == "on"
    assert state("binary_sensor", status,
                 gateway_state(GatewayInfo("1.2.3"), "gw", False)) == "off"
    assert state("sensor", found["gateway-version"][1],
                 gateway_state(GatewayInfo("1.2.3"), "gw", True)) == "1.2.3"
    report = json.dumps({"connected": True, "backlog_messages": 17}).encode()
    assert state("binary_sensor", found["gateway-uplink"][1], report) == "on"
    assert state("sensor", found["gateway-backlog"][1], report) == "17"
    # Every bridged device is connected via the gateway, and the gateway is a device.
    gateway = {tuple(config["device"]["identifiers"]) for object_id, (_, config)
               in found.items() if object_id.startswith("gateway-")}
    vias = {config["device"].get("via_device") for object_id, (_, config) in found.items()
            if not object_id.startswith("gateway-")}
    assert gateway == {("gw",)} and vias == {"gw"}
    assert found["gateway-status"][1]["device"]["sw_version"] == "1.2.3"
    assert "gateway-uplink" not in configs(GatewayInfo("1.2.3", uplink=False))


def test_a_tombstone_is_unavailable_whatever_its_topic_says() -> None:
    _, config = configs()["plc_level"]
    dead = json.loads(tombstone(json.dumps(config).encode()))
    assert dead["unique_id"] == config["unique_id"]  # the same entity
    for payload in (b"online", b"offline", gateway_state(GatewayInfo(), "gw", True)):
        assert available(dead, payload) is False
    assert available(config, b"online") is True
    assert tombstone(b"not json") == b""
