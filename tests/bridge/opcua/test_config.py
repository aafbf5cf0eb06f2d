"""OPC UA configuration, values and the family-neutral description (pure: no server)."""

from __future__ import annotations

import datetime
import json
from typing import Any

import pytest
from asyncua import ua
from pydantic import ValidationError

from bridge.config import BridgeConfig
from bridge.driver import WriteError
from bridge.homeassistant.config import HomeAssistantConfig
from bridge.homeassistant.discovery import discovery_messages
from bridge.opcua import values
from bridge.opcua.config import OpcUaPointConfig
from bridge.sparkplug import payload as sp
from gateway.base.settings import format_errors

PLC: dict[str, Any] = {"name": "plc", "endpoint": "opc.tcp://plc:4840", "points": [
    {"name": "temp", "node": "ns=3;s=\"DB\".\"Temp\"", "type": "float32", "unit": "°C"},
    {"name": "count", "node": "ns=2;i=7", "type": "uint32"},
    {"name": "run", "node": "/2:PLC/2:Run", "type": "bool", "writable": True},
    {"name": "mode", "node": "ns=2;s=Mode", "enum": {0: "off", 1: "on"}, "writable": True},
    {"name": "speed", "node": "ns=2;s=Speed", "type": "int16", "writable": True, "max": 100},
    {"name": "axes", "node": "ns=2;s=Axes", "type": "json"},
]}


def errors(data: dict[str, Any]) -> list[str]:
    with pytest.raises(ValidationError) as caught:
        BridgeConfig.model_validate(data)
    return format_errors(caught.value, BridgeConfig)


def test_bad_entries_name_their_key_path() -> None:
    found = errors({"opcua": [
        {**PLC, "security_policy": "Basic256Sha256"},
        {"name": "b", "endpoint": "http://plc", "points": []},
        {"name": "c", "endpoint": "opc.tcp://c:4840", "username": "u", "points": []},
        {"name": "d", "endpoint": "opc.tcp://d:4840", "points": [
            {"name": "x", "node": "ns=2;q=1"}, {"name": "y", "node": "/PLC/Temp"},
            {"name": "z", "node": "i=1", "type": "string", "min": 1}]},
    ]})
    text = "\n".join(found)
    assert "security_policy None goes with security_mode None" in text
    assert "opcua.1.endpoint" in text
    assert "username and password go together" in text
    assert "opcua.3.points.0.node" in text and "opcua.3.points.1.node" in text
    assert "browse path step 'PLC' must be 'namespace:BrowseName'" in text
    assert "min/max need a numeric type" in text
    clash = errors({"opcua": [PLC, PLC], "serial": [
        {"name": "plc", "device": "/dev/ttyS1", "pattern": "(?P<v>.)", "points": []}]})
    assert "opcua.0: device name 'plc' is also a serial device" in clash[0]
    assert "opcua.1: duplicate device name 'plc' (also opcua.0)" in clash[0]


def test_points_are_described_for_sparkplug_and_home_assistant() -> None:
    bridge = BridgeConfig.model_validate({"opcua": [PLC]})
    metrics = {m.name: m for m in sp.catalogue(bridge)["plc"]}
    assert metrics["temp"].datatype == sp.FLOAT and metrics["count"].datatype == sp.UINT32
    assert metrics["mode"].datatype == sp.STRING and metrics["axes"].datatype == sp.STRING
    assert metrics["run"].writable and not metrics["temp"].writable
    found = {topic.split("/")[1] + "/" + topic.split("/")[3]: json.loads(body)
             for topic, body in discovery_messages(bridge, HomeAssistantConfig(enabled=True),
                                                   "gw").items()}
    assert found["sensor/plc_temp"]["unit_of_measurement"] == "°C"
    assert found["switch/plc_run"]["command_topic"] == "devices/plc/run/set"
    assert found["select/plc_mode"]["options"] == ["off", "on"]
    speed = found["number/plc_speed"]
    assert (speed["min"], speed["max"], speed["step"]) == (-32768, 100, 1)
    assert found["sensor/plc_temp"]["device"]["model"] == "OPC UA server opc.tcp://plc:4840"


def test_status_codes_map_to_qualities_and_values_to_json() -> None:
    point = OpcUaPointConfig(name="p", node="i=1")
    stamp = datetime.datetime(2026, 11, 27, 14, 3, 0, 125000)
    good = ua.DataValue(ua.Variant(stamp), SourceTimestamp=stamp)
    assert values.point_value(point, good) == ("2026-11-27T14:03:00.125000Z", "good")
    assert values.timestamp_ms(good, 0) == 1795788180125
    uncertain = ua.DataValue(ua.Variant(1.5),
                             StatusCode=ua.StatusCode(ua.StatusCodes.UncertainLastUsableValue))
    assert values.point_value(point, uncertain) == (1.5, "uncertain")
    bad = ua.DataValue(ua.Variant(1.5), StatusCode=ua.StatusCode(ua.StatusCodes.BadSensorFailure))
    assert values.point_value(point, bad) == (None, "bad")
    assert values.timestamp_ms(ua.DataValue(ua.Variant(1)), 42) == 42
    assert values.to_json([1, ua.LocalizedText("x"), b"\x01\x02"]) == [1, "x", "0102"]
    assert values.to_json(ua.Argument(Name="a", ValueRank=-1))["Name"] == "a"


@pytest.mark.parametrize(("kind", "value", "reason"), [
    (ua.VariantType.Int16, 40000, "out of range for int16"),
    (ua.VariantType.Int16, 1.5, "whole number"),
    (ua.VariantType.Int16, 101, "above max 100"),
    (ua.VariantType.Boolean, 1, "expected true or false"),
    (ua.VariantType.Double, "1", "expected a number"),
    (ua.VariantType.String, 1, "expected a string"),
    (ua.VariantType.DateTime, "yesterday", "not an ISO 8601"),
    (ua.VariantType.ByteString, "00", "not supported"),
])
def test_writes_are_checked_against_the_node_type(kind: ua.VariantType, value: object,
                                                  reason: str) -> None:
    point = OpcUaPointConfig(name="p", node="i=1", writable=True, max=100)
    with pytest.raises(WriteError, match=reason):
        values.encode(point, kind, value)


def test_writes_that_fit_become_variants_of_the_node_type() -> None:
    point = OpcUaPointConfig(name="p", node="i=1", writable=True, enum={2: "auto"})
    assert values.encode(point, ua.VariantType.Int32, "auto") == ua.Variant(2, ua.VariantType.Int32)
    assert values.encode(point, ua.VariantType.Float, 3) == ua.Variant(3.0, ua.VariantType.Float)
    when = values.encode(point.model_copy(update={"enum": None}), ua.VariantType.DateTime,
                         "2026-11-27T14:03:00Z")
    assert when.Value == datetime.datetime(2026, 11, 27, 14, 3, tzinfo=datetime.UTC)
