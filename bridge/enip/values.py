"""Logix data types: their CIP type codes, sizes, decoding of read data and encoding of writes.

A read answer carries the type of what it read: an elementary type code (0xC1 BOOL ... 0xCB
LREAL), 0xD0 / 0xDA for CIP STRING / SHORT_STRING, or 0x02A0 and a structure handle for a
structure (a Logix STRING is the structure 0x0FCE: DINT LEN, SINT DATA[82]). `decode` checks
that type against the point's configured one, so a tag that is a DINT configured as REAL is
bad with the reason instead of a wrong number. A write sends the type the controller answered
with for that tag (a Logix STRING or a CIP STRING), so the first read of a point comes first.

Pure: struct only.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass

STRING_CHARS = 82  # a Logix STRING's DATA
LOGIX_STRING = 0x0FCE  # the structure handle of the predefined STRING type
STRUCT = 0x02A0


@dataclass(frozen=True, slots=True)
class Spec:
    """An elementary type: CIP code, struct format, neutral datatype, range."""

    code: int
    fmt: str
    datatype: str
    low: float | None = None
    high: float | None = None

    @property
    def size(self) -> int:
        return struct.calcsize("<" + self.fmt)


TYPES: dict[str, Spec] = {
    "BOOL": Spec(0xC1, "B", "bool"),
    "SINT": Spec(0xC2, "b", "int8", -2**7, 2**7 - 1),
    "INT": Spec(0xC3, "h", "int16", -2**15, 2**15 - 1),
    "DINT": Spec(0xC4, "i", "int32", -2**31, 2**31 - 1),
    "LINT": Spec(0xC5, "q", "int64", -2**63, 2**63 - 1),
    "USINT": Spec(0xC6, "B", "uint8", 0, 2**8 - 1),
    "UINT": Spec(0xC7, "H", "uint16", 0, 2**16 - 1),
    "UDINT": Spec(0xC8, "I", "uint32", 0, 2**32 - 1),
    "ULINT": Spec(0xC9, "Q", "uint64", 0, 2**64 - 1),
    "REAL": Spec(0xCA, "f", "float32", -3.4028234663852886e38, 3.4028234663852886e38),
    "LREAL": Spec(0xCB, "d", "float64"),
}
NAMES = {spec.code: name for name, spec in TYPES.items()} | {
    0xD0: "STRING", 0xDA: "SHORT_STRING", 0xD3: "DWORD", 0xD1: "BYTE", 0xD2: "WORD"}
INTEGERS = frozenset(("SINT", "INT", "DINT", "LINT", "USINT", "UINT", "UDINT", "ULINT"))
FLOATS = frozenset(("REAL", "LREAL"))
TYPE_NAMES = (*TYPES, "STRING")

Value = bool | int | float | str | None


class TypeMismatchError(ValueError):
    """The controller's type of a tag is not the point's configured type."""


def reply_size(kind: str, elements: int) -> int:
    """The most bytes a read of `elements` of a type answers with (type and data)."""
    if kind == "STRING":
        return 4 + (4 + STRING_CHARS + 2) * elements  # 0x02A0, handle, LEN, DATA, pad
    return 2 + TYPES[kind].size * elements


def split_type(data: bytes) -> tuple[int, int | None, bytes]:
    """(type code, structure handle or None, the data after them) of a read answer."""
    if len(data) < 2:
        raise ValueError("the answer has no data type")
    code = struct.unpack_from("<H", data)[0]
    if code == STRUCT:
        if len(data) < 4:
            raise ValueError("the answer's structure has no handle")
        return code, struct.unpack_from("<H", data, 2)[0], data[4:]
    return code, None, data[2:]


def type_name(code: int, handle: int | None) -> str:
    """A type as a person reads it."""
    if code == STRUCT:
        return "STRING" if handle == LOGIX_STRING else f"a structure (handle 0x{handle or 0:04X})"
    return NAMES.get(code, f"type 0x{code:04X}")


def decode(kind: str, elements: int, data: bytes) -> list[Value]:
    """The values of a read answer (type and data) as the point's type; TypeMismatchError when the
    controller's type is another, ValueError when the data is short."""
    code, handle, body = split_type(data)
    if kind == "STRING":
        return _strings(code, handle, body, elements)
    spec = TYPES[kind]
    if code != spec.code and not (kind == "BOOL" and code == 0xD3 and elements == 1):
        raise TypeMismatchError(f"the controller says {type_name(code, handle)}, the point says "
                           f"{kind}")
    if kind == "BOOL" and code == 0xD3:  # an element of a BOOL array comes as its DWORD
        return [bool(struct.unpack_from("<I", body)[0])]
    if len(body) < spec.size * elements:
        raise ValueError(f"{len(body)} bytes for {elements} {kind}")
    items = struct.unpack_from(f"<{elements}{spec.fmt}", body)
    if kind == "BOOL":
        return [bool(item) for item in items]
    return [_float(item) if kind in FLOATS else item for item in items]


def _float(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _strings(code: int, handle: int | None, body: bytes, elements: int) -> list[Value]:
    out: list[Value] = []
    at = 0
    for _ in range(elements):
        if code == STRUCT and handle == LOGIX_STRING:
            length = struct.unpack_from("<i", body, at)[0]
            if not 0 <= length <= STRING_CHARS:
                raise ValueError(f"a STRING of length {length}")
            out.append(body[at + 4:at + 4 + length].decode("latin-1"))
            at += 4 + STRING_CHARS + 2
        elif code in (0xD0, 0xDA):
            size = 2 if code == 0xD0 else 1
            length = int.from_bytes(body[at:at + size], "little")
            if len(body) < at + size + length:
                raise ValueError("a STRING longer than its answer")
            out.append(body[at + size:at + size + length].decode("latin-1"))
            at += size + length
        else:
            raise TypeMismatchError(f"the controller says {type_name(code, handle)}, the point "
                               f"says STRING")
    return out


def encode(kind: str, value: object, answered: tuple[int, int | None] | None,
           low: float | None, high: float | None, enum: dict[int, str] | None,
           ) -> tuple[bytes, int, bytes, object]:
    """A write of one value: (type bytes, element count, data, the value as it reads back);
    ValueError with the reason for a value the type, range or labels do not take.

    `answered` is the (type code, structure handle) the controller read the tag as (strings:
    a Logix STRING or a CIP STRING)."""
    if enum is not None:
        if value not in enum.values():
            raise ValueError(f"{value!r} is not one of {sorted(enum.values())}")
        value = next(number for number, label in enum.items() if label == value)
    written: object = value
    if kind == "STRING":
        if not isinstance(value, str):
            raise ValueError(f"expected a string for a STRING, not {value!r}")
        try:
            raw = value.encode("latin-1")
        except UnicodeEncodeError:
            raise ValueError(f"{value!r} has characters a STRING cannot hold") from None
        if len(raw) > STRING_CHARS:
            raise ValueError(f"{len(raw)} characters do not fit a STRING ({STRING_CHARS})")
        code, handle = answered or (STRUCT, LOGIX_STRING)
        if code == STRUCT:
            return (struct.pack("<HH", STRUCT, handle or LOGIX_STRING), 1,
                    struct.pack("<i", len(raw)) + raw.ljust(STRING_CHARS + 2, b"\0"), value)
        size = 2 if code == 0xD0 else 1
        return struct.pack("<H", code), 1, len(raw).to_bytes(size, "little") + raw, value
    spec = TYPES[kind]
    if kind == "BOOL":
        if not isinstance(value, bool):
            raise ValueError(f"expected true or false for a BOOL, not {value!r}")
        return struct.pack("<H", spec.code), 1, b"\xff" if value else b"\0", value
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"expected a number for a {kind}, not {value!r}")
    if kind in INTEGERS:
        if value != int(value):
            raise ValueError(f"{value:g} is not a whole number ({kind})")
        value = int(value)
        if not spec.low <= value <= spec.high:  # type: ignore[operator]
            raise ValueError(f"{value} is out of range for {kind}")
    elif not math.isfinite(value):
        raise ValueError(f"{value} is not a finite number")
    elif spec.high is not None and abs(value) > spec.high:
        raise ValueError(f"{value:g} is out of range for {kind}")
    if low is not None and value < low:
        raise ValueError(f"{value:g} is below min {low:g}")
    if high is not None and value > high:
        raise ValueError(f"{value:g} is above max {high:g}")
    return struct.pack("<H", spec.code), 1, struct.pack("<" + spec.fmt, value), written
