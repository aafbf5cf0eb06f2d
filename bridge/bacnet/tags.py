"""BACnet's tagged encoding (ASHRAE 135 clause 20.2): application and context tags, values.

A tag octet holds the tag number (high nibble; 15: the number follows), the class (bit 3:
context-specific) and the length/value/type (low 3 bits: the length 0..4, 5: the length
follows, 6: opening tag, 7: closing tag; for an application BOOLEAN the value itself).
`read_tag` decodes one tag header; `app_value` decodes the application-tagged value it heads;
the `app_*` and `ctx_*` functions encode what the bridge sends.

Pure: bytes in, bytes or values out.
"""

from __future__ import annotations

import struct
from typing import Any, Final

OPEN: Final = 6
CLOSE: Final = 7
NULL, BOOLEAN, UNSIGNED, SIGNED, REAL, DOUBLE, OCTETS, CHARACTERS, BITS, ENUMERATED, DATE, \
    TIME, OBJECT_ID = range(13)
_REAL = struct.Struct(">f")
_DOUBLE = struct.Struct(">d")


class DecodeError(ValueError):
    """Bytes that are not what BACnet's encoding says they must be."""


def read_tag(data: bytes, at: int) -> tuple[int, bool, int, int, int]:
    """(tag number, context class, kind, length or value, offset of the content).

    `kind` is OPEN, CLOSE or 0 (a primitive: the length, or an application BOOLEAN's value).
    """
    try:
        octet = data[at]
        at += 1
        number = octet >> 4
        if number == 15:
            number = data[at]
            at += 1
        lvt = octet & 7
        context = bool(octet & 8)
        if lvt == 5:
            length = data[at]
            at += 1
            if length == 254:
                length = data[at] << 8 | data[at + 1]
                at += 2
            elif length == 255:
                length = int.from_bytes(data[at:at + 4], "big")
                at += 4
            return number, context, 0, length, at
        if context and lvt in (OPEN, CLOSE):
            return number, True, lvt, 0, at
        return number, context, 0, lvt, at
    except IndexError:
        raise DecodeError("truncated tag") from None


def unsigned(data: bytes, at: int, length: int) -> int:
    """An unsigned integer of `length` bytes."""
    if at + length > len(data):
        raise DecodeError("truncated value")
    return int.from_bytes(data[at:at + length], "big")


def app_value(data: bytes, number: int, length: int, at: int) -> Any:
    """The value of an application tag (header already read: its number, length, content)."""
    end = at + length
    if number != BOOLEAN and end > len(data):
        raise DecodeError("truncated value")
    if number == REAL:
        if length != 4:
            raise DecodeError("a REAL is 4 bytes")
        return _REAL.unpack_from(data, at)[0]
    if number in (UNSIGNED, ENUMERATED):
        return int.from_bytes(data[at:end], "big")
    if number == BITS:
        if length == 0:
            return []
        unused = data[at]
        return [bool(data[at + 1 + i // 8] & (0x80 >> (i % 8)))
                for i in range((length - 1) * 8 - unused)]
    if number == BOOLEAN:
        return bool(length)
    if number == NULL:
        return None
    if number == SIGNED:
        return int.from_bytes(data[at:end], "big", signed=True)
    if number == DOUBLE:
        return _DOUBLE.unpack_from(data, at)[0]
    if number == CHARACTERS:
        encoding = data[at] if length else 0
        raw = bytes(data[at + 1:end])
        if encoding == 0:
            return raw.decode("utf-8", "replace")
        if encoding == 4:  # UCS-2
            return raw.decode("utf-16-be", "replace")
        return raw.decode("latin-1")
    if number == OBJECT_ID:
        word = int.from_bytes(data[at:end], "big")
        return (word >> 22, word & 0x3FFFFF)
    if number == OCTETS:
        return bytes(data[at:end]).hex()
    if number in (DATE, TIME):
        return tuple(data[at:end])
    raise DecodeError(f"application tag {number} is not a value")


def skip(data: bytes, at: int) -> int:
    """The offset after the element at `at` (a primitive, or everything up to its closing tag)."""
    number, context, kind, length, at = read_tag(data, at)
    if kind == OPEN:
        while True:
            n, _, k, _, _ = read_tag(data, at)
            if k == CLOSE and n == number:
                return read_tag(data, at)[4]
            at = skip(data, at)
    if kind == CLOSE:
        raise DecodeError("unexpected closing tag")
    return at if (not context and number == BOOLEAN) else at + length


# -- encoding ---------------------------------------------------------------------------------

def _header(number: int, context: bool, length: int) -> bytes:
    cls = 8 if context else 0
    first = bytes([(number << 4 | cls | min(length, 5))]) if number < 15 else bytes(
        [0xF0 | cls | min(length, 5), number])
    if length < 5:
        return first
    if length < 254:
        return first + bytes([length])
    if length < 65536:
        return first + bytes([254]) + length.to_bytes(2, "big")
    return first + bytes([255]) + length.to_bytes(4, "big")


def _uint(value: int) -> bytes:
    return value.to_bytes(max(1, (value.bit_length() + 7) // 8), "big")


def opening(number: int) -> bytes:
    """A context opening tag."""
    return bytes([number << 4 | 0x0E]) if number < 15 else bytes([0xFE, number])


def closing(number: int) -> bytes:
    """A context closing tag."""
    return bytes([number << 4 | 0x0F]) if number < 15 else bytes([0xFF, number])


def ctx_unsigned(number: int, value: int) -> bytes:
    """A context-tagged unsigned integer (or enumerated)."""
    content = _uint(value)
    return _header(number, True, len(content)) + content


def ctx_boolean(number: int, value: bool) -> bytes:
    """A context-tagged boolean (one content octet)."""
    return _header(number, True, 1) + bytes([1 if value else 0])


def object_word(kind: int, instance: int) -> int:
    """An object identifier as its 32-bit word."""
    return kind << 22 | instance


def ctx_object(number: int, kind: int, instance: int) -> bytes:
    """A context-tagged object identifier."""
    return _header(number, True, 4) + object_word(kind, instance).to_bytes(4, "big")


def app_null() -> bytes:
    """An application NULL (a relinquish)."""
    return b"\x00"


def app_unsigned(value: int, number: int = UNSIGNED) -> bytes:
    """An application unsigned integer (or, with `number` ENUMERATED, an enumerated)."""
    content = _uint(value)
    return _header(number, False, len(content)) + content


def app_real(value: float) -> bytes:
    """An application REAL."""
    return b"\x44" + _REAL.pack(value)


def app_signed(value: int) -> bytes:
    """An application signed integer."""
    size = max(1, (value.bit_length() + 8) // 8)
    return _header(SIGNED, False, size) + value.to_bytes(size, "big", signed=True)
