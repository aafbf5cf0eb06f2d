"""PUBACK, PUBREC, PUBREL, PUBCOMP (MQTT 3.1.1 sections 3.4-3.7, 5.0 sections 3.4-3.7).

How this works: the four QoS acknowledgements have one layout, so one decoder and one
encoder serve all four, keyed by packet type. The body is a non-zero packet identifier; in
5.0 it may be followed by a reason code and a property block, and both may be left out:
remaining length 2 means "reason 0x00, no properties", 3 means "this reason, no properties"
(5.0 3.4.2.1). The decoder accepts all three forms; the encoder always writes the shortest
one. For 3.1 / 3.1.1 the remaining length must be exactly 2, and the encoder drops the
reason code and properties. A reason code not listed for the packet in
`ALLOWED_REASON_CODES` is malformed.
"""

from __future__ import annotations

from gateway.broker.codec.errors import LocalProtocolError, MalformedPacket, ProtocolError
from gateway.broker.codec.packets import MQTT_5, NO_PROPERTIES, PubAck, PubComp, PubRec, PubRel
from gateway.broker.codec.properties import decode_properties, encode_properties
from gateway.broker.codec.reason_codes import ALLOWED_REASON_CODES
from gateway.broker.codec.wire import fixed_header

__all__ = ["PUBACK_FIRST", "QosAck", "decode_ack", "encode_ack", "short_ack"]

PUBACK_FIRST = 0x40

QosAck = PubAck | PubRec | PubRel | PubComp

# packet type -> (class, name used by the property and reason-code tables, first byte)
_BY_TYPE: dict[int, tuple[type[QosAck], str, int]] = {
    4: (PubAck, "PUBACK", 0x40),
    5: (PubRec, "PUBREC", 0x50),
    6: (PubRel, "PUBREL", 0x62),
    7: (PubComp, "PUBCOMP", 0x70),
}
_BY_CLASS = {cls: (name, first) for cls, name, first in _BY_TYPE.values()}


def decode_ack(first: int, data: bytes, pos: int, end: int, version: int) -> QosAck:
    """Decode a PUBACK / PUBREC / PUBREL / PUBCOMP body."""
    cls, name, _ = _BY_TYPE[first >> 4]
    length = end - pos
    if length < 2:
        raise MalformedPacket(f"{name} too short for a packet identifier")
    packet_id = (data[pos] << 8) | data[pos + 1]
    if not packet_id:
        raise ProtocolError(f"{name} with packet identifier 0")
    if version != MQTT_5:
        if length != 2:
            raise MalformedPacket(f"3.1.1 {name} must have a remaining length of 2")
        return cls(packet_id)
    if length == 2:
        return cls(packet_id)
    code = data[pos + 2]
    if code not in ALLOWED_REASON_CODES[name]:
        raise MalformedPacket(f"{name} reason code 0x{code:02X} is not defined")
    if length == 3:
        return cls(packet_id, code)
    props, pos = decode_properties(data, pos + 3, end, name)
    if pos != end:
        raise MalformedPacket(f"extra bytes after the {name} properties")
    return cls(packet_id, code, props)


def encode_ack(packet: QosAck, version: int) -> bytes:
    """Encode a QoS acknowledgement in its shortest valid form."""
    name, first = _BY_CLASS[type(packet)]
    packet_id = packet.packet_id
    if not packet_id:
        raise LocalProtocolError(f"{name} needs a non-zero packet identifier")
    head = packet_id.to_bytes(2, "big")
    code = packet.reason_code
    if version != MQTT_5 or (code == 0 and packet.properties is NO_PROPERTIES):
        return bytes((first, 2)) + head
    if code not in ALLOWED_REASON_CODES[name]:
        raise LocalProtocolError(f"0x{code:02X} is not a {name} reason code")
    block = encode_properties(packet.properties, name)
    if block == b"\x00":
        if code == 0:
            return bytes((first, 2)) + head
        return bytes((first, 3)) + head + bytes((code,))
    body = head + bytes((code,)) + block
    return fixed_header(first, len(body)) + body


def short_ack(first: int, packet_id: int) -> bytes:
    """The acknowledgement with fixed-header byte `first` (`PUBACK_FIRST`, ...), reason 0 and
    no properties: the bytes `encode_ack` writes for it in every version, without building a
    packet (one per QoS 1 publish taken)."""
    if not 0 < packet_id <= 0xFFFF:
        raise LocalProtocolError(f"no acknowledgement for packet identifier {packet_id}")
    return bytes((first, 2, packet_id >> 8, packet_id & 0xFF))
