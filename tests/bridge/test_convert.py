"""Registers <-> values: every type in every byte/word order, from the anchors' own examples.

The expected registers are built from the *name* of the order, independently of how convert.py
implements it: letter i of the name says which byte of the big-endian value sits at position i
on the wire ("CDAB": bytes C and D come first). The fixed cases are the test vectors of
Telegraf's modbus input (`plugins/inputs/modbus/modbus_test.go`: the bytes AA BB CC DD in every
order), the float examples of libmodbus' manual pages (123456.0, which libmodbus names the
other way round) and Home Assistant's scale / offset / precision style.
"""

from __future__ import annotations

import math
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bridge.modbus import convert
from bridge.modbus.convert import ConvertError, ValueSpec, decode, encode
from bridge.point import BAD, GOOD, UNCERTAIN

ORDERS_32 = ("ABCD", "BADC", "CDAB", "DCBA")
ORDERS_64 = ("ABCDEFGH", "BADCFEHG", "GHEFCDAB", "HGFEDCBA")
EQUIVALENT_64 = dict(zip(ORDERS_32, ORDERS_64, strict=True))
FORMATS = {"int16": "h", "uint16": "H", "int32": "i", "uint32": "I", "float32": "f",
           "int64": "q", "uint64": "Q", "float64": "d"}


def words(data: bytes) -> list[int]:
    return [int.from_bytes(data[i:i + 2], "big") for i in range(0, len(data), 2)]


def wire_registers(kind: str, value: float, order: str) -> list[int]:
    """The registers a device sends for `value`, derived from the letters of `order`."""
    big = struct.pack(">" + FORMATS[kind], value)
    if len(big) == 8 and len(order) == 4:
        order = EQUIVALENT_64[order]
    if len(big) == 2:
        order = order[:2] if order in ("AB", "BA") else ("BA" if order in ("BADC", "DCBA")
                                                          else "AB")
    return words(bytes(big[ord(letter) - ord("A")] for letter in order))


# -- Telegraf's table: the bytes AA BB CC DD (and its 64-bit cases) in every order ----------

# Telegraf expects 18446742686322259968 here: the float64 rounding of the exact 64-bit value
# 2**64 - 1387387292028 (the int64 cases' bytes), which the bridge keeps exact.
U64 = 2**64 - 1387387292028
TELEGRAF = [
    # (type, order, register bytes as written by the test, value Telegraf reads)
    ("uint16", "AB", "ABCD", 43981),
    ("uint16", "BA", "ABCD", 52651),
    ("int16", "AB", "ABCD", -21555),
    ("int16", "BA", "ABCD", -12885),
    ("int32", "ABCD", "AABBCCDD", -1430532899),
    ("int32", "DCBA", "AABBCCDD", -573785174),
    ("int32", "BADC", "AABBCCDD", -1146430004),
    ("int32", "CDAB", "AABBCCDD", -857888069),
    ("uint32", "ABCD", "AABBCCDD", 2864434397),
    ("uint32", "DCBA", "AABBCCDD", 3721182122),
    ("uint32", "BADC", "AABBCCDD", 3148537292),
    ("uint32", "CDAB", "AABBCCDD", 3437079227),
    ("float32", "ABCD", "AABBCCDD", -3.3360025e-13),
    ("int64", "ABCDEFGH", "00000100 0000ABCD", 1099511671757),
    ("int64", "HGFEDCBA", "84F645F9 BCFEFFFF", -1387387292028),
    ("int64", "BADCFEHG", "FFFFBCFE 45F984F6", -1387387292028),
    ("int64", "GHEFCDAB", "F684F945 FEBCFFFF", -1387387292028),
    ("uint64", "ABCDEFGH", "00000100 0000ABCD", 1099511671757),
    ("uint64", "HGFEDCBA", "84F645F9 BCFEFFFF", U64),
    ("uint64", "BADCFEHG", "FFFFBCFE 45F984F6", U64),
    ("uint64", "GHEFCDAB", "F684F945 FEBCFFFF", U64),
    # the 4-letter names mean the same for 64-bit types
    ("int64", "DCBA", "84F645F9 BCFEFFFF", -1387387292028),
    ("int64", "BADC", "FFFFBCFE 45F984F6", -1387387292028),
    ("int64", "CDAB", "F684F945 FEBCFFFF", -1387387292028),
]


@pytest.mark.parametrize(("kind", "order", "hexbytes", "expected"), TELEGRAF,
                         ids=[f"{c[0]}-{c[1]}-{c[2]}" for c in TELEGRAF])
def test_telegraf_vectors(kind: str, order: str, hexbytes: str, expected: float) -> None:
    regs = words(bytes.fromhex(hexbytes.replace(" ", "")))
    value, quality = decode(ValueSpec(kind, order), regs)
    assert quality == GOOD
    if kind == "float32":
        assert value == pytest.approx(expected, rel=1e-7)
    else:
        assert value == expected
    assert encode(ValueSpec(kind, order), value) == regs


def test_telegraf_scaled_vectors() -> None:
    assert decode(ValueSpec("uint16", "AB", scale=10), [0x002A])[0] == 420
    assert decode(ValueSpec("uint16", "AB", scale=0.1), [0xABCD])[0] == 4398.1
    assert decode(ValueSpec("int32", "ABCD", scale=10), [0x0000, 0xABCD])[0] == 439810
    assert decode(ValueSpec("int64", "ABCDEFGH", scale=10),
                  words(bytes.fromhex("000001000000ABCD")))[0] == 10995116717570


# -- libmodbus' manual pages: 123456.0 (0x47F12000), named the other way round --------------

@pytest.mark.parametrize(("order", "regs"), [
    ("ABCD", [0x47F1, 0x2000]),  # libmodbus calls this layout "DCBA"
    ("BADC", [0xF147, 0x0020]),
    ("CDAB", [0x2000, 0x47F1]),
    ("DCBA", [0x0020, 0xF147]),  # libmodbus' modbus_get_float_abcd example
])
def test_float32_123456_in_every_order(order: str, regs: list[int]) -> None:
    assert decode(ValueSpec("float32", order), regs) == (123456.0, GOOD)
    assert encode(ValueSpec("float32", order), 123456.0) == regs


def test_float32_is_published_as_its_shortest_decimal() -> None:
    assert decode(ValueSpec("float32"), wire_registers("float32", math.pi, "ABCD"))[0] == 3.1415927
    assert decode(ValueSpec("float32"), [0x3DCC, 0xCCCD])[0] == 0.1


# -- every numeric type in every order, from the letters of the order -------------------------

SAMPLES = {"int16": -12345, "uint16": 54321, "int32": -123456789, "uint32": 3456789012,
           "float32": -1234.5, "int64": -1234567890123456789, "uint64": 12345678901234567890,
           "float64": 2.718281828459045}
CASES = [(kind, order) for kind in SAMPLES for order in (
    ("AB", "BA", *ORDERS_32) if kind.endswith("16") else
    (*ORDERS_32, *ORDERS_64) if kind in ("int64", "uint64", "float64") else ORDERS_32)]


@pytest.mark.parametrize(("kind", "order"), CASES, ids=[f"{k}-{o}" for k, o in CASES])
def test_every_type_in_every_order(kind: str, order: str) -> None:
    value = SAMPLES[kind]
    regs = wire_registers(kind, value, order)
    assert len(regs) == convert.register_count(kind)
    assert decode(ValueSpec(kind, order), regs) == (value, GOOD)
    assert encode(ValueSpec(kind, order), value) == regs


@given(st.sampled_from(sorted(FORMATS)), st.sampled_from(ORDERS_32), st.data())
def test_round_trip(kind: str, order: str, data: st.DataObject) -> None:
    if kind.startswith("float"):
        value = data.draw(st.floats(allow_nan=False, allow_infinity=False,
                                    width=32 if kind == "float32" else 64))
    else:
        low, high = convert._INT_RANGE[kind]
        value = data.draw(st.integers(low, high))
    spec = ValueSpec(kind, order)
    decoded = decode(spec, encode(spec, value))[0]
    if kind == "float32":  # the shortest decimal of the same float32, not the same float64
        assert isinstance(decoded, float)
        assert struct.pack(">f", decoded) == struct.pack(">f", value)
    else:
        assert decoded == value


def test_64_bit_names_are_refused_for_32_bit_types() -> None:
    with pytest.raises(ConvertError, match="only for 64-bit"):
        convert.check_order("ABCDEFGH", "float32")
    with pytest.raises(ConvertError, match="only for 16-bit"):
        convert.check_order("BA", "int32")


# -- bits, strings, enums, sentinels, validity, scaling -----------------------------------------

def test_bool_and_bit_of_register() -> None:
    assert decode(ValueSpec("bool"), [1]) == (True, GOOD)
    assert decode(ValueSpec("bool"), [0]) == (False, GOOD)
    word = 0b1000_0000_0000_0101
    assert [decode(ValueSpec("bit", bit=b), [word])[0] for b in (0, 1, 2, 15)] == [
        True, False, True, True]
    assert convert.set_bit(word, 1, True) == 0b1000_0000_0000_0111
    assert convert.set_bit(word, 15, False) == 0b101
    assert encode(ValueSpec("bit", bit=3), True) == [1]
    with pytest.raises(ConvertError):
        encode(ValueSpec("bool"), "yes")


def test_strings_with_byte_swap_and_padding() -> None:
    assert decode(ValueSpec("string", "ABCD", count=3), [0x4142, 0x4344, 0x0000]) == ("ABCD",
                                                                                     GOOD)
    assert decode(ValueSpec("string", "BADC", count=2), [0x4241, 0x4443]) == ("ABCD", GOOD)
    assert decode(ValueSpec("string", "AB", count=2), [0x2041, 0x4220]) == ("AB", GOOD)
    assert encode(ValueSpec("string", "AB", count=3), "ABC") == [0x4142, 0x4300, 0x0000]
    assert encode(ValueSpec("string", "BA", count=2), "ABCD") == [0x4241, 0x4443]
    with pytest.raises(ConvertError, match="longer than 4 bytes"):
        encode(ValueSpec("string", count=2), "ABCDE")


def test_enum_map() -> None:
    spec = ValueSpec("uint16", enum={0: "stopped", 1: "running", 2: "fault"})
    assert decode(spec, [1]) == ("running", GOOD)
    assert decode(spec, [7]) == (7, UNCERTAIN)  # unknown state: the number, flagged
    assert encode(spec, "fault") == [2]
    assert encode(spec, 0) == [0]
    with pytest.raises(ConvertError, match="not one of"):
        encode(spec, "flying")
    with pytest.raises(ConvertError, match="not one of"):
        encode(spec, 9)


def test_nan_sentinels_and_float_nan_are_bad_and_null() -> None:
    assert decode(ValueSpec("uint16", nan=(65535.0,)), [0xFFFF]) == (None, BAD)
    assert decode(ValueSpec("int16", nan=(-32768.0,), scale=0.1), [0x8000]) == (None, BAD)
    assert decode(ValueSpec("int16", nan=(-32768.0,), scale=0.1), [0x8001]) == (-3276.7, GOOD)
    assert decode(ValueSpec("float32"), [0x7FC0, 0x0000]) == (None, BAD)
    assert decode(ValueSpec("float32"), [0x7F80, 0x0000]) == (None, BAD)  # +inf


def test_validity_range_flags_uncertain() -> None:
    spec = ValueSpec("int16", scale=0.1, minimum=-40, maximum=125)
    assert decode(spec, [250]) == (25.0, GOOD)
    assert decode(spec, [1300]) == (130.0, UNCERTAIN)
    assert decode(spec, [0xFE0C]) == (-50.0, UNCERTAIN)
    with pytest.raises(ConvertError, match="outside"):
        encode(spec, 126)


def test_scale_offset_precision_and_inverse() -> None:
    spec = ValueSpec("int16", scale=0.01, offset=100)
    assert decode(spec, [0xABCD]) == (-115.55, GOOD)
    assert encode(spec, -115.55) == [0xABCD]
    rounded = ValueSpec("uint16", scale=0.1, precision=0)
    assert decode(rounded, [0xABCD]) == (4398, GOOD)
    celsius = ValueSpec("float32", scale=1.8, offset=32, precision=1)
    assert decode(celsius, wire_registers("float32", 21.5, "ABCD")) == (70.7, GOOD)
    with pytest.raises(ConvertError, match="does not fit int16"):
        encode(ValueSpec("int16", scale=0.1), 4000)
    with pytest.raises(ConvertError, match="expected a number"):
        encode(ValueSpec("uint16"), "12")


def test_probe_interpretations_cover_every_type_and_order() -> None:
    rows = convert.interpretations([0x47F1, 0x2000])
    assert (0, "float32", "ABCD", "123456.0") in rows
    assert (0, "uint16", "AB", "18417") in rows
    assert (1, "uint16", "BA", "32") in rows
    kinds = {(kind, order) for _, kind, order, _ in rows}
    assert {("int32", o) for o in ORDERS_32} <= kinds
