"""`[alarms]`: definitions checked with errors that name the key and the problem."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.base.settings import ConfigError
from outpost.config import Config, parse_config

BRIDGE = {"buses": [{"name": "sim", "type": "tcp", "host": "127.0.0.1", "port": 5020}],
          "devices": [{"name": "boiler", "bus": "sim", "unit_id": 1, "address_base": 0, "points": [
              {"name": "temp", "address": 0}, {"name": "trip", "address": 1, "table": "coil"}]}]}


def load(*rules: dict[str, Any]) -> Config:
    return parse_config({"bridge": BRIDGE, "alarms": {"rules": list(rules)}})


def errors(*rules: dict[str, Any]) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        load(*rules)
    return caught.value.errors


def test_a_valid_definition_of_each_kind() -> None:
    config = load({"name": "hot", "point": "boiler/temp", "kind": "high", "limit": 90,
                   "deadband": 2, "on_delay": 5, "severity": "high"},
                  {"name": "ramp", "point": "boiler/temp", "kind": "rate", "limit": 0.5,
                   "window": 30},
                  {"name": "frozen", "point": "boiler/temp", "kind": "stale", "stale_after": 60},
                  {"name": "gone", "point": "boiler", "kind": "offline"},
                  {"name": "trip", "point": "boiler/trip", "kind": "fault"})
    assert [r.kind for r in config.alarms.rules] == ["high", "rate", "stale", "offline", "fault"]
    assert config.alarms.rules[0].severity == "high"


@pytest.mark.parametrize(("rule", "message"), [
    ({"point": "boiler/pressure", "kind": "fault"},
     "device 'boiler' has no point 'pressure'"),
    ({"point": "chiller/temp", "kind": "fault"}, "no device 'chiller'"),
    ({"point": "boiler/temp", "kind": "too-high", "limit": 1}, "kind: Input should be"),
    ({"point": "boiler/temp", "kind": "high"}, "limit: required for kind 'high'"),
    ({"point": "boiler/temp", "kind": "high", "limit": float("inf")}, "finite number"),
    ({"point": "boiler/temp", "kind": "low", "limit": 1, "deadband": float("nan")},
     "finite number"),
    ({"point": "boiler/temp", "kind": "fault", "limit": 3}, "kind 'fault' has no limit"),
    ({"point": "boiler/temp", "kind": "stale"}, "stale_after: required"),
    ({"point": "boiler/temp", "kind": "rate", "limit": -1}, "must be above 0"),
    ({"point": "boiler/temp", "kind": "fault", "deadband": 1}, "deadband: only for"),
    ({"point": "boiler", "kind": "high", "limit": 1}, "names a device"),
    ({"point": "boiler/temp/x", "kind": "fault"}, "expected 'device/point'"),
    ({"point": "boiler/temp", "kind": "high", "limit": 1, "on_delay": -1},
     "greater than or equal to 0"),
    ({"point": "boiler/temp", "kind": "fault", "severity": "urgent"}, "severity"),
])
def test_bad_definitions_are_refused_naming_the_problem(rule: dict[str, Any],
                                                        message: str) -> None:
    found = errors({"name": "x", **rule})
    assert any(message in line and line.startswith("alarms") for line in found), found


def test_names_are_one_topic_level_and_unique() -> None:
    assert any("rules.0.name" in e for e in errors({"name": "a/b", "point": "boiler/trip",
                                                    "kind": "fault"}))
    twice = {"name": "a", "point": "boiler/trip", "kind": "fault"}
    assert any("already rules.0's" in e for e in errors(twice, twice))
