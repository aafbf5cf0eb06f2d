"""Dispatch: `decode` one packet from a buffer (at an offset), `encode` one packet to bytes.

How this works (sans-I/O, after h11): the caller owns the receive buffer and calls
`decode(buf, version, max_packet_size, offset)` whenever bytes arrive. The fixed header is
read first:

1. The first byte is checked against a 256-entry table per `version` (0 = no CONNECT yet,
   3, 4, 5): reserved packet type 0, wrong reserved flags (PUBREL/SUBSCRIBE/UNSUBSCRIBE
   need 0b0010, the rest 0), PUBLISH QoS 3 or DUP with QoS 0, and AUTH before 5.0 are
   malformed; with `version=0` anything but CONNECT is a Protocol Error. This happens as
   soon as one byte is buffered.
2. The remaining length (1-4 bytes) is parsed; as soon as it is complete the packet size
   is compared with `max_packet_size`, so an oversized packet is refused (`PacketTooLarge`)
   before its body is buffered.
3. If the whole packet is not buffered yet, `NEED_DATA` is returned (never an exception).
4. Otherwise the per-family decoder (connect, publish, acks, subscribe, control) parses the
   body and `(packet, bytes_consumed)` is returned; bytes after the packet are untouched.

Every failure is an `MQTTProtocolError` subclass carrying the reason code to send back.
`encode(packet, version)` picks the family encoder by packet class; misuse (values the wire
cannot carry) raises `LocalProtocolError`.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Any, Final

from gateway.broker.codec import acks, connect, control, publish, subscribe
from gateway.broker.codec.errors import (
    LocalProtocolError,
    MalformedPacket,
    PacketTooLarge,
    ProtocolError,
)
from gateway.broker.codec.packets import (
    MQTT_3_1,
    MQTT_3_1_1,
    MQTT_5,
    Auth,
    ConnAck,
    Connect,
    Disconnect,
    Packet,
    PingReq,
    PingResp,
    PubAck,
    PubComp,
    Publish,
    PubRec,
    PubRel,
    SubAck,
    Subscribe,
    UnsubAck,
    Unsubscribe,
)
from gateway.broker.codec.wire import parse_remaining_length

__all__ = ["DEFAULT_MAX_PACKET_SIZE", "NEED_DATA", "NeedData", "decode", "encode"]


class NeedData(enum.Enum):
    """Sentinel type: the buffer holds an incomplete packet."""

    NEED_DATA = 0


NEED_DATA: Final = NeedData.NEED_DATA

# 1 type byte + 4 length bytes + the largest remaining length (268,435,455).
DEFAULT_MAX_PACKET_SIZE: Final = 268_435_460

_VERSIONS = (0, MQTT_3_1, MQTT_3_1_1, MQTT_5)
# Reserved flag nibble per packet type (PUBLISH, type 3, is checked separately).
_FLAGS = (None, 0, 0, None, 0, 0, 0b0010, 0, 0b0010, 0, 0b0010, 0, 0, 0, 0, 0)


def _shape_ok(first: int, version: int) -> bool:
    """True if the first byte is a valid packet type/flags combination for `version`."""
    ptype = first >> 4
    flags = first & 0x0F
    if ptype == 0 or (ptype == 15 and version in (MQTT_3_1, MQTT_3_1_1)):
        return False
    if ptype == 3:
        qos = (flags >> 1) & 0x03
        return qos != 3 and not (qos == 0 and flags & 0x08)
    return flags == _FLAGS[ptype]


_FIRST_OK: dict[int, bytes] = {
    version: bytes(_shape_ok(b, version) and (version != 0 or b == 0x10) for b in range(256))
    for version in _VERSIONS
}


def _reject_first(first: int, version: int) -> None:
    if not _shape_ok(first, version):
        raise MalformedPacket(f"invalid fixed header byte 0x{first:02X}")
    raise ProtocolError(f"first packet must be CONNECT, got type {first >> 4}")


_Decoder = Callable[[int, bytes, int, int, int], Packet]
_DECODERS: tuple[_Decoder, ...] = (
    connect.decode_connect,  # 0: never reached, the first-byte table rejects it
    connect.decode_connect,
    connect.decode_connack,
    publish.decode_publish,
    acks.decode_ack,
    acks.decode_ack,
    acks.decode_ack,
    acks.decode_ack,
    subscribe.decode_subscribe,
    subscribe.decode_suback,
    subscribe.decode_unsubscribe,
    subscribe.decode_unsuback,
    control.decode_pingreq,
    control.decode_pingresp,
    control.decode_disconnect,
    control.decode_auth,
)


def decode(
    buf: bytes | bytearray | memoryview,
    version: int,
    max_packet_size: int = DEFAULT_MAX_PACKET_SIZE,
    offset: int = 0,
) -> tuple[Packet, int] | NeedData:
    """Decode one packet from `buf`, starting at `offset`.

    `version` is the negotiated protocol level (3, 4 or 5), or 0 before CONNECT (then only
    CONNECT is accepted). Returns `(packet, bytes_consumed)` or `NEED_DATA`; raises an
    `MQTTProtocolError` subclass (with its reason code) if the bytes break the protocol,
    `PacketTooLarge` as soon as the fixed header announces more than `max_packet_size`.
    A `bytes` buffer is read in place (the family decoders only read between the packet's
    start and end), so a reader decoding a burst of packets copies none of them.
    """
    table = _FIRST_OK.get(version)
    if table is None:
        raise LocalProtocolError(f"unknown protocol version {version!r}")
    n = len(buf) - offset
    if n <= 0:
        return NEED_DATA
    first = buf[offset]
    if not table[first]:
        _reject_first(first, version)
    if n < 2:
        return NEED_DATA
    remaining = buf[offset + 1]
    if remaining < 0x80:
        start = 2
    else:
        parsed = parse_remaining_length(buf, n, offset)
        if parsed is None:
            return NEED_DATA
        remaining, start = parsed
    total = start + remaining
    if total > max_packet_size:
        raise PacketTooLarge(f"packet of {total} bytes exceeds the maximum of {max_packet_size}")
    if n < total:
        return NEED_DATA
    if type(buf) is not bytes:
        buf = bytes(memoryview(buf)[offset : offset + total])
        offset = 0
    return _DECODERS[first >> 4](first, buf, offset + start, offset + total, version), total


_ENCODERS: dict[type, Callable[[Any, int], bytes]] = {
    Connect: connect.encode_connect,
    ConnAck: connect.encode_connack,
    Publish: publish.encode_publish,
    PubAck: acks.encode_ack,
    PubRec: acks.encode_ack,
    PubRel: acks.encode_ack,
    PubComp: acks.encode_ack,
    Subscribe: subscribe.encode_subscribe,
    SubAck: subscribe.encode_suback,
    Unsubscribe: subscribe.encode_unsubscribe,
    UnsubAck: subscribe.encode_unsuback,
    PingReq: control.encode_pingreq,
    PingResp: control.encode_pingresp,
    Disconnect: control.encode_disconnect,
    Auth: control.encode_auth,
}


def encode(packet: Packet, version: int) -> bytes:
    """Encode `packet` to its exact wire bytes for protocol level `version` (3, 4 or 5).

    Fields the version cannot carry (v5 properties, reason codes, subscription options)
    are dropped for 3.1 / 3.1.1; CONNECT is always encoded for its own `protocol_level`
    (so `version` may be 0 for it).
    Raises `LocalProtocolError` if the packet cannot be expressed on the wire.
    """
    encoder = _ENCODERS.get(type(packet))
    if encoder is None:
        raise LocalProtocolError(f"not an MQTT packet: {type(packet).__name__}")
    if version not in (MQTT_3_1, MQTT_3_1_1, MQTT_5) and encoder is not connect.encode_connect:
        raise LocalProtocolError(f"unknown protocol version {version!r}")
    try:
        return encoder(packet, version)
    except (OverflowError, ValueError) as exc:  # int.to_bytes / bytes() range, str.encode
        raise LocalProtocolError(f"cannot encode {type(packet).__name__}: {exc}") from exc
