"""SUBSCRIBE, SUBACK, UNSUBSCRIBE, UNSUBACK (MQTT 3.1.1 sections 3.8-3.11, 5.0 sections 3.8-3.11).

How this works: same shape as the other packet-family modules. Each packet starts with a
non-zero packet identifier, then (5.0 only) a property block, then a list: (filter, options)
pairs for SUBSCRIBE, filters for UNSUBSCRIBE, one reason code per filter for SUBACK and (5.0
only) UNSUBACK. A 3.1.1 UNSUBACK is just the packet identifier.

Validation: an empty list is a Protocol Error in 5.0 and malformed in 3.1.1 ("protocol
violation", [MQTT-3.8.3-3]). Subscription options: reserved bits (2-7 in 3.1.1, 6-7 in 5.0)
or QoS 3 are malformed; retain handling 3 and No Local on a `$share/` filter are Protocol
Errors ([MQTT-3.8.3-4]). Filters go through `gateway.broker.codec.topics.validate_topic_filter`
(`TopicFilterInvalid`, 0x8F). Reason codes outside `ALLOWED_REASON_CODES` (3.1.1 SUBACK:
0, 1, 2, 0x80) are malformed. The encoder drops the 5.0-only options, properties and
UNSUBACK reason codes for 3.1 / 3.1.1.
"""

from __future__ import annotations

from gateway.broker.codec import topics
from gateway.broker.codec.errors import (
    LocalProtocolError,
    MalformedPacket,
    MQTTProtocolError,
    ProtocolError,
)
from gateway.broker.codec.packets import (
    MQTT_5,
    NO_PROPERTIES,
    SubAck,
    Subscribe,
    Subscription,
    UnsubAck,
    Unsubscribe,
)
from gateway.broker.codec.properties import decode_properties, encode_properties
from gateway.broker.codec.reason_codes import ALLOWED_REASON_CODES, SUBACK_FAILURE_V3
from gateway.broker.codec.wire import enc_str, fixed_header, read_byte, read_str, read_u16

__all__ = [
    "decode_suback",
    "decode_subscribe",
    "decode_unsuback",
    "decode_unsubscribe",
    "encode_suback",
    "encode_subscribe",
    "encode_unsuback",
    "encode_unsubscribe",
]

_SUBACK_V3 = frozenset({0x00, 0x01, 0x02, SUBACK_FAILURE_V3})


def _packet_id(data: bytes, pos: int, end: int, name: str) -> tuple[int, int]:
    packet_id, pos = read_u16(data, pos, end)
    if not packet_id:
        raise ProtocolError(f"{name} with packet identifier 0")  # [MQTT-2.3.1-1]
    return packet_id, pos


def _empty(name: str, version: int) -> MQTTProtocolError:
    if version == MQTT_5:
        return ProtocolError(f"{name} with an empty payload")
    return MalformedPacket(f"{name} with an empty payload")


def _codes(data: bytes, pos: int, end: int, name: str, allowed: frozenset[int]) -> list[int]:
    codes = list(data[pos:end])
    for code in codes:
        if code not in allowed:
            raise MalformedPacket(f"{name} reason code 0x{code:02X} is not defined")
    return codes


# --------------------------------------------------------------------------- decoding


def decode_subscribe(first: int, data: bytes, pos: int, end: int, version: int) -> Subscribe:
    """Decode a SUBSCRIBE body."""
    packet_id, pos = _packet_id(data, pos, end, "SUBSCRIBE")
    v5 = version == MQTT_5
    props = NO_PROPERTIES
    if v5:
        props, pos = decode_properties(data, pos, end, "SUBSCRIBE")
    reserved = 0xC0 if v5 else 0xFC
    subscriptions = []
    while pos < end:
        topic_filter, pos = read_str(data, pos, end)
        options, pos = read_byte(data, pos, end)
        if options & reserved:
            raise MalformedPacket(f"subscription options 0x{options:02X}: reserved bits set")
        qos = options & 0x03
        if qos == 3:
            raise MalformedPacket("subscription QoS 3")
        retain_handling = (options >> 4) & 0x03
        if retain_handling == 3:
            raise ProtocolError("retain handling 3")
        topics.validate_topic_filter(topic_filter)
        no_local = bool(options & 0x04)
        if no_local and topic_filter.startswith(topics.SHARE_PREFIX):
            raise ProtocolError("No Local on a shared subscription")  # [MQTT-3.8.3-4]
        subscriptions.append(
            Subscription(topic_filter, qos, no_local, bool(options & 0x08), retain_handling)
        )
    if not subscriptions:
        raise _empty("SUBSCRIBE", version)
    return Subscribe(packet_id, subscriptions, props)


def decode_suback(first: int, data: bytes, pos: int, end: int, version: int) -> SubAck:
    """Decode a SUBACK body."""
    packet_id, pos = _packet_id(data, pos, end, "SUBACK")
    props = NO_PROPERTIES
    allowed = _SUBACK_V3
    if version == MQTT_5:
        props, pos = decode_properties(data, pos, end, "SUBACK")
        allowed = ALLOWED_REASON_CODES["SUBACK"]
    if pos == end:
        raise _empty("SUBACK", version)
    return SubAck(packet_id, _codes(data, pos, end, "SUBACK", allowed), props)


def decode_unsubscribe(first: int, data: bytes, pos: int, end: int, version: int) -> Unsubscribe:
    """Decode an UNSUBSCRIBE body."""
    packet_id, pos = _packet_id(data, pos, end, "UNSUBSCRIBE")
    props = NO_PROPERTIES
    if version == MQTT_5:
        props, pos = decode_properties(data, pos, end, "UNSUBSCRIBE")
    filters = []
    while pos < end:
        topic_filter, pos = read_str(data, pos, end)
        topics.validate_topic_filter(topic_filter)
        filters.append(topic_filter)
    if not filters:
        raise _empty("UNSUBSCRIBE", version)
    return Unsubscribe(packet_id, filters, props)


def decode_unsuback(first: int, data: bytes, pos: int, end: int, version: int) -> UnsubAck:
    """Decode an UNSUBACK body (reason codes in 5.0 only)."""
    if version != MQTT_5:
        if end - pos != 2:
            raise MalformedPacket("3.1.1 UNSUBACK must have a remaining length of 2")
        packet_id, pos = _packet_id(data, pos, end, "UNSUBACK")
        return UnsubAck(packet_id)
    packet_id, pos = _packet_id(data, pos, end, "UNSUBACK")
    props, pos = decode_properties(data, pos, end, "UNSUBACK")
    if pos == end:
        raise _empty("UNSUBACK", version)
    codes = _codes(data, pos, end, "UNSUBACK", ALLOWED_REASON_CODES["UNSUBACK"])
    return UnsubAck(packet_id, codes, props)


# --------------------------------------------------------------------------- encoding


def _head(packet_id: int, name: str) -> bytes:
    if not packet_id:
        raise LocalProtocolError(f"{name} needs a non-zero packet identifier")
    return packet_id.to_bytes(2, "big")


def _check_filter(topic_filter: str) -> None:
    try:
        topics.validate_topic_filter(topic_filter)
    except MQTTProtocolError as exc:
        raise LocalProtocolError(str(exc)) from None


def _check_codes(codes: list[int], name: str, allowed: frozenset[int]) -> bytes:
    if not codes:
        raise LocalProtocolError(f"{name} needs at least one reason code")
    for code in codes:
        if code not in allowed:
            raise LocalProtocolError(f"0x{code:02X} is not a {name} reason code")
    return bytes(codes)


def encode_subscribe(packet: Subscribe, version: int) -> bytes:
    """Encode SUBSCRIBE (v5 options and properties dropped for 3.1.1)."""
    v5 = version == MQTT_5
    parts = [_head(packet.packet_id, "SUBSCRIBE")]
    if v5:
        parts.append(encode_properties(packet.properties, "SUBSCRIBE"))
    if not packet.subscriptions:
        raise LocalProtocolError("SUBSCRIBE needs at least one topic filter")
    for sub in packet.subscriptions:
        _check_filter(sub.topic_filter)
        if sub.qos not in (0, 1, 2):
            raise LocalProtocolError(f"subscription QoS {sub.qos}")
        options = sub.qos
        if v5:
            if sub.retain_handling not in (0, 1, 2):
                raise LocalProtocolError(f"retain handling {sub.retain_handling}")
            if sub.no_local and sub.topic_filter.startswith(topics.SHARE_PREFIX):
                raise LocalProtocolError("No Local cannot be set on a shared subscription")
            options |= sub.retain_handling << 4
            if sub.no_local:
                options |= 0x04
            if sub.retain_as_published:
                options |= 0x08
        parts.append(enc_str(sub.topic_filter))
        parts.append(bytes((options,)))
    body = b"".join(parts)
    return fixed_header(0x82, len(body)) + body


def encode_suback(packet: SubAck, version: int) -> bytes:
    """Encode SUBACK (properties dropped for 3.1.1)."""
    head = _head(packet.packet_id, "SUBACK")
    if version == MQTT_5:
        codes = _check_codes(packet.reason_codes, "SUBACK", ALLOWED_REASON_CODES["SUBACK"])
        body = head + encode_properties(packet.properties, "SUBACK") + codes
    else:
        body = head + _check_codes(packet.reason_codes, "SUBACK", _SUBACK_V3)
    return fixed_header(0x90, len(body)) + body


def encode_unsubscribe(packet: Unsubscribe, version: int) -> bytes:
    """Encode UNSUBSCRIBE (properties dropped for 3.1.1)."""
    parts = [_head(packet.packet_id, "UNSUBSCRIBE")]
    if version == MQTT_5:
        parts.append(encode_properties(packet.properties, "UNSUBSCRIBE"))
    if not packet.topic_filters:
        raise LocalProtocolError("UNSUBSCRIBE needs at least one topic filter")
    for topic_filter in packet.topic_filters:
        _check_filter(topic_filter)
        parts.append(enc_str(topic_filter))
    body = b"".join(parts)
    return fixed_header(0xA2, len(body)) + body


def encode_unsuback(packet: UnsubAck, version: int) -> bytes:
    """Encode UNSUBACK (reason codes and properties dropped for 3.1.1)."""
    head = _head(packet.packet_id, "UNSUBACK")
    if version != MQTT_5:
        return b"\xb0\x02" + head
    codes = _check_codes(packet.reason_codes, "UNSUBACK", ALLOWED_REASON_CODES["UNSUBACK"])
    body = head + encode_properties(packet.properties, "UNSUBACK") + codes
    return fixed_header(0xB0, len(body)) + body
