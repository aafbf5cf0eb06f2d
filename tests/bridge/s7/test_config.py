"""S7 configuration: TIA Portal addresses, types that must fit them, errors that say why."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from bridge.s7.address import Address, parse_address
from bridge.s7.config import S7DeviceConfig, S7PointConfig
from outpost.config import parse_config


@pytest.mark.parametrize(("text", "expected"), [
    ("DB10.DBD4", Address("DB", 10, 4, "D")),
    ("db10.dbx2.3", Address("DB", 10, 2, "X", 3)),
    ("%DB1.DBW0", Address("DB", 1, 0, "W")),
    ("DB1.DBB7", Address("DB", 1, 7, "B")),
    ("M0.1", Address("M", 0, 0, "X", 1)),
    ("%MW10", Address("M", 0, 10, "W")),
    ("MD20", Address("M", 0, 20, "D")),
    ("IW64", Address("I", 0, 64, "W")),
    ("EW64", Address("I", 0, 64, "W")),
    ("I 0.0", Address("I", 0, 0, "X", 0)),
    ("Q0.1", Address("Q", 0, 0, "X", 1)),
    ("A4.2", Address("Q", 0, 4, "X", 2)),
    ("QB1", Address("Q", 0, 1, "B")),
    ("T2", Address("T", 0, 2, "T")),
    ("C3", Address("C", 0, 3, "C")),
    ("Z3", Address("C", 0, 3, "C")),
])
def test_addresses_in_tia_portal_notation(text: str, expected: Address) -> None:
    assert parse_address(text) == expected
    assert parse_address(str(expected)) == expected  # printed as TIA writes it


@pytest.mark.parametrize(("text", "reason"), [
    ("DB10.DBX2", "needs its bit"),
    ("DB10.DBW2.1", "only a bit address"),
    ("M0.8", "bits are 0-7"),
    ("DB0.DBW0", "1-65535"),
    ("DB10.DBQ4", "not an S7 address"),
    ("W10", "not an S7 address"),
])
def test_bad_addresses(text: str, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        parse_address(text)


def point(**keys: Any) -> S7PointConfig:
    return S7PointConfig.model_validate({"name": "p", **keys})


@pytest.mark.parametrize(("keys", "reason"), [
    ({"address": "DB1.DBW0"}, "type is required for DB1.DBW0"),
    ({"address": "DB1.DBW0", "type": "REAL"}, "a REAL is 4 byte"),
    ({"address": "DB1.DBD0", "type": "INT"}, "address it as ...W0"),
    ({"address": "DB1.DBW0", "type": "BOOL"}, "a BOOL needs a bit address"),
    ({"address": "DB1.DBX0.1", "type": "INT"}, "only a BOOL"),
    ({"address": "MW2", "type": "COUNTER"}, "addressed T<n> or C<n>"),
    ({"address": "T2", "type": "INT"}, "its type is TIMER"),
    ({"address": "DB1.DBW0", "type": "INT", "length": 4}, "length is for STRING"),
    ({"address": "DB1.DBD0", "type": "REAL", "enum": {0: "a"}}, "enum needs an integer"),
    ({"address": "DB1.DBB0", "type": "STRING", "min": 1}, "min/max need a numeric"),
])
def test_a_type_must_fit_its_address(keys: dict[str, Any], reason: str) -> None:
    with pytest.raises(ValidationError, match=reason):
        point(**keys)


def test_defaults_sizes_and_point_info() -> None:
    assert point(address="DB1.DBX0.0").kind == "BOOL"
    assert point(address="C3").kind == "COUNTER" and point(address="T2").kind == "TIMER"
    assert point(address="DB1.DBB0", type="DT").kind == "DATE_AND_TIME"
    assert point(address="DB1.DBB0", type="STRING").size == 256
    assert point(address="DB1.DBB0", type="WSTRING", length=10).size == 24
    info = point(address="DB1.DBW0", type="INT", writable=True, min=-5).info()
    assert (info.datatype, info.minimum, info.maximum, info.integral) == ("int16", -5, 32767,
                                                                         True)
    assert point(address="DB1.DBD0", type="REAL").info().datatype == "float32"
    assert point(address="DB1.DBB0", type="DTL").info().datatype == "datetime"
    assert point(address="DB1.DBW0", type="INT", enum={0: "off", 1: "on"}).info().options \
        == ("off", "on")


def test_device_tsap_rack_slot_and_checks_across_families() -> None:
    plc = S7DeviceConfig.model_validate({"name": "plc", "host": "10.0.0.5"})
    assert plc.remote_tsap() == 0x0101  # PG, rack 0, slot 1
    s300 = S7DeviceConfig.model_validate({"name": "plc", "host": "plc", "slot": 2,
                                          "connection_type": "op"})
    assert s300.remote_tsap() == 0x0202
    logo = S7DeviceConfig.model_validate({"name": "logo", "host": "plc", "tsap": "02.00"})
    assert logo.remote_tsap() == 0x0200
    with pytest.raises(ValidationError, match="tsap replaces rack and slot"):
        S7DeviceConfig.model_validate({"name": "x", "host": "plc", "tsap": "0x0200",
                                       "slot": 2})
    with pytest.raises(ValidationError, match="not a time zone"):
        S7DeviceConfig.model_validate({"name": "x", "host": "plc", "timezone": "Mars/Base"})
    with pytest.raises(ValidationError, match="duplicate point name"):
        S7DeviceConfig.model_validate({"name": "x", "host": "plc", "points": [
            {"name": "a", "address": "M0.0"}, {"name": "a", "address": "M0.1"}]})
    with pytest.raises(Exception, match=r"s7\.0: device name 'plc' is also an OPC UA device"):
        parse_config({"bridge": {
            "opcua": [{"name": "plc", "endpoint": "opc.tcp://plc:4840"}],
            "s7": [{"name": "plc", "host": "plc"}]}})
