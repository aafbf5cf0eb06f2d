"""The `aggregate` / `aggregate_send` point keys: every family takes them, bad ones are named."""

from __future__ import annotations

import json
from typing import Any

import pytest

from bridge.aggregate.points import aggregate_payload, aggregated_points, sample_value
from bridge.aggregate.window import Window
from gateway.base.settings import ConfigError
from outpost.config import parse_config


def bridge_section(modbus_point: dict[str, Any], serial_point: dict[str, Any] | None = None
                   ) -> dict[str, Any]:
    return {"bridge": {
        "buses": [{"name": "sim", "type": "tcp", "host": "127.0.0.1", "port": 5020}],
        "devices": [{"name": "meter", "bus": "sim", "unit_id": 1, "address_base": 0,
                     "points": [{"name": "power", "address": 0, "unit": "kW",
                                 **modbus_point}]}],
        "serial": [{"name": "scale", "device": "/dev/null", "pattern": "W=(?P<w>[0-9]+)",
                    "points": [{"name": "weight", "field": "w", **(serial_point or {})}]}],
    }}


def test_points_of_any_family_send_aggregates() -> None:
    config = parse_config(bridge_section({"aggregate": "1m", "aggregate_send": "instead"},
                                         {"aggregate": "15m"}))
    found = {(p.device, p.point): p for p in aggregated_points(config.bridge)}
    power, weight = found["meter", "power"], found["scale", "weight"]
    assert (power.window, power.width_ms, power.instead, power.unit) == ("1m", 60_000, True, "kW")
    assert (weight.window, weight.width_ms, weight.instead) == ("15m", 900_000, False)
    assert power.topic("devices") == "devices/meter/power/agg/1m"


@pytest.mark.parametrize("keys, message", [
    ({"aggregate": "7m"}, "points.0.aggregate: Value error, window '7m' must divide a day"),
    ({"aggregate": "25h"}, "window '25h' must divide a day (24h at most)"),
    ({"aggregate": "1 m"}, "'1 m' is not a window: a whole number and s, m or h"),
    ({"aggregate": "0s"}, "'0s' is not a window"),
    ({"aggregate_send": "instead"},
     "points.0: Value error, aggregate_send = 'instead' needs aggregate"),
    ({"aggregate": "1m", "aggregate_send": "only"},
     "points.0.aggregate_send: Input should be 'beside' or 'instead'"),
])
def test_bad_aggregate_keys_are_named(keys: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(bridge_section(keys))
    assert message in str(info.value)
    assert "bridge.devices.0.points.0" in str(info.value)


def test_payload_and_samples() -> None:
    window = Window(60_000, 120_000, 12.5, 10.0, 15.0, 11.0, 14.0, 58, 60_000, False)
    assert json.loads(aggregate_payload(window, "kW")) == {
        "ts": 120_000, "start": 60_000, "end": 120_000, "mean": 12.5, "min": 10, "max": 15,
        "first": 11, "last": 14, "count": 58, "covered_ms": 60_000, "unit": "kW",
        "partial": False}
    empty = Window(0, 60_000, None, None, None, None, None, 0, 0, True)
    assert json.loads(aggregate_payload(empty, None))["mean"] is None
    assert sample_value(b'{"value":3,"unit":null,"ts":5,"quality":"good"}') == (5, 3.0)
    assert sample_value(b'{"value":true,"unit":null,"ts":5,"quality":"good"}') == (5, 1.0)
    assert sample_value(b'{"value":3,"unit":null,"ts":5,"quality":"bad"}') == (5, None)
    assert sample_value(b'{"value":"on","unit":null,"ts":5,"quality":"good"}') == (5, None)
    assert sample_value(b"offline") is None
