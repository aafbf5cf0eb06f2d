"""S7 values: every type written and read back through the codec, and what each refuses."""

from __future__ import annotations

import re
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from bridge.driver import WriteError
from bridge.s7 import values

UTC = ZoneInfo("UTC")
BERLIN = ZoneInfo("Europe/Berlin")


@pytest.mark.parametrize(("kind", "value", "raw"), [
    ("BYTE", 171, b"\xab"), ("SINT", -5, b"\xfb"), ("WORD", 0xBEEF, b"\xbe\xef"),
    ("INT", -1234, b"\xfb\x2e"), ("DWORD", 0xDEADBEEF, b"\xde\xad\xbe\xef"),
    ("DINT", -2, b"\xff\xff\xff\xfe"), ("REAL", 21.5, b"\x41\xac\x00\x00"),
    ("LREAL", 1.0, b"\x3f\xf0" + bytes(6)), ("ULINT", 2**64 - 1, b"\xff" * 8),
    ("CHAR", "Z", b"Z"), ("COUNTER", 42, b"\x00\x42"), ("TIMER", 12.3, b"\x11\x23"),
])
def test_values_round_trip(kind: str, value: Any, raw: bytes) -> None:
    data, written = values.encode(kind, 254, value, UTC)
    assert data == raw and written == value
    assert values.decode(kind, raw, None, UTC) == (value, "good")


def test_strings_dates_and_bits() -> None:
    data, _ = values.encode("STRING", 10, "abc", UTC)
    assert data == b"\x0a\x03abc"
    assert values.decode("STRING", data + bytes(7), None, UTC) == ("abc", "good")
    data, _ = values.encode("WSTRING", 4, "☃x", UTC)
    assert data == b"\x00\x04\x00\x02\x26\x03\x00x"
    assert values.decode("WSTRING", data + bytes(4), None, UTC) == ("☃x", "good")
    # DT in the PLC's time zone, published in UTC
    data, written = values.encode("DATE_AND_TIME", 0, "2024-07-01T10:00:00.250Z", BERLIN)
    assert data == bytes([0x24, 0x07, 0x01, 0x12, 0x00, 0x00, 0x25, 0x02])  # 12:00 local, Mon
    assert written == "2024-07-01T10:00:00.250Z"
    assert values.decode("DATE_AND_TIME", data, None, BERLIN)[0] == written
    data, _ = values.encode("DTL", 0, "2024-07-01T12:00:00.5", UTC)  # naive: the PLC's time
    assert values.decode("DTL", data, None, UTC)[0] == "2024-07-01T12:00:00.500Z"
    assert values.decode("BOOL", b"\x08", 3, UTC) == (True, "good")
    assert values.decode("BOOL", b"\x08", 2, UTC) == (False, "good")
    assert values.encode("BOOL", 0, True, UTC) == (b"\x01", True)


def test_bad_bytes_are_bad() -> None:
    assert values.decode("REAL", b"\x7f\xc0\x00\x00", None, UTC) == (None, "bad")  # NaN
    assert values.decode("DATE_AND_TIME", b"\x24\x13" + bytes(6), None, UTC) == (None, "bad")
    assert values.decode("COUNTER", b"\x00\xaa", None, UTC) == (None, "bad")
    assert values.labelled(3, "good", {1: "on"}) == ("3", "uncertain")
    assert values.labelled(1, "good", {1: "on"}) == ("on", "good")


@pytest.mark.parametrize(("kind", "value", "reason"), [
    ("INT", 40000, "out of range for INT"), ("INT", 1.5, "whole number"),
    ("BYTE", "1", "expected a number"), ("REAL", float("inf"), "not a finite number"),
    ("REAL", 1e39, "out of range for REAL"), ("BOOL", 1, "expected true or false"),
    ("STRING", "€", "Latin-1"), ("STRING", "x" * 11, "do not fit STRING[10]"),
    ("WSTRING", "x" * 11, "do not fit WSTRING[10]"), ("CHAR", "ab", "one character"),
    ("DTL", "yesterday", "not an ISO 8601"), ("DATE_AND_TIME", "2100-01-01T00:00:00Z",
                                               "1990-2089"),
    ("COUNTER", 1000, "out of range for COUNTER"), ("TIMER", 10000, "out of range"),
])
def test_writes_that_do_not_fit_are_refused(kind: str, value: Any, reason: str) -> None:
    with pytest.raises(WriteError, match=re.escape(reason)):
        values.encode(kind, 10, value, UTC)
    with pytest.raises(WriteError, match="above max 5"):
        values.encode("INT", 0, 6, UTC, maximum=5)
