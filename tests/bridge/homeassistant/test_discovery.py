"""The pure discovery messages: component per point kind, units only on numbers, ids."""

from __future__ import annotations

import json

from bridge.config import BridgeConfig
from bridge.homeassistant.config import HomeAssistantConfig
from bridge.homeassistant.discovery import BOOL_STATE, discovery_messages

BRIDGE = BridgeConfig.model_validate({
    "prefix": "site/devs",
    "buses": [{"name": "b", "type": "tcp", "host": "127.0.0.1"}],
    "devices": [{"name": "plc.1", "bus": "b", "unit_id": 1, "address_base": 0,
                 "description": "Pump PLC", "points": [
                     {"name": "state", "address": 0, "enum": {"0": "off"}, "unit": "x"},
                     {"name": "label", "address": 1, "type": "string", "count": 2},
                     {"name": "trip", "address": 3, "type": "bit", "bit": 2},
                     {"name": "speed", "address": 4, "type": "int16", "scale": 0.5,
                      "offset": 10, "writable": True, "unit": "rpm"},
                 ]}],
    "serial": [{"name": "gps", "device": "/dev/ttyS9", "parser": "nmea", "points": [
        {"name": "lat", "field": "GGA.2", "type": "coordinate", "unit": "deg"},
        {"name": "fix", "field": "GGA.6", "type": "bool"}]}],
})


def messages() -> dict[str, dict[str, object]]:
    raw = discovery_messages(BRIDGE, HomeAssistantConfig(enabled=True), "my gateway")
    return {topic: json.loads(payload) for topic, payload in raw.items()}


def test_components_units_and_ids() -> None:
    found = messages()
    assert sorted(found) == [
        "homeassistant/binary_sensor/my_gateway/gateway-status/config",
        "homeassistant/binary_sensor/my_gateway/gps_fix/config",
        "homeassistant/binary_sensor/my_gateway/plc_1_trip/config",
        "homeassistant/number/my_gateway/plc_1_speed/config",
        "homeassistant/sensor/my_gateway/gateway-version/config",
        "homeassistant/sensor/my_gateway/gps_lat/config",
        "homeassistant/sensor/my_gateway/plc_1_label/config",
        "homeassistant/sensor/my_gateway/plc_1_state/config",
    ]
    state = found["homeassistant/sensor/my_gateway/plc_1_state/config"]
    assert "unit_of_measurement" not in state  # a text sensor: HA wants no unit there
    assert state["state_topic"] == "site/devs/plc.1/state"
    assert state["device"] == {"identifiers": ["my_gateway_plc_1"], "name": "plc.1",
                               "manufacturer": "unknown", "model": "Pump PLC",
                               "via_device": "my_gateway"}
    speed = found["homeassistant/number/my_gateway/plc_1_speed/config"]
    assert (speed["min"], speed["max"], speed["step"]) == (-16374.0, 16393.5, 0.001)
    assert speed["unit_of_measurement"] == "rpm"
    assert speed["command_topic"] == "site/devs/plc.1/speed/set"
    lat = found["homeassistant/sensor/my_gateway/gps_lat/config"]
    assert lat["unit_of_measurement"] == "deg"
    assert lat["device"]["model"] == "serial device on /dev/ttyS9"  # type: ignore[index]
    trip = found["homeassistant/binary_sensor/my_gateway/plc_1_trip/config"]
    assert trip["value_template"] == BOOL_STATE
    assert "command_topic" not in trip
