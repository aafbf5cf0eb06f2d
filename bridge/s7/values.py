"""S7 data types: their sizes, bytes to point values and back, write checks (pure).

Every S7 value is big-endian. BOOL is one bit of a byte; the integers, REAL (IEEE 754 single)
and LREAL (double) are as in any PLC; STRING[n] is a byte with n, a byte with the actual
length and n Latin-1 characters; WSTRING[n] is a word with n, a word with the actual length
and n UTF-16 units; DATE_AND_TIME (DT) is eight BCD bytes (year 1990-2089, month, day, hour,
minute, second, milliseconds in three digits, weekday); DTL is twelve binary bytes (year as a
word, month, day, weekday, hour, minute, second, nanoseconds as a double word); a counter is
a word with three BCD digits (0-999); a timer is an S5TIME word (time base in bits 12-13: 10
ms, 100 ms, 1 s, 10 s; three BCD digits), published in seconds.

DT and DTL carry no time zone: they are read and written in the device's `timezone` (a PLC's
clock is usually local time) and published as ISO 8601 UTC (`2024-03-15T13:45:30.123Z`).
A non-finite REAL/LREAL, a DT/DTL that is no date, or BCD digits above 9 are `bad` (null).
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Final
from zoneinfo import ZoneInfo

from bridge.driver import WriteError, written_time
from bridge.point import BAD, GOOD, UNCERTAIN, Value


@dataclass(frozen=True, slots=True)
class S7Type:
    """A data type: its size in bytes (strings: without their length), the neutral datatype
    it is published as, its struct format (numbers) and, for integers, its range."""

    size: int
    datatype: str
    fmt: str = ""
    low: int | None = None
    high: int | None = None


def _int(size: int, datatype: str, fmt: str, signed: bool) -> S7Type:
    bits = size * 8
    low, high = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
    return S7Type(size, datatype, fmt, low, high)


TYPES: Final[dict[str, S7Type]] = {
    "BOOL": S7Type(1, "bool"),
    "BYTE": _int(1, "uint8", ">B", False), "USINT": _int(1, "uint8", ">B", False),
    "SINT": _int(1, "int8", ">b", True), "CHAR": S7Type(1, "string"),
    "WORD": _int(2, "uint16", ">H", False), "UINT": _int(2, "uint16", ">H", False),
    "INT": _int(2, "int16", ">h", True),
    "DWORD": _int(4, "uint32", ">I", False), "UDINT": _int(4, "uint32", ">I", False),
    "DINT": _int(4, "int32", ">i", True), "REAL": S7Type(4, "float32", ">f"),
    "LWORD": _int(8, "uint64", ">Q", False), "ULINT": _int(8, "uint64", ">Q", False),
    "LINT": _int(8, "int64", ">q", True), "LREAL": S7Type(8, "float64", ">d"),
    "STRING": S7Type(2, "string"), "WSTRING": S7Type(4, "string"),
    "DATE_AND_TIME": S7Type(8, "datetime"), "DTL": S7Type(12, "datetime"),
    "COUNTER": S7Type(2, "uint16", low=0, high=999), "TIMER": S7Type(2, "float64"),
}
ALIASES: Final = {"DT": "DATE_AND_TIME"}
INTEGERS: Final = frozenset(name for name, t in TYPES.items() if t.low is not None)
FLOATS: Final = frozenset({"REAL", "LREAL"})
_S5_BASES: Final = (0.01, 0.1, 1.0, 10.0)  # seconds per unit of S5TIME's time bases 0..3
MAX_TIMER_SECONDS: Final = 9990.0


def size_of(kind: str, length: int) -> int:
    """Bytes a value of `kind` takes (STRING[length], WSTRING[length] with their header)."""
    if kind == "STRING":
        return 2 + length
    if kind == "WSTRING":
        return 4 + 2 * length
    return TYPES[kind].size


def _bcd(byte: int) -> int:
    high, low = byte >> 4, byte & 0x0F
    if high > 9 or low > 9:
        raise ValueError(f"0x{byte:02X} is not BCD")
    return high * 10 + low


def _to_bcd(number: int) -> int:
    return (number // 10 % 10) << 4 | number % 10


def decode(kind: str, data: bytes, bit: int | None, zone: ZoneInfo) -> tuple[Value, str]:
    """The value and quality of `data` (exactly the point's bytes) as a `kind`."""
    try:
        return _decode(kind, data, bit, zone), GOOD
    except (ValueError, OverflowError):
        return None, BAD


def _decode(kind: str, data: bytes, bit: int | None, zone: ZoneInfo) -> Value:
    spec = TYPES[kind]
    if kind == "BOOL":
        return bool(data[0] >> (bit or 0) & 1)
    if spec.fmt:
        value = struct.unpack(spec.fmt, data)[0]
        if kind in FLOATS and not math.isfinite(value):
            raise ValueError("not a finite number")
        return value  # type: ignore[no-any-return]
    if kind == "CHAR":
        return data[:1].decode("latin-1")
    if kind == "STRING":
        return data[2:2 + min(data[1], data[0], len(data) - 2)].decode("latin-1")
    if kind == "WSTRING":
        maximum, actual = struct.unpack(">HH", data[:4])
        units = min(actual, maximum, (len(data) - 4) // 2)
        return data[4:4 + 2 * units].decode("utf-16-be", errors="replace")
    if kind == "DATE_AND_TIME":
        year = _bcd(data[0])
        stamp = datetime(1900 + year if year >= 90 else 2000 + year, _bcd(data[1]),
                         _bcd(data[2]), _bcd(data[3]), _bcd(data[4]), _bcd(data[5]),
                         (_bcd(data[6]) * 10 + _bcd(data[7] >> 4)) * 1000,
                         tzinfo=zone)
        return _iso(stamp)
    if kind == "DTL":
        year, month, day, _, hour, minute, second, nanos = struct.unpack(">HBBBBBBI", data)
        stamp = datetime(year, month, day, hour, minute, second, nanos // 1000, tzinfo=zone)
        return _iso(stamp)
    if kind == "COUNTER":
        word = struct.unpack(">H", data)[0]
        return _bcd(word >> 8 & 0x0F) * 100 + _bcd(word & 0xFF)
    # TIMER: S5TIME
    word = struct.unpack(">H", data)[0]
    units = _bcd(word >> 8 & 0x0F) * 100 + _bcd(word & 0xFF)
    return round(units * _S5_BASES[word >> 12 & 0x03], 2)


def _iso(stamp: datetime) -> str:
    return stamp.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def labelled(value: Value, quality: str, enum: dict[int, str] | None) -> tuple[Value, str]:
    """An integer as its enum label (an integer without one: its number, uncertain)."""
    if enum is None or quality != GOOD or not isinstance(value, int) \
            or isinstance(value, bool):
        return value, quality
    if value in enum:
        return enum[value], quality
    return str(value), UNCERTAIN


def encode(kind: str, length: int, value: object, zone: ZoneInfo,
           minimum: float | None = None, maximum: float | None = None,
           enum: dict[int, str] | None = None) -> tuple[bytes, Value]:
    """The bytes that write `value` as a `kind` (a BOOL: one byte, 0 or 1, for a bit write)
    and the value as it will read back; WriteError with the reason when it does not fit."""
    if enum is not None and isinstance(value, str):
        codes = {label: code for code, label in enum.items()}
        if value not in codes:
            raise WriteError(f"{value!r} is not one of {sorted(codes)}")
        value = codes[value]
    spec = TYPES[kind]
    if kind == "BOOL":
        if not isinstance(value, bool):
            raise WriteError(f"expected true or false, got {value!r}")
        return bytes([value]), value
    if spec.fmt or kind in ("COUNTER", "TIMER"):
        number = _number(kind, value, minimum, maximum)
        if kind == "COUNTER":
            count = int(number)
            return bytes([_to_bcd(count // 100), _to_bcd(count % 100)]), count
        if kind == "TIMER":
            return _s5time(number)
        written: Value = int(number) if kind in INTEGERS else float(number)
        if kind == "REAL":
            written = struct.unpack(">f", struct.pack(">f", number))[0]
        return struct.pack(spec.fmt, written), written
    if kind in ("CHAR", "STRING", "WSTRING"):
        return _text(kind, length, value)
    return _stamp(kind, value, zone)


def _number(kind: str, value: object, minimum: float | None,
            maximum: float | None) -> float | int:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise WriteError(f"expected a number, got {value!r}")
    if not math.isfinite(value):
        raise WriteError(f"{value!r} is not a finite number")
    spec = TYPES[kind]
    if spec.low is not None and spec.high is not None:
        if isinstance(value, float) and not value.is_integer():
            raise WriteError(f"expected a whole number for {kind}, got {value!r}")
        value = int(value)
        if not spec.low <= value <= spec.high:
            raise WriteError(f"{value} is out of range for {kind} ({spec.low}..{spec.high})")
    elif kind == "REAL" and abs(value) > 3.4028234663852886e38:
        raise WriteError(f"{value!r} is out of range for REAL")
    elif kind == "TIMER" and not 0 <= value <= MAX_TIMER_SECONDS:
        raise WriteError(f"{value!r} is out of range for a timer (0..{MAX_TIMER_SECONDS:g} s)")
    if minimum is not None and value < minimum:
        raise WriteError(f"{value} is below min {minimum:g}")
    if maximum is not None and value > maximum:
        raise WriteError(f"{value} is above max {maximum:g}")
    return value


def _s5time(seconds: float) -> tuple[bytes, Value]:
    """The finest S5TIME time base that holds `seconds` in 0..999 units (rounded)."""
    for base, unit in enumerate(_S5_BASES):
        units = round(seconds / unit)
        if units <= 999:
            word = base << 12 | _to_bcd(units // 100) << 8 | _to_bcd(units % 100)
            return struct.pack(">H", word), round(units * unit, 2)
    raise WriteError(f"{seconds!r} is out of range for a timer")  # (checked before)


def _text(kind: str, length: int, value: object) -> tuple[bytes, Value]:
    if not isinstance(value, str):
        raise WriteError(f"expected a string, got {value!r}")
    if kind == "WSTRING":
        data = value.encode("utf-16-be")
        if len(data) // 2 > length:
            raise WriteError(f"{len(data) // 2} characters do not fit WSTRING[{length}]")
        return struct.pack(">HH", length, len(data) // 2) + data, value
    try:
        data = value.encode("latin-1")
    except UnicodeEncodeError:
        raise WriteError(f"{value!r} has characters that a {kind} (Latin-1) cannot hold; "
                         f"use a WSTRING") from None
    if kind == "CHAR":
        if len(data) != 1:
            raise WriteError(f"expected one character, got {value!r}")
        return data, value
    if len(data) > length:
        raise WriteError(f"{len(data)} characters do not fit STRING[{length}]")
    return bytes([length, len(data)]) + data, value


def _stamp(kind: str, value: object, zone: ZoneInfo) -> tuple[bytes, Value]:
    stamp = written_time(value)
    local = stamp.replace(tzinfo=zone) if stamp.tzinfo is None else stamp.astimezone(zone)
    if kind == "DTL":
        if not 1970 <= local.year <= 2262:
            raise WriteError(f"{value!r} is outside DTL's years 1970-2262")
        data = struct.pack(">HBBBBBBI", local.year, local.month, local.day,
                           local.isoweekday() % 7 + 1, local.hour, local.minute, local.second,
                           local.microsecond * 1000)
        return data, _iso(local)
    if not 1990 <= local.year <= 2089:
        raise WriteError(f"{value!r} is outside DATE_AND_TIME's years 1990-2089")
    local -= timedelta(microseconds=local.microsecond % 1000)
    millis = local.microsecond // 1000
    data = bytes([_to_bcd(local.year % 100), _to_bcd(local.month), _to_bcd(local.day),
                  _to_bcd(local.hour), _to_bcd(local.minute), _to_bcd(local.second),
                  _to_bcd(millis // 10), (millis % 10) << 4 | local.isoweekday() % 7 + 1])
    return data, _iso(local)

