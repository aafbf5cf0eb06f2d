"""The edge node's pure payload code: catalogue datatypes and aliases, values through the
protobuf fields (two's complement for signed integers), birth units, and command refusals."""

from __future__ import annotations

import pytest

from bridge.config import BridgeConfig
from bridge.sparkplug import payload as sp
from bridge.sparkplug.sparkplug_b_pb2 import Payload

BRIDGE = BridgeConfig.model_validate({
    "buses": [{"name": "b", "type": "tcp", "host": "127.0.0.1"}],
    "devices": [
        {"name": "m1", "bus": "b", "unit_id": 1, "address_base": 0, "points": [
            {"name": "u16", "address": 0},
            {"name": "i32", "address": 1, "type": "int32", "writable": True},
            {"name": "scaled", "address": 3, "type": "int16", "scale": 0.1, "unit": "V"},
            {"name": "f32", "address": 4, "type": "float32", "scale": 2.0},
            {"name": "state", "address": 6, "enum": {"0": "off", "1": "on"}, "writable": True},
            {"name": "coil", "table": "coil", "address": 0, "writable": True},
        ]},
        {"name": "m2", "bus": "b", "unit_id": 2, "address_base": 0, "points": [
            {"name": "i64", "address": 0, "type": "int64", "writable": True},
        ]},
    ],
    "serial": [{"name": "gps", "device": "/dev/ttyS9", "parser": "nmea", "points": [
        {"name": "lat", "field": "GGA.2", "type": "coordinate"}]}],
})


def test_catalogue_datatypes_and_unique_aliases() -> None:
    metrics = sp.catalogue(BRIDGE)
    types = {m.name: m.datatype for device in metrics.values() for m in device}
    assert types == {"u16": sp.UINT16, "i32": sp.INT32, "scaled": sp.DOUBLE, "f32": sp.FLOAT,
                     "state": sp.STRING, "coil": sp.BOOLEAN, "i64": sp.INT64,
                     "lat": sp.DOUBLE}
    aliases = [m.alias for device in metrics.values() for m in device]
    assert aliases == list(range(1, 9))
    assert metrics["m1"][2].unit == "V"


@pytest.mark.parametrize(("datatype", "value", "field"), [
    (sp.INT16, -2, "int_value"), (sp.INT32, -(1 << 31), "int_value"),
    (sp.INT64, -5, "long_value"), (sp.UINT16, 65535, "int_value"),
    (sp.UINT64, (1 << 64) - 1, "long_value"), (sp.DOUBLE, -1.5, "double_value"),
    (sp.BOOLEAN, True, "boolean_value"), (sp.STRING, "on", "string_value"),
])
def test_values_round_trip_through_protobuf(datatype: int, value: object, field: str) -> None:
    payload = Payload()
    sp.set_value(payload.metrics.add(), datatype, value)  # type: ignore[arg-type]
    metric = Payload.FromString(payload.SerializeToString()).metrics[0]
    assert metric.WhichOneof("value") == field
    assert sp.get_value(metric, datatype) == value


def test_null_and_nan_are_is_null() -> None:
    payload = Payload()
    sp.set_value(payload.metrics.add(), sp.DOUBLE, None)
    sp.set_value(payload.metrics.add(), sp.DOUBLE, float("nan"))
    assert [m.is_null for m in payload.metrics] == [True, True]


def command(**fields: object) -> Payload.Metric:
    return Payload().metrics.add(**fields)  # type: ignore[arg-type]


def test_commands_by_name_and_alias() -> None:
    m1 = sp.catalogue(BRIDGE)["m1"]
    assert sp.parse_command(command(name="i32", datatype=sp.INT32, int_value=(1 << 32) - 7),
                            m1) == ("i32", -7)
    assert sp.parse_command(command(alias=5, string_value="on"), m1) == ("state", "on")


@pytest.mark.parametrize(("fields", "reason"), [
    ({"name": "nope", "int_value": 1}, "unknown metric 'nope'"),
    ({"alias": 99, "int_value": 1}, "unknown metric 'alias 99'"),
    ({"name": "u16", "int_value": 1}, "'u16' is read-only"),
    ({"name": "i32", "datatype": sp.STRING, "string_value": "1"}, "wrong datatype 12"),
    ({"name": "i32", "double_value": 1.0}, "the value is in double_value"),
    ({"name": "coil", "is_null": True}, "no value"),
])
def test_refused_commands(fields: dict[str, object], reason: str) -> None:
    with pytest.raises(sp.CommandRefusedError, match=reason):
        sp.parse_command(command(**fields), sp.catalogue(BRIDGE)["m1"])


def test_out_of_range_integers_are_refused() -> None:
    m2 = sp.catalogue(BRIDGE)["m2"]
    assert sp.parse_command(command(name="i64", long_value=(1 << 64) - 1), m2) == ("i64", -1)
    uint16 = sp.MetricSpec("x", 1, sp.UINT16, None, True)
    with pytest.raises(sp.CommandRefusedError, match="70000 does not fit"):
        sp.parse_command(command(name="x", int_value=70000), [uint16])


@pytest.mark.parametrize(("configured", "published", "eng_unit"), [
    ("V", "kV", "V"),  # the configuration names the unit: that one
    (None, "°C", "°C"),  # it names none: the one the values carried (a BACnet object's)
    (None, None, None),
])
def test_a_birth_metric_has_the_configured_unit_else_the_published_one(
        configured: str | None, published: str | None, eng_unit: str | None) -> None:
    spec = sp.MetricSpec("t", 1, sp.FLOAT, configured, False)
    payload = Payload()
    sp.birth_metric(payload, spec, 21.5, 0, published)
    properties = dict(zip(payload.metrics[0].properties.keys,
                          payload.metrics[0].properties.values, strict=True))
    assert (properties["engUnit"].string_value if properties else None) == eng_unit
