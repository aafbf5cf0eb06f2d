"""Wire primitives shared by every packet family (MQTT 3.1.1 section 1.5/2.2, 5.0 section 1.5/2.1).

How this works: readers take `(data, pos, end)` where `data` is a `bytes` object holding the
whole packet, `pos` is where the field starts and `end` is the offset just past the region the
field must fit in (the packet, or a property block). They return `(value, new_pos)` and raise
`MalformedPacket` when a field would cross `end` or breaks its encoding rules; they never
raise IndexError, UnicodeDecodeError or ValueError. Writers return `bytes` and let
`int.to_bytes` raise OverflowError for out-of-range values; `encode()` turns that (and
UnicodeEncodeError) into `LocalProtocolError`.

The fixed header is one type/flags byte plus the remaining length as a variable byte integer
of 1 to 4 bytes, least significant 7 bits first. Its parser (`parse_remaining_length`) works
on an incomplete buffer and returns None when more bytes are needed, so the decoder can
enforce the maximum packet size before the body arrives.
"""

from __future__ import annotations

from gateway.broker.codec.errors import LocalProtocolError, MalformedPacket

__all__ = [
    "MAX_REMAINING_LENGTH",
    "MAX_VARINT",
    "decode_utf8",
    "enc_bin",
    "enc_pair",
    "enc_str",
    "enc_u16",
    "enc_u32",
    "enc_varint",
    "fixed_header",
    "parse_remaining_length",
    "read_bin",
    "read_byte",
    "read_pair",
    "read_str",
    "read_u16",
    "read_u32",
    "read_varint",
]

MAX_VARINT = 268_435_455
MAX_REMAINING_LENGTH = MAX_VARINT

_ONE_BYTE = tuple(bytes((i,)) for i in range(256))


# --------------------------------------------------------------------------- decoding


def parse_remaining_length(
    buf: bytes | bytearray | memoryview, n: int, offset: int = 0
) -> tuple[int, int] | None:
    """Parse the remaining length of the packet at `buf[offset]` (its length starts at
    `buf[offset + 1]`); `n` is how many bytes `buf` holds from `offset` on.

    Returns `(remaining_length, header_length)` or None if the varint is not complete yet.
    A fifth length byte or a non-minimal encoding ([MQTT-1.5.5-1]) is malformed.
    """
    value = 0
    shift = 0
    i = 1
    while i < n:
        byte = buf[offset + i]
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            if byte == 0 and i > 1:
                raise MalformedPacket("remaining length is not minimally encoded")
            return value, i + 1
        if i == 4:
            raise MalformedPacket("remaining length longer than 4 bytes")
        shift += 7
        i += 1
    return None


def read_varint(data: bytes, pos: int, end: int) -> tuple[int, int]:
    """Read a variable byte integer (property lengths, subscription identifiers)."""
    value = 0
    shift = 0
    start = pos
    while pos < end:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            if byte == 0 and pos - start > 1:
                raise MalformedPacket("variable byte integer is not minimally encoded")
            return value, pos
        if pos - start == 4:
            raise MalformedPacket("variable byte integer longer than 4 bytes")
        shift += 7
    raise MalformedPacket("variable byte integer runs past the end of the packet")


def read_byte(data: bytes, pos: int, end: int) -> tuple[int, int]:
    """Read one byte."""
    if pos >= end:
        raise MalformedPacket("packet too short: missing a byte")
    return data[pos], pos + 1


def read_u16(data: bytes, pos: int, end: int) -> tuple[int, int]:
    """Read a two byte integer (big endian)."""
    if pos + 2 > end:
        raise MalformedPacket("packet too short: missing a two byte integer")
    return (data[pos] << 8) | data[pos + 1], pos + 2


def read_u32(data: bytes, pos: int, end: int) -> tuple[int, int]:
    """Read a four byte integer (big endian)."""
    if pos + 4 > end:
        raise MalformedPacket("packet too short: missing a four byte integer")
    return int.from_bytes(data[pos : pos + 4], "big"), pos + 4


def decode_utf8(raw: bytes) -> str:
    """Decode a UTF-8 string field: well-formed, no surrogates, no U+0000 ([MQTT-1.5.4-1/2])."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise MalformedPacket("string is not valid UTF-8") from None
    if "\x00" in text:
        raise MalformedPacket("string contains U+0000")
    return text


def read_bin(data: bytes, pos: int, end: int) -> tuple[bytes, int]:
    """Read binary data: a two byte length then that many bytes."""
    if pos + 2 > end:
        raise MalformedPacket("packet too short: missing a length prefix")
    stop = pos + 2 + ((data[pos] << 8) | data[pos + 1])
    if stop > end:
        raise MalformedPacket("length prefix runs past the end of the packet")
    return data[pos + 2 : stop], stop


def read_str(data: bytes, pos: int, end: int) -> tuple[str, int]:
    """Read a UTF-8 encoded string: a two byte length then that many UTF-8 bytes."""
    raw, pos = read_bin(data, pos, end)
    return decode_utf8(raw), pos


def read_pair(data: bytes, pos: int, end: int) -> tuple[tuple[str, str], int]:
    """Read a UTF-8 string pair (user property)."""
    key, pos = read_str(data, pos, end)
    value, pos = read_str(data, pos, end)
    return (key, value), pos


# --------------------------------------------------------------------------- encoding


def enc_varint(value: int) -> bytes:
    """Encode a variable byte integer (0 .. 268,435,455)."""
    if 0 <= value < 0x80:
        return _ONE_BYTE[value]
    if not 0 <= value <= MAX_VARINT:
        raise LocalProtocolError(f"{value} does not fit a variable byte integer")
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def fixed_header(first: int, remaining_length: int) -> bytes:
    """The fixed header: type/flags byte and remaining length."""
    if remaining_length < 0x80:
        return bytes((first, remaining_length))
    return _ONE_BYTE[first] + enc_varint(remaining_length)


def enc_u16(value: int) -> bytes:
    """Encode a two byte integer; OverflowError if out of range."""
    return value.to_bytes(2, "big")


def enc_u32(value: int) -> bytes:
    """Encode a four byte integer; OverflowError if out of range."""
    return value.to_bytes(4, "big")


def enc_bin(value: bytes) -> bytes:
    """Encode binary data with its two byte length (OverflowError above 65535 bytes)."""
    return len(value).to_bytes(2, "big") + value


def enc_str(value: str) -> bytes:
    """Encode a UTF-8 string field; U+0000 and lone surrogates are refused."""
    if "\x00" in value:
        raise LocalProtocolError("strings must not contain U+0000")
    raw = value.encode("utf-8")
    return len(raw).to_bytes(2, "big") + raw


def enc_pair(pair: tuple[str, str]) -> bytes:
    """Encode a UTF-8 string pair."""
    return enc_str(pair[0]) + enc_str(pair[1])
