"""PUBLISH (MQTT 3.1.1 section 3.3, 5.0 section 3.3): the broker's hot path.

How this works: same shape as the other packet-family modules (`decode_publish(first, data,
pos, end, version)` / `encode_publish(packet, version)`), but written for speed: fields are
read by indexing and slicing the packet bytes directly, the topic checks are `in` tests on
the decoded string, and "no properties" (a single 0x00 byte in v5, nothing in 3.1.1) skips
the property machinery both ways. The fixed-header flags (QoS 3, DUP with QoS 0) have
already been rejected by the decoder's first-byte table.

Topic rules on decode: U+0000 or invalid UTF-8 is malformed (0x81); `+` or `#` is
`TopicNameInvalid` (0x90); an empty topic is a Protocol Error (0x82) in 5.0 unless a Topic
Alias property is present (the session resolves the alias), and `TopicNameInvalid` in 3.1.1.
A QoS > 0 PUBLISH needs a non-zero packet identifier (Protocol Error otherwise).

`reemit_qos0` is the helper for forwarding an already-received QoS 0 PUBLISH without
re-encoding it: same bytes, RETAIN bit set as asked.
"""

from __future__ import annotations

from gateway.broker.codec import topics
from gateway.broker.codec.errors import (
    LocalProtocolError,
    MalformedPacket,
    MQTTProtocolError,
    ProtocolError,
    TopicNameInvalid,
)
from gateway.broker.codec.packets import MQTT_5, NO_PROPERTIES, Publish
from gateway.broker.codec.properties import decode_properties, encode_properties
from gateway.broker.codec.wire import fixed_header

__all__ = ["decode_publish", "encode_publish", "encode_publish_shape", "reemit_qos0"]


def decode_publish(first: int, data: bytes, pos: int, end: int, version: int) -> Publish:
    """Decode a PUBLISH body (topic, packet id, v5 properties, payload)."""
    stop = pos + 2
    if stop > end:
        raise MalformedPacket("PUBLISH too short for a topic name")
    stop += (data[pos] << 8) | data[pos + 1]
    if stop > end:
        raise MalformedPacket("PUBLISH topic name runs past the end of the packet")
    try:
        topic = data[pos + 2 : stop].decode("utf-8")
    except UnicodeDecodeError:
        raise MalformedPacket("PUBLISH topic name is not valid UTF-8") from None
    if "\x00" in topic:
        raise MalformedPacket("PUBLISH topic name contains U+0000")
    if "+" in topic or "#" in topic:
        raise TopicNameInvalid(f"PUBLISH topic name {topic!r} contains a wildcard")
    pos = stop
    qos = (first >> 1) & 0x03
    packet_id = None
    if qos:
        if pos + 2 > end:
            raise MalformedPacket("PUBLISH too short for a packet identifier")
        packet_id = (data[pos] << 8) | data[pos + 1]
        if not packet_id:
            raise ProtocolError("PUBLISH QoS > 0 with packet identifier 0")  # [MQTT-2.3.1-1]
        pos += 2
    props = NO_PROPERTIES
    if version == MQTT_5:
        if pos < end and data[pos] == 0:
            pos += 1
        else:
            props, pos = decode_properties(data, pos, end, "PUBLISH")
            if props.response_topic is not None:
                topics.validate_topic_name(props.response_topic)
        if not topic and props.topic_alias is None:
            raise ProtocolError("PUBLISH with an empty topic name and no topic alias")
    elif not topic:
        raise TopicNameInvalid("PUBLISH topic name is empty")  # [MQTT-4.7.3-1]
    return Publish(
        topic, data[pos:end], qos, bool(first & 0x01), bool(first & 0x08), packet_id, props
    )


def encode_publish(packet: Publish, version: int) -> bytes:
    """Encode PUBLISH; properties are dropped for 3.1 / 3.1.1."""
    topic = packet.topic
    if "+" in topic or "#" in topic or "\x00" in topic:
        raise LocalProtocolError(f"invalid topic name {topic!r}")
    raw_topic = topic.encode("utf-8")
    qos = packet.qos
    payload = packet.payload
    v5 = version == MQTT_5
    if v5:
        props = packet.properties
        if props is NO_PROPERTIES:
            tail = b"\x00"
        else:
            if props.response_topic is not None:
                _check_topic(props.response_topic)
            tail = encode_properties(props, "PUBLISH")
        if not topic and props.topic_alias is None:
            raise LocalProtocolError("empty topic name without a topic alias")
    else:
        tail = b""
        if not topic:
            raise LocalProtocolError("empty topic name")
    if qos:
        packet_id = packet.packet_id
        if not packet_id or qos > 2:
            raise LocalProtocolError(f"QoS {qos} PUBLISH needs QoS 1/2 and a non-zero packet id")
        tail = packet_id.to_bytes(2, "big") + tail
    elif packet.packet_id is not None or packet.dup:
        raise LocalProtocolError("QoS 0 PUBLISH carries no packet identifier and no DUP flag")
    first = 0x30 | (qos << 1)
    if packet.retain:
        first |= 0x01
    if packet.dup:
        first |= 0x08
    remaining = 2 + len(raw_topic) + len(tail) + len(payload)
    head = bytes((first, remaining)) if remaining < 0x80 else fixed_header(first, remaining)
    return head + len(raw_topic).to_bytes(2, "big") + raw_topic + tail + payload


def encode_publish_shape(topic: str, payload: bytes, with_id: bool, v5: bool
                         ) -> tuple[bytes, int]:
    """A PUBLISH without properties as the router shares it between subscribers: QoS 0, or
    QoS 1 with packet identifier 1, no flags; also the offset of the packet identifier (0
    without one). The same bytes as `encode_publish` of that packet, without building one:
    this runs once per routed QoS 1 message."""
    if not topic or "+" in topic or "#" in topic or "\x00" in topic:
        raise LocalProtocolError(f"invalid topic name {topic!r}")
    try:
        raw_topic = topic.encode("utf-8")
        size = len(raw_topic)
        tail = (b"\x00\x01\x00" if v5 else b"\x00\x01") if with_id else (
            b"\x00" if v5 else b"")
        remaining = 2 + size + len(tail) + len(payload)
        first = 0x32 if with_id else 0x30
        head = bytes((first, remaining)) if remaining < 0x80 else fixed_header(first, remaining)
        data = head + size.to_bytes(2, "big") + raw_topic + tail + payload
    except (OverflowError, ValueError) as exc:  # as `encode` reports them
        raise LocalProtocolError(f"cannot encode Publish: {exc}") from exc
    return data, (len(head) + 2 + size if with_id else 0)


def _check_topic(topic: str) -> None:
    try:
        topics.validate_topic_name(topic)
    except MQTTProtocolError as exc:
        raise LocalProtocolError(str(exc)) from None


def reemit_qos0(raw: bytes | bytearray | memoryview, retain: bool = False) -> bytes:
    """Bytes to forward an already-received QoS 0 PUBLISH, with RETAIN set to `retain`.

    `raw` is exactly the received packet (`buf[:bytes_consumed]` from `decode`). The bytes
    are only reusable for a subscriber of the same wire format (3.1/3.1.1 to 3.1/3.1.1, or
    5.0 to 5.0 when no topic alias or subscription identifier has to change) at QoS 0.
    """
    if len(raw) < 2 or raw[0] & 0xFE != 0x30:
        raise LocalProtocolError("reemit_qos0 needs the bytes of a QoS 0 PUBLISH")
    data = bytes(raw)
    bit = 0x01 if retain else 0x00
    if data[0] & 0x01 == bit:
        return data
    return bytes((0x30 | bit,)) + data[1:]
