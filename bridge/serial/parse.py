"""Parsing serial frames into named fields, and fields into point values (pure).

Three parsers turn one frame into a record `{field name: raw value}`:

- regex: the named groups of the first match (`T=(?P<temp>-?\\d+\\.\\d+)`);
- struct: a `struct` format and a list of names (`<hHf` -> `a`, `b`, `c`);
- NMEA 0183: `$GPGGA,...*47` with its XOR checksum checked; field `GGA.9` is the 9th field after
  the sentence id, matched with or without the talker (`GGA.9` and `GPGGA.9` both work).

`point_value` then converts a record field to (value, quality) for one point: numbers are
scaled like Modbus points, an empty field (an NMEA sentence without a fix) is null and bad,
NMEA coordinates (`4807.038,N`) become signed decimal degrees. A frame that cannot be parsed
raises `ParseError`; the reader counts it and publishes nothing from it.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Mapping, Sequence
from typing import Final

from bridge.modbus.convert import ValueSpec, to_engineering
from bridge.point import BAD, GOOD, Quality, Value

NMEA_FIELD: Final = re.compile(r"^([A-Z0-9]{3,5})\.([1-9][0-9]*)$")
Raw = str | int | float | bytes | bool
Record = dict[str, Raw]


class ParseError(ValueError):
    """A frame that does not parse (no match, bad checksum, wrong size, not text)."""


def nmea_field(spec: str) -> tuple[str, int]:
    """`GGA.9` -> ("GGA", 9)."""
    match = NMEA_FIELD.match(spec)
    if match is None:
        raise ValueError(f"{spec!r} is not an NMEA field like 'GGA.9'")
    return match.group(1), int(match.group(2))


def nmea_checksum(body: bytes) -> int:
    """XOR of the bytes between '$' and '*'."""
    checksum = 0
    for byte in body:
        checksum ^= byte
    return checksum


def parse_nmea(frame: bytes) -> Record:
    """One NMEA 0183 sentence -> {"GGA.1": ..., "GPGGA.1": ...}; the checksum must match."""
    text = frame.strip(b"\r\n \x00")
    if text[:1] not in (b"$", b"!"):
        raise ParseError("NMEA sentence must start with '$' or '!'")
    body, star, tail = text[1:].partition(b"*")
    if star:
        try:
            expected = int(tail[:2], 16)
        except ValueError:
            raise ParseError(f"bad NMEA checksum field {tail[:2]!r}") from None
        if len(tail) != 2 or nmea_checksum(body) != expected:
            raise ParseError(f"NMEA checksum mismatch: computed {nmea_checksum(body):02X}, "
                             f"sentence says {tail.decode('ascii', 'replace')}")
    else:
        raise ParseError("NMEA sentence without checksum")
    try:
        fields = body.decode("ascii").split(",")
    except UnicodeDecodeError:
        raise ParseError("NMEA sentence is not ASCII") from None
    ident = fields[0]
    if not 3 <= len(ident) <= 5:
        raise ParseError(f"bad NMEA sentence id {ident!r}")
    record: Record = {}
    short = ident[-3:]
    for index, value in enumerate(fields[1:], start=1):
        record[f"{ident}.{index}"] = value
        record[f"{short}.{index}"] = value
    return record


def parse_regex(pattern: re.Pattern[str], frame: bytes, encoding: str = "ascii") -> Record:
    """The named groups of the first match in the decoded frame."""
    try:
        text = frame.decode(encoding)
    except UnicodeDecodeError:
        raise ParseError(f"frame is not {encoding}") from None
    match = pattern.search(text.strip("\r\n"))
    if match is None:
        raise ParseError("frame does not match the pattern")
    return {name: value for name, value in match.groupdict().items() if value is not None}


def parse_struct(layout: struct.Struct, names: Sequence[str], frame: bytes) -> Record:
    """Unpack a binary frame with a struct format."""
    if len(frame) != layout.size:
        raise ParseError(f"frame has {len(frame)} bytes, the struct needs {layout.size}")
    return dict(zip(names, layout.unpack(frame), strict=True))


def nmea_coordinate(value: str, hemisphere: str) -> float:
    """`4807.038`, `N` -> 48.1173 (degrees and decimal minutes to signed degrees)."""
    number = float(value)
    degrees = int(number // 100)
    result = degrees + (number - degrees * 100) / 60
    if hemisphere in ("S", "W"):
        result = -result
    elif hemisphere not in ("N", "E"):
        raise ValueError(f"bad hemisphere {hemisphere!r}")
    return round(result, 7)


def point_value(record: Mapping[str, Raw], field: str, kind: str,
                spec: ValueSpec) -> tuple[Value, Quality] | None:
    """The (value, quality) of one point from a record; None when the record lacks the field."""
    raw = record.get(field)
    if raw is None:
        return None
    if isinstance(raw, bytes):
        raw = raw.split(b"\x00", 1)[0].decode("latin-1")
    if kind == "string":
        return str(raw).strip(), GOOD
    if isinstance(raw, str) and not raw.strip():
        return None, BAD
    try:
        if kind == "bool":
            return _to_bool(raw), GOOD
        if kind == "coordinate":
            sentence, index = nmea_field(field)
            hemisphere = str(record.get(f"{sentence}.{index + 1}", ""))
            number: int | float = nmea_coordinate(str(raw), hemisphere)
        elif kind == "int":
            number = int(raw) if not isinstance(raw, str) else _to_int(raw.strip())
        else:
            number = float(raw)
    except (ValueError, TypeError):
        return None, BAD
    return to_engineering(spec, number)


def _to_int(text: str) -> int:
    """Decimal (leading zeros allowed, as in NMEA '08') or 0x/0o/0b prefixed."""
    try:
        return int(text, 10)
    except ValueError:
        return int(text, 0)


def _to_bool(raw: Raw) -> bool:
    if isinstance(raw, str):
        text = raw.strip().lower()
        if text in ("1", "true", "on", "yes"):
            return True
        if text in ("0", "false", "off", "no"):
            return False
        raise ValueError(raw)
    return bool(raw)
