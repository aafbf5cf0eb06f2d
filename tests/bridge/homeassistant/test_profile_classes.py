"""The shipped profiles as Home Assistant sees them: energy counters carry the classes the
Energy dashboard needs, and a device overrides a profile point's presentation by naming it,
without copying the profile and without an "overlaps" refusal."""

from __future__ import annotations

import json
from typing import Any

import pytest

from bridge.homeassistant.discovery import discovery_messages
from bridge.modbus.config import profile_names
from outpost.config import Config, ConfigError, parse_config

BUS = {"name": "b", "type": "tcp", "host": "127.0.0.1"}
METERS = ["carlo-gavazzi-em24", "eastron-sdm120", "eastron-sdm630"]


def config(*devices: dict[str, Any]) -> Config:
    return parse_config({"homeassistant": {"enabled": True},
                         "bridge": {"buses": [BUS], "devices": list(devices)}})


def sensors(loaded: Config) -> dict[str, dict[str, Any]]:
    """`<device>_<point>` -> the sensor config."""
    raw = discovery_messages(loaded.bridge, loaded.homeassistant, "gw")
    return {topic.split("/")[3]: json.loads(payload) for topic, payload in raw.items()
            if topic.split("/")[1] == "sensor"}


@pytest.mark.parametrize("profile", METERS)
def test_energy_counters_fit_the_energy_dashboard(profile: str) -> None:
    assert profile in profile_names()
    found = sensors(config({"name": "m", "bus": "b", "unit_id": 1, "map": f"profile:{profile}"}))
    for energy in ("m_import_energy", "m_export_energy"):
        entity = found[energy]
        assert (entity["device_class"], entity["state_class"],
                entity["unit_of_measurement"]) == ("energy", "total_increasing", "kWh"), energy
    assert (found["m_power"]["device_class"], found["m_power"]["state_class"]) == (
        "power", "measurement")
    assert found["m_import_reactive_energy"]["state_class"] == "total_increasing"


def test_a_device_overrides_a_profile_points_presentation() -> None:
    loaded = config({"name": "th", "bus": "b", "unit_id": 1, "map": "profile:xy-md02",
                     "points": [
                         {"name": "humidity", "unit": "%", "device_class": "humidity"},
                         {"name": "temperature", "heartbeat": 5, "label": "Cellar"},
                         {"name": "battery", "address": 9, "unit": "V"},
                     ]})
    points = {p.name: p for p in loaded.bridge.devices[0].points}
    assert list(points) == ["temperature", "humidity", "battery"]  # the profile's order first
    humidity = points["humidity"]
    assert (humidity.address, humidity.table, humidity.scale) == (2, "input", 0.1)  # kept
    assert (humidity.unit, humidity.device_class) == ("%", "humidity")
    assert points["temperature"].heartbeat == 5
    assert points["temperature"].device_class == "temperature"  # the profile's, kept
    entity = sensors(loaded)["th_humidity"]
    assert (entity["device_class"], entity["unit_of_measurement"]) == ("humidity", "%")
    temperature = sensors(loaded)["th_temperature"]
    assert (temperature["name"], temperature["state_topic"]) == ("Cellar",
                                                                 "devices/th/temperature")


def test_an_override_of_a_point_the_profile_lacks_is_refused_with_a_hint() -> None:
    with pytest.raises(ConfigError) as caught:
        config({"name": "th", "bus": "b", "unit_id": 1, "map": "profile:xy-md02",
                "points": [{"name": "humidty", "unit": "%"}]})
    assert any("bridge.devices.0" in line and "points.0 'humidty': no address, and map "
               "profile:xy-md02 has no point of that name to override (did you mean "
               "'humidity'?)" in line for line in caught.value.errors), caught.value.errors


def test_an_override_is_checked_like_any_point() -> None:
    with pytest.raises(ConfigError) as caught:
        config({"name": "th", "bus": "b", "unit_id": 1, "map": "profile:xy-md02",
                "points": [{"name": "humidity", "state_class": "sometimes"}]})
    assert any("bridge.devices.0.points.1.state_class" in line
               for line in caught.value.errors), caught.value.errors
