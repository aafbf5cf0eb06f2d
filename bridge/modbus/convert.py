"""Registers <-> values: the pure converter of the Modbus bridge.

How this works: a point is described by a `ValueSpec` (type, byte/word order, scale, ...).
`decode(spec, words)` turns the raw registers (or bits) of one point into an engineering value
and a quality; `encode(spec, value)` turns a value written from MQTT back into registers.

Byte and word order use the names of Telegraf's modbus input (the anchors' common ground),
with the first register read from the device on the left:

| order | also | meaning | float32 123456.0 (0x47F12000) as registers |
|---|---|---|---|
| ABCD | AB, ABCDEFGH | big endian (Modbus standard) | 0x47F1 0x2000 |
| BADC | BA, BADCFEHG | bytes swapped in each register | 0xF147 0x0020 |
| CDAB | GHEFCDAB | registers (words) swapped | 0x2000 0x47F1 |
| DCBA | HGFEDCBA | little endian | 0x0020 0xF147 |

So an order is two independent flags: swap the two bytes inside each register, and reverse the
order of the registers. 64-bit types accept either the 4-letter or the 8-letter name; 16-bit
types only care about the byte swap (AB / BA). libmodbus names the same layouts differently
(its `modbus_get_float_dcba` reads 0x47F1 0x2000); docs/bridge.md has the table.

Pure: no I/O, no clock; every function is total and raises `ConvertError` with a message meant
for the `.../set/result` error field.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Final, Literal

from bridge.point import BAD, GOOD, UNCERTAIN, Quality, Value

DataType = Literal[
    "bool", "bit", "int16", "uint16", "int32", "uint32", "int64", "uint64",
    "float32", "float64", "string",
]
DATA_TYPES: Final[tuple[str, ...]] = (
    "bool", "bit", "int16", "uint16", "int32", "uint32", "int64", "uint64",
    "float32", "float64", "string",
)
ORDERS_16: Final = {"AB": False, "BA": True}
ORDERS_32: Final = {"ABCD": (False, False), "BADC": (True, False), "CDAB": (False, True),
                    "DCBA": (True, True)}
ORDERS_64: Final = {"ABCDEFGH": "ABCD", "BADCFEHG": "BADC", "GHEFCDAB": "CDAB",
                    "HGFEDCBA": "DCBA"}
ORDER_NAMES: Final[tuple[str, ...]] = (*ORDERS_32, *ORDERS_64, *ORDERS_16)

# (struct format, registers) of the fixed-size numeric types
_NUMERIC: Final[dict[str, tuple[str, int]]] = {
    "int16": ("h", 1), "uint16": ("H", 1),
    "int32": ("i", 2), "uint32": ("I", 2), "float32": ("f", 2),
    "int64": ("q", 4), "uint64": ("Q", 4), "float64": ("d", 4),
}
INTEGER_TYPES: Final = frozenset({"int16", "uint16", "int32", "uint32", "int64", "uint64"})
FLOAT_TYPES: Final = frozenset({"float32", "float64"})
_INT_RANGE: Final = {
    "int16": (-(1 << 15), (1 << 15) - 1), "uint16": (0, (1 << 16) - 1),
    "int32": (-(1 << 31), (1 << 31) - 1), "uint32": (0, (1 << 32) - 1),
    "int64": (-(1 << 63), (1 << 63) - 1), "uint64": (0, (1 << 64) - 1),
}


class ConvertError(ValueError):
    """A value cannot be converted (wrong type, out of range, unknown enum label)."""


def register_count(data_type: str, count: int | None = None) -> int:
    """Registers (or bits, for bool on a bit table) one value of `data_type` occupies."""
    if data_type in ("bool", "bit"):
        return 1
    if data_type == "string":
        return count or 1
    return _NUMERIC[data_type][1]


def order_flags(order: str, data_type: str) -> tuple[bool, bool]:
    """(swap bytes in each register, reverse register order) of an order name."""
    if order in ORDERS_16:
        return ORDERS_16[order], False
    if order in ORDERS_64:
        if data_type not in ("int64", "uint64", "float64"):
            raise ConvertError(f"order {order} is only for 64-bit types")
        order = ORDERS_64[order]
    if order not in ORDERS_32:
        raise ConvertError(f"unknown order {order!r} (expected one of {', '.join(ORDER_NAMES)})")
    return ORDERS_32[order]


def check_order(order: str, data_type: str) -> None:
    """Raise `ConvertError` when `order` makes no sense for `data_type`."""
    order_flags(order, data_type)
    if order in ORDERS_16 and register_count(data_type) > 1 and data_type != "string":
        raise ConvertError(f"order {order} is only for 16-bit types and strings")


def registers_to_bytes(words: Sequence[int], order: str = "ABCD", data_type: str = "") -> bytes:
    """The big-endian byte string the registers stand for, after undoing `order`."""
    swap_bytes, swap_words = order_flags(order, data_type)
    seq = list(reversed(words)) if swap_words else list(words)
    data = struct.pack(f">{len(seq)}H", *seq)
    if swap_bytes:
        data = bytes(b for i in range(0, len(data), 2) for b in (data[i + 1], data[i]))
    return data


def bytes_to_registers(data: bytes, order: str = "ABCD", data_type: str = "") -> list[int]:
    """Inverse of `registers_to_bytes`."""
    swap_bytes, swap_words = order_flags(order, data_type)
    if swap_bytes:
        data = bytes(b for i in range(0, len(data), 2) for b in (data[i + 1], data[i]))
    words = list(struct.unpack(f">{len(data) // 2}H", data))
    return list(reversed(words)) if swap_words else words


def _decimals(number: float) -> int:
    exponent = Decimal(repr(number)).normalize().as_tuple().exponent
    return max(0, -exponent) if isinstance(exponent, int) else 0


@dataclass(frozen=True, slots=True)
class ValueSpec:
    """How one point's raw registers become a value (and back)."""

    type: str = "uint16"
    order: str = "ABCD"
    count: int = 1  # registers, for strings
    bit: int | None = None  # for type "bit"
    scale: float = 1.0
    offset: float = 0.0
    precision: int | None = None
    minimum: float | None = None
    maximum: float | None = None
    nan: tuple[float, ...] = ()
    enum: Mapping[int, str] | None = None
    encoding: str = "ascii"
    _rounding: int | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        rounding = self.precision
        if rounding is None and self.type in INTEGER_TYPES and (self.scale != 1 or self.offset):
            # integer * 0.1 should read 4398.1, not 4398.1000000000004
            rounding = max(_decimals(self.scale), _decimals(self.offset))
        object.__setattr__(self, "_rounding", rounding)

    @property
    def registers(self) -> int:
        return register_count(self.type, self.count)


def decode_raw(spec: ValueSpec, words: Sequence[int]) -> bool | int | float | str:
    """The raw value of registers (or bits), before scaling: no quality checks."""
    kind = spec.type
    if kind == "bool":
        return bool(words[0])
    if kind == "bit":
        return bool((words[0] >> (spec.bit or 0)) & 1)
    if kind == "string":
        data = registers_to_bytes(words[: spec.count], "BA" if _swaps(spec.order) else "AB")
        return data.split(b"\x00", 1)[0].decode(spec.encoding, errors="replace").strip()
    fmt, size = _NUMERIC[kind]
    if size == 1:
        word = words[0]
        if _swaps(spec.order):
            word = ((word & 0xFF) << 8) | (word >> 8)
        return word - 0x10000 if kind == "int16" and word & 0x8000 else word
    value: int | float = struct.unpack(">" + fmt, registers_to_bytes(words[:size], spec.order,
                                                                     kind))[0]
    if kind == "float32":
        value = shortest_float32(value)
    return value


def shortest_float32(value: float) -> float:
    """The shortest decimal that is the same float32 (3.1415927, not 3.1415927410125732)."""
    if not math.isfinite(value):
        return value
    exact = struct.pack(">f", value)
    for digits in (6, 7, 8):
        candidate = float(f"{value:.{digits}g}")
        if struct.pack(">f", candidate) == exact:
            return candidate
    return value


def _swaps(order: str) -> bool:
    if order in ORDERS_16:
        return ORDERS_16[order]
    return order_flags(order, "uint64")[0]


def to_engineering(spec: ValueSpec, raw: bool | int | float | str) -> tuple[Value, Quality]:
    """Apply NaN sentinels, enum map, scale/offset/precision and min/max validity."""
    if isinstance(raw, bool | str):
        return raw, GOOD
    if raw in spec.nan or (isinstance(raw, float) and not math.isfinite(raw)):
        return None, BAD
    if spec.enum is not None:
        label = spec.enum.get(int(raw)) if raw == int(raw) else None
        return (label, GOOD) if label is not None else (raw, UNCERTAIN)
    value: int | float = raw
    if spec.scale != 1 or spec.offset:
        value = raw * spec.scale + spec.offset
    if spec._rounding is not None:
        value = round(value, spec._rounding)
        if spec._rounding == 0 and spec.type in INTEGER_TYPES:
            value = int(value)
    if (spec.minimum is not None and value < spec.minimum) or (
        spec.maximum is not None and value > spec.maximum
    ):
        return value, UNCERTAIN
    return value, GOOD


def decode(spec: ValueSpec, words: Sequence[int]) -> tuple[Value, Quality]:
    """Registers (or bits) of one point -> (value, quality)."""
    return to_engineering(spec, decode_raw(spec, words))


def set_bit(word: int, bit: int, on: bool) -> int:
    """`word` with `bit` (0 = least significant) set or cleared."""
    return word | (1 << bit) if on else word & ~(1 << bit) & 0xFFFF


def encode(spec: ValueSpec, value: object) -> list[int]:
    """A value written from MQTT -> registers (bits as 0/1 for bool and bit types).

    The value is range-checked against min/max in engineering units, scaled back
    ((value - offset) / scale), rounded for integer types and checked against the type's range.
    """
    kind = spec.type
    if kind in ("bool", "bit"):
        if isinstance(value, bool) or (isinstance(value, int) and value in (0, 1)):
            return [int(value)]
        raise ConvertError(f"expected true/false (or 0/1), got {value!r}")
    if kind == "string":
        if not isinstance(value, str):
            raise ConvertError(f"expected a string, got {value!r}")
        try:
            data = value.encode(spec.encoding)
        except UnicodeEncodeError:
            raise ConvertError(f"{value!r} is not {spec.encoding}") from None
        if len(data) > 2 * spec.count:
            raise ConvertError(f"string longer than {2 * spec.count} bytes")
        data = data.ljust(2 * spec.count, b"\x00")
        return bytes_to_registers(data, "BA" if _swaps(spec.order) else "AB")
    number = _number_for(spec, value)
    if (spec.minimum is not None and number < spec.minimum) or (
        spec.maximum is not None and number > spec.maximum
    ):
        raise ConvertError(f"{_plain(number)} is outside [{_plain(spec.minimum)}, "
                           f"{_plain(spec.maximum)}]")
    raw: float | int = (number - spec.offset) / spec.scale if (
        spec.scale != 1 or spec.offset) else number
    fmt, size = _NUMERIC[kind]
    if kind in INTEGER_TYPES:
        if isinstance(raw, float):
            if not math.isfinite(raw):
                raise ConvertError(f"{value!r} is not a finite number")
            raw = round(raw)
        low, high = _INT_RANGE[kind]
        if not low <= raw <= high:
            raise ConvertError(f"{value!r} does not fit {kind} after scaling (raw {raw})")
    data = struct.pack(">" + fmt, raw)
    if size == 1:
        word = struct.unpack(">H", data)[0]
        if _swaps(spec.order):
            word = ((word & 0xFF) << 8) | (word >> 8)
        return [word]
    return bytes_to_registers(data, spec.order, kind)


def _plain(number: float | None) -> str:
    """A bound as a person writes it: 1000, not 1000.0 (no bound: none)."""
    if number is None:
        return "none"
    return str(int(number)) if float(number).is_integer() else repr(number)


def _number_for(spec: ValueSpec, value: object) -> float | int:
    if spec.enum is not None and isinstance(value, str):
        for key, label in spec.enum.items():
            if label == value:
                return key
        raise ConvertError(f"{value!r} is not one of {sorted(spec.enum.values())}")
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConvertError(f"expected a number, got {value!r}")
    if spec.enum is not None and value not in spec.enum:
        raise ConvertError(f"{value!r} is not one of {sorted(spec.enum)}")
    return value


def interpretations(words: Sequence[int]) -> list[tuple[int, str, str, str]]:
    """Every reading of `words`: (register offset, type, order, value) for `modbus probe`."""
    rows: list[tuple[int, str, str, str]] = []
    for start in range(len(words)):
        for kind, (_fmt, size) in _NUMERIC.items():
            if start + size > len(words):
                continue
            orders = ("AB", "BA") if size == 1 else tuple(ORDERS_32)
            for order in orders:
                raw = decode_raw(ValueSpec(kind, order), words[start:start + size])
                rows.append((start, kind, order, repr(raw)))
    if words:
        for order in ("AB", "BA"):
            text = decode_raw(ValueSpec("string", order, count=len(words)), words)
            rows.append((0, f"string[{len(words)}]", order, repr(text)))
    return rows
