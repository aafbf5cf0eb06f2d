"""MQTT 5.0 properties (spec 2.2.2): the property table and the property block codec.

How this works: `PROPERTY_TABLE` is the single source of truth, one row per property id:
the `Properties` field it fills, its wire type, the packets that may carry it ("WILL" stands
for the will properties inside CONNECT), the packets where it may repeat, and the range of
values the spec allows. Both directions are driven by that table:

- `decode_properties` reads the property length (a variable byte integer) and then
  identifier/value pairs until the block ends. An unknown identifier, or one not valid for the
  packet, is a Malformed Packet (2.2.2.2); a non-repeatable property given twice, or a value
  out of its range (receive maximum 0, maximum QoS 2, ...), is a Protocol Error.
- `encode_properties` walks the table in ascending id order and writes each present field, so
  the same `Properties` always gives the same bytes; user properties and subscription
  identifiers keep their stored order. A property the packet cannot carry raises
  `LocalProtocolError`.

The empty block (one 0x00 byte) is the fast path both ways: `NO_PROPERTIES` is returned or
written without touching the table.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

from gateway.broker.codec.errors import LocalProtocolError, MalformedPacket, ProtocolError
from gateway.broker.codec.packets import NO_PROPERTIES, Properties
from gateway.broker.codec.reason_codes import ReasonCode
from gateway.broker.codec.wire import (
    MAX_VARINT,
    enc_bin,
    enc_pair,
    enc_str,
    enc_u16,
    enc_u32,
    enc_varint,
    read_bin,
    read_byte,
    read_pair,
    read_str,
    read_u16,
    read_u32,
    read_varint,
)

__all__ = [
    "PROPERTIES_BY_ID",
    "PROPERTY_TABLE",
    "PropertySpec",
    "WireType",
    "decode_properties",
    "encode_properties",
]


class WireType(IntEnum):
    """How a property value is written on the wire."""

    BYTE = 0
    TWO_BYTE = 1
    FOUR_BYTE = 2
    VARINT = 3
    STRING = 4
    BINARY = 5
    STRING_PAIR = 6


@dataclass(frozen=True, slots=True)
class PropertySpec:
    """One row of the property table."""

    ident: int
    name: str
    wire: WireType
    packets: frozenset[str]
    repeatable_in: frozenset[str] = frozenset()
    valid: tuple[int, int] | None = None  # inclusive range the spec allows
    invalid_reason: int = ReasonCode.PROTOCOL_ERROR  # the answer to a value outside `valid`
    multi: bool = False  # the Properties field is a tuple (user properties, subscription ids)


def _p(*names: str) -> frozenset[str]:
    return frozenset(names)


_B = WireType.BYTE
_ACKS = ("PUBACK", "PUBREC", "PUBREL", "PUBCOMP")
_BOOL = (0, 1)

PROPERTY_TABLE: tuple[PropertySpec, ...] = (
    PropertySpec(0x01, "payload_format_indicator", _B, _p("PUBLISH", "WILL"), valid=_BOOL),
    PropertySpec(0x02, "message_expiry_interval", WireType.FOUR_BYTE, _p("PUBLISH", "WILL")),
    PropertySpec(0x03, "content_type", WireType.STRING, _p("PUBLISH", "WILL")),
    PropertySpec(0x08, "response_topic", WireType.STRING, _p("PUBLISH", "WILL")),
    PropertySpec(0x09, "correlation_data", WireType.BINARY, _p("PUBLISH", "WILL")),
    PropertySpec(
        0x0B, "subscription_identifiers", WireType.VARINT, _p("PUBLISH", "SUBSCRIBE"),
        repeatable_in=_p("PUBLISH"), valid=(1, MAX_VARINT), multi=True,
    ),
    PropertySpec(
        0x11, "session_expiry_interval", WireType.FOUR_BYTE, _p("CONNECT", "CONNACK", "DISCONNECT")
    ),
    PropertySpec(0x12, "assigned_client_identifier", WireType.STRING, _p("CONNACK")),
    PropertySpec(0x13, "server_keep_alive", WireType.TWO_BYTE, _p("CONNACK")),
    PropertySpec(0x15, "authentication_method", WireType.STRING, _p("CONNECT", "CONNACK", "AUTH")),
    PropertySpec(0x16, "authentication_data", WireType.BINARY, _p("CONNECT", "CONNACK", "AUTH")),
    PropertySpec(0x17, "request_problem_information", _B, _p("CONNECT"), valid=_BOOL),
    PropertySpec(0x18, "will_delay_interval", WireType.FOUR_BYTE, _p("WILL")),
    PropertySpec(0x19, "request_response_information", _B, _p("CONNECT"), valid=_BOOL),
    PropertySpec(0x1A, "response_information", WireType.STRING, _p("CONNACK")),
    PropertySpec(0x1C, "server_reference", WireType.STRING, _p("CONNACK", "DISCONNECT")),
    PropertySpec(
        0x1F, "reason_string", WireType.STRING,
        _p("CONNACK", *_ACKS, "SUBACK", "UNSUBACK", "DISCONNECT", "AUTH"),
    ),
    PropertySpec(
        0x21, "receive_maximum", WireType.TWO_BYTE, _p("CONNECT", "CONNACK"), valid=(1, 65535)
    ),
    PropertySpec(0x22, "topic_alias_maximum", WireType.TWO_BYTE, _p("CONNECT", "CONNACK")),
    PropertySpec(0x23, "topic_alias", WireType.TWO_BYTE, _p("PUBLISH"), valid=(1, 65535),
                 invalid_reason=ReasonCode.TOPIC_ALIAS_INVALID),  # 0: [MQTT-3.3.2-8]
    PropertySpec(0x24, "maximum_qos", _B, _p("CONNACK"), valid=_BOOL),
    PropertySpec(0x25, "retain_available", _B, _p("CONNACK"), valid=_BOOL),
    PropertySpec(
        0x26, "user_properties", WireType.STRING_PAIR,
        _p("CONNECT", "CONNACK", "PUBLISH", "WILL", *_ACKS, "SUBSCRIBE", "SUBACK",
           "UNSUBSCRIBE", "UNSUBACK", "DISCONNECT", "AUTH"),
        repeatable_in=_p("CONNECT", "CONNACK", "PUBLISH", "WILL", *_ACKS, "SUBSCRIBE",
                         "SUBACK", "UNSUBSCRIBE", "UNSUBACK", "DISCONNECT", "AUTH"),
        multi=True,
    ),
    PropertySpec(
        0x27, "maximum_packet_size", WireType.FOUR_BYTE, _p("CONNECT", "CONNACK"),
        valid=(1, 0xFFFFFFFF),
    ),
    PropertySpec(0x28, "wildcard_subscription_available", _B, _p("CONNACK"), valid=_BOOL),
    PropertySpec(0x29, "subscription_identifier_available", _B, _p("CONNACK"), valid=_BOOL),
    PropertySpec(0x2A, "shared_subscription_available", _B, _p("CONNACK"), valid=_BOOL),
)

PROPERTIES_BY_ID: dict[int, PropertySpec] = {spec.ident: spec for spec in PROPERTY_TABLE}

_READERS: tuple[Callable[[bytes, int, int], tuple[Any, int]], ...] = (
    read_byte, read_u16, read_u32, read_varint, read_str, read_bin, read_pair,
)


def _enc_byte(value: int) -> bytes:
    return bytes((value,))


_WRITERS: tuple[Callable[[Any], bytes], ...] = (
    _enc_byte, enc_u16, enc_u32, enc_varint, enc_str, enc_bin, enc_pair,
)
_MULTI_FIELDS = tuple(spec.name for spec in PROPERTY_TABLE if spec.multi)


def decode_properties(data: bytes, pos: int, end: int, packet: str) -> tuple[Properties, int]:
    """Decode the property block at `pos` for `packet` ("PUBLISH", "WILL", ...).

    Returns the properties and the offset just past the block.
    """
    length, pos = read_varint(data, pos, end)
    if length == 0:
        return NO_PROPERTIES, pos
    stop = pos + length
    if stop > end:
        raise MalformedPacket("property length runs past the end of the packet")
    values: dict[str, Any] = {}
    while pos < stop:
        spec = PROPERTIES_BY_ID.get(data[pos])
        if spec is None:
            raise MalformedPacket(f"unknown property identifier 0x{data[pos]:02X}")
        if packet not in spec.packets:
            raise MalformedPacket(f"property 0x{spec.ident:02X} is not valid in {packet}")
        value, pos = _READERS[spec.wire](data, pos + 1, stop)
        valid = spec.valid
        if valid is not None and not valid[0] <= value <= valid[1]:
            raise ProtocolError(f"property {spec.name} has invalid value {value}",
                                spec.invalid_reason)
        name = spec.name
        if name in values:
            if packet not in spec.repeatable_in:
                raise ProtocolError(f"property {name} (0x{spec.ident:02X}) given more than once")
            values[name].append(value)
        elif spec.multi:
            values[name] = [value]
        else:
            values[name] = value
    for name in _MULTI_FIELDS:
        if name in values:
            values[name] = tuple(values[name])
    return Properties(**values), stop


def encode_properties(props: Properties, packet: str) -> bytes:
    """Encode `props` as a property block (length + properties) for `packet`."""
    if props is NO_PROPERTIES:
        return b"\x00"
    parts: list[bytes] = []
    for spec in PROPERTY_TABLE:
        value = getattr(props, spec.name)
        if value is None or value == ():
            continue
        if packet not in spec.packets:
            raise LocalProtocolError(f"property {spec.name} cannot be sent in {packet}")
        items = value if spec.multi else (value,)
        if len(items) > 1 and packet not in spec.repeatable_in:
            raise LocalProtocolError(f"property {spec.name} can appear only once in {packet}")
        ident = bytes((spec.ident,))
        write = _WRITERS[spec.wire]
        valid = spec.valid
        for item in items:
            if valid is not None and not valid[0] <= item <= valid[1]:
                raise LocalProtocolError(f"property {spec.name} has invalid value {item}")
            parts.append(ident)
            parts.append(write(item))
    body = b"".join(parts)
    return enc_varint(len(body)) + body
