"""The MQTT 5 packets the lander sends and receives, encoded and decoded by hand (pure).

Only what a QoS 1 subscriber with a persistent session needs: CONNECT, SUBSCRIBE,
UNSUBSCRIBE, PUBLISH (QoS 1, the leave marker), PUBACK, PINGREQ and DISCONNECT out;
CONNACK, SUBACK, UNSUBACK, PUBLISH, PUBACK, PINGRESP and DISCONNECT in. Why not paho-mqtt's
parser: it builds a ``Properties`` object per PUBLISH whose setter scans every property name
with ``str.replace`` for each property, which was most of the lander's CPU (see
docs/cloud.md, "Why the lander speaks MQTT itself"). Here a PUBLISH is sliced out of the
receive buffer with ``memoryview`` and only the user properties are kept; every other
property is skipped by its type. Malformed input raises :class:`ProtocolError`.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

CONNECT, CONNACK, PUBLISH, PUBACK = 0x10, 0x20, 0x30, 0x40
SUBSCRIBE, SUBACK, UNSUBSCRIBE, UNSUBACK = 0x80, 0x90, 0xA0, 0xB0
PINGREQ, PINGRESP, DISCONNECT = 0xC0, 0xD0, 0xE0

PROP_SESSION_EXPIRY = 0x11
PROP_RECEIVE_MAXIMUM = 0x21
PROP_USER = 0x26

_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")

# property id -> value type: 1/2/4 byte integer, "v" varint, "s" UTF-8 string,
# "b" binary data, "p" string pair (MQTT 5, 2.2.2.2)
_PROPERTY_TYPES: dict[int, int | str] = {
    0x01: 1, 0x02: 4, 0x03: "s", 0x08: "s", 0x09: "b", 0x0B: "v", 0x11: 4, 0x12: "s",
    0x13: 2, 0x15: "s", 0x16: "b", 0x17: 1, 0x18: 4, 0x19: 1, 0x1A: "s", 0x1C: "s",
    0x1F: "s", 0x21: 2, 0x22: 2, 0x23: 2, 0x24: 1, 0x25: 1, 0x26: "p", 0x27: 4, 0x28: 1,
    0x29: 1, 0x2A: 1,
}  # fmt: skip


class ProtocolError(ValueError):
    """The broker sent something that is not valid MQTT 5."""


@dataclass(slots=True)
class Publish:
    """A received PUBLISH."""

    topic: str
    payload: bytes
    qos: int
    mid: int
    user_properties: list[tuple[str, str]] | None = None


@dataclass(slots=True)
class Ack:
    """CONNACK (``mid`` 0, ``flags``), SUBACK/UNSUBACK (several codes), PUBACK, DISCONNECT."""

    kind: int
    mid: int
    codes: list[int]
    flags: int = 0
    properties: dict[int, object] = field(default_factory=dict)


# -- encoding ------------------------------------------------------------------------------


def varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _utf8(text: str) -> bytes:
    data = text.encode()
    return _U16.pack(len(data)) + data


def _packet(first: int, body: bytes) -> bytes:
    return bytes([first]) + varint(len(body)) + body


def _props(session_expiry: int | None = None, receive_maximum: int | None = None) -> bytes:
    data = b""
    if session_expiry is not None:
        data += bytes([PROP_SESSION_EXPIRY]) + _U32.pack(session_expiry)
    if receive_maximum is not None:
        data += bytes([PROP_RECEIVE_MAXIMUM]) + _U16.pack(receive_maximum)
    return varint(len(data)) + data


def connect(
    client_id: str,
    *,
    keepalive: int,
    session_expiry: int,
    receive_maximum: int,
    username: str | None = None,
    password: str | None = None,
) -> bytes:
    """CONNECT without clean start (the session is resumed when the broker has it)."""
    flags = (0x80 if username is not None else 0) | (0x40 if password is not None else 0)
    body = _utf8("MQTT") + bytes([5, flags]) + _U16.pack(keepalive)
    body += _props(session_expiry, receive_maximum) + _utf8(client_id)
    if username is not None:
        body += _utf8(username)
    if password is not None:
        data = password.encode()
        body += _U16.pack(len(data)) + data
    return _packet(CONNECT, body)


def subscribe(mid: int, topic_filter: str, qos: int) -> bytes:
    body = _U16.pack(mid) + varint(0) + _utf8(topic_filter) + bytes([qos])
    return _packet(SUBSCRIBE | 0x02, body)


def unsubscribe(mid: int, topic_filter: str) -> bytes:
    return _packet(UNSUBSCRIBE | 0x02, _U16.pack(mid) + varint(0) + _utf8(topic_filter))


def publish(mid: int, topic: str, payload: bytes) -> bytes:
    """A QoS 1 PUBLISH without properties."""
    return _packet(PUBLISH | 0x02, _utf8(topic) + _U16.pack(mid) + varint(0) + payload)


def puback(mid: int) -> bytes:
    """PUBACK with reason Success (the short form: no reason code, no properties)."""
    return bytes([PUBACK, 2]) + _U16.pack(mid)


PINGREQ_PACKET = bytes([PINGREQ, 0])


def disconnect(session_expiry: int | None = None) -> bytes:
    if session_expiry is None:
        return bytes([DISCONNECT, 0])
    return _packet(DISCONNECT, b"\x00" + _props(session_expiry))


# -- decoding ------------------------------------------------------------------------------


def split_packet(buffer: bytearray | bytes, start: int) -> tuple[int, int, int] | None:
    """``(first byte, body start, body end)`` of the packet at ``start``, or None when the
    buffer does not hold all of it yet."""
    end = len(buffer)
    if start + 2 > end:
        return None
    length, shift, pos = 0, 0, start + 1
    while True:
        if pos >= end:
            return None
        byte = buffer[pos]
        pos += 1
        length |= (byte & 0x7F) << shift
        if not byte & 0x80:
            break
        shift += 7
        if shift > 21:
            raise ProtocolError("remaining length longer than 4 bytes")
    if pos + length > end:
        return None
    return buffer[start], pos, pos + length


def _varint_at(data: memoryview, pos: int) -> tuple[int, int]:
    value, shift = 0, 0
    while True:
        if pos >= len(data) or shift > 21:
            raise ProtocolError("bad variable byte integer")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7


def _str_at(data: memoryview, pos: int) -> tuple[str, int]:
    if pos + 2 > len(data):
        raise ProtocolError("string runs past the packet")
    (size,) = _U16.unpack_from(data, pos)
    pos += 2
    if pos + size > len(data):
        raise ProtocolError("string runs past the packet")
    try:
        return str(data[pos : pos + size], "utf-8"), pos + size
    except UnicodeDecodeError as exc:
        raise ProtocolError("string is not UTF-8") from exc


def _properties(
    data: memoryview, pos: int, keep: bool
) -> tuple[list[tuple[str, str]] | None, dict[int, object], int]:
    """(user properties, the other properties if ``keep``, position after them)."""
    length, pos = _varint_at(data, pos)
    end = pos + length
    if end > len(data):
        raise ProtocolError("properties run past the packet")
    users: list[tuple[str, str]] | None = None
    others: dict[int, object] = {}
    while pos < end:
        ident = data[pos]
        pos += 1
        kind = _PROPERTY_TYPES.get(ident)
        value: object
        if kind == "p":
            key, pos = _str_at(data, pos)
            text, pos = _str_at(data, pos)
            if users is None:
                users = []
            users.append((key, text))
            continue
        if kind == "s":
            value, pos = _str_at(data, pos)
        elif kind == "b":
            if pos + 2 > end:
                raise ProtocolError("properties run past their length")
            (size,) = _U16.unpack_from(data, pos)
            value, pos = bytes(data[pos + 2 : pos + 2 + size]), pos + 2 + size
        elif kind == "v":
            value, pos = _varint_at(data, pos)
        elif isinstance(kind, int):
            value, pos = int.from_bytes(data[pos : pos + kind], "big"), pos + kind
        else:
            raise ProtocolError(f"unknown property 0x{ident:02x}")
        if pos > end:
            raise ProtocolError("properties run past their length")
        if keep:
            others[ident] = value
    if pos != end:
        raise ProtocolError("properties run past their length")
    return users, others, end


def decode_publish(first: int, body: memoryview) -> Publish:
    qos = (first >> 1) & 0x03
    if qos == 3:
        raise ProtocolError("PUBLISH with QoS 3")
    topic, pos = _str_at(body, 0)
    mid = 0
    if qos:
        if pos + 2 > len(body):
            raise ProtocolError("PUBLISH without a packet id")
        (mid,) = _U16.unpack_from(body, pos)
        pos += 2
    users, _, pos = _properties(body, pos, keep=False)
    return Publish(topic, bytes(body[pos:]), qos, mid, users)


def decode_ack(first: int, body: memoryview) -> Ack:
    """CONNACK, SUBACK, UNSUBACK, PUBACK, DISCONNECT or PINGRESP."""
    kind = first & 0xF0
    if kind == PINGRESP:
        return Ack(kind, 0, [])
    if kind == CONNACK:
        if len(body) < 2:
            raise ProtocolError("short CONNACK")
        _, props, _ = _properties(body, 2, keep=True) if len(body) > 2 else (None, {}, 2)
        return Ack(kind, 0, [body[1]], flags=body[0], properties=props)
    if kind == DISCONNECT:
        return Ack(kind, 0, [body[0] if len(body) else 0])
    if len(body) < 2:
        raise ProtocolError(f"short packet 0x{first:02x}")
    (mid,) = _U16.unpack_from(body, 0)
    if kind == PUBACK:
        return Ack(kind, mid, [body[2] if len(body) > 2 else 0])
    if kind in (SUBACK, UNSUBACK):
        _, _, pos = _properties(body, 2, keep=False)
        return Ack(kind, mid, list(body[pos:]))
    raise ProtocolError(f"unexpected packet type 0x{first:02x}")
