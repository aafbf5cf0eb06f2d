"""CONNECT and CONNACK (MQTT 3.1.1 sections 3.1-3.2, 5.0 sections 3.1-3.2).

How this works: like every packet-family module, this one has `decode_<packet>(first, data,
pos, end, version)` functions that parse the body `data[pos:end]` of a packet whose fixed
header byte is `first` (the decoder has already checked the header flags and that the whole
packet is buffered), and `encode_<packet>(packet, version)` functions that return the full
wire bytes including the fixed header. 3.1 / 3.1.1 and 5.0 share one code path; `version`
(or the CONNECT's own protocol level) switches the v5-only fields on.

CONNECT carries its own protocol level, so it is decoded whatever the session version:
"MQIsdp"+3 is 3.1, "MQTT"+4 is 3.1.1, "MQTT"+5 is 5.0. A known name with another level (or
a name/level mismatch) raises `UnsupportedProtocolVersion` so the broker can answer with
CONNACK 0x01 / 0x84; any other protocol name is a `MalformedPacket` ([MQTT-3.1.2-1]: the
server may just close the connection). Once the level is known, any error raised while
decoding the rest of the CONNECT gets `protocol_level` set, so the broker can format its
CONNACK for that version.
"""

from __future__ import annotations

from gateway.broker.codec import topics
from gateway.broker.codec.errors import (
    LocalProtocolError,
    MalformedPacket,
    MQTTProtocolError,
    ProtocolError,
    UnsupportedProtocolVersion,
)
from gateway.broker.codec.packets import (
    MQTT_3_1,
    MQTT_3_1_1,
    MQTT_5,
    NO_PROPERTIES,
    ConnAck,
    Connect,
    Properties,
    Will,
)
from gateway.broker.codec.properties import decode_properties, encode_properties
from gateway.broker.codec.reason_codes import ALLOWED_REASON_CODES
from gateway.broker.codec.wire import (
    enc_bin,
    enc_str,
    enc_u16,
    fixed_header,
    read_bin,
    read_byte,
    read_str,
    read_u16,
)

__all__ = ["decode_connack", "decode_connect", "encode_connack", "encode_connect"]

_PROTOCOL_HEADERS = {
    MQTT_3_1: b"\x00\x06MQIsdp\x03",
    MQTT_3_1_1: b"\x00\x04MQTT\x04",
    MQTT_5: b"\x00\x04MQTT\x05",
}
_CONNACK_V5 = ALLOWED_REASON_CODES["CONNACK"]
_CONNACK_V3_MAX = 5  # 3.1.1 return codes 0..5; 6..255 are reserved


# --------------------------------------------------------------------------- CONNECT


def decode_connect(first: int, data: bytes, pos: int, end: int, version: int) -> Connect:
    """Decode a CONNECT body; `version` is ignored (the packet names its own level)."""
    name, pos = read_bin(data, pos, end)
    level, pos = read_byte(data, pos, end)
    if name == b"MQTT":
        if level not in (MQTT_3_1_1, MQTT_5):
            raise UnsupportedProtocolVersion(f"MQTT protocol level {level}", level)
    elif name == b"MQIsdp":
        if level != MQTT_3_1:
            raise UnsupportedProtocolVersion(f"MQIsdp protocol level {level}", level)
    else:
        raise MalformedPacket(f"unknown protocol name {name[:16]!r}")
    try:
        return _decode_connect_rest(data, pos, end, level)
    except MQTTProtocolError as exc:
        exc.protocol_level = level
        raise


def _decode_connect_rest(data: bytes, pos: int, end: int, level: int) -> Connect:
    flags, pos = read_byte(data, pos, end)
    if flags & 0x01:
        raise MalformedPacket("CONNECT reserved flag is set")  # [MQTT-3.1.2-3]
    will_flag = flags & 0x04
    will_qos = (flags >> 3) & 0x03
    will_retain = flags & 0x20
    if will_qos == 3:
        raise MalformedPacket("will QoS 3")
    if not will_flag and (will_qos or will_retain):
        raise MalformedPacket("will QoS/retain set without the will flag")  # [MQTT-3.1.2-11/13]
    has_password = flags & 0x40
    has_username = flags & 0x80
    if has_password and not has_username and level != MQTT_5:
        raise MalformedPacket("password flag without user name flag")  # [MQTT-3.1.2-22]
    keep_alive, pos = read_u16(data, pos, end)
    props = NO_PROPERTIES
    if level == MQTT_5:
        props, pos = decode_properties(data, pos, end, "CONNECT")
        if props.authentication_data is not None and props.authentication_method is None:
            raise ProtocolError("authentication data without authentication method")
    client_id, pos = read_str(data, pos, end)
    will = None
    if will_flag:
        will_props = NO_PROPERTIES
        if level == MQTT_5:
            will_props, pos = decode_properties(data, pos, end, "WILL")
            if will_props.response_topic is not None:
                topics.validate_topic_name(will_props.response_topic)
        will_topic, pos = read_str(data, pos, end)
        topics.validate_topic_name(will_topic)
        will_payload, pos = read_bin(data, pos, end)
        will = Will(will_topic, will_payload, will_qos, bool(will_retain), will_props)
    username = None
    if has_username:
        username, pos = read_str(data, pos, end)
    password = None
    if has_password:
        password, pos = read_bin(data, pos, end)
    if pos != end:
        raise MalformedPacket("extra bytes after the CONNECT payload")
    return Connect(
        client_id, level, bool(flags & 0x02), keep_alive, username, password, will, props
    )


def _check_topic(topic: str) -> None:
    try:
        topics.validate_topic_name(topic)
    except MQTTProtocolError as exc:
        raise LocalProtocolError(str(exc)) from None


def encode_connect(packet: Connect, version: int) -> bytes:
    """Encode CONNECT for `packet.protocol_level` (`version` is not used)."""
    level = packet.protocol_level
    head = _PROTOCOL_HEADERS.get(level)
    if head is None:
        raise LocalProtocolError(f"cannot encode CONNECT for protocol level {level}")
    v5 = level == MQTT_5
    flags = 0x02 if packet.clean_start else 0
    will = packet.will
    if will is not None:
        if will.qos not in (0, 1, 2):
            raise LocalProtocolError(f"will QoS {will.qos}")
        flags |= 0x04 | (will.qos << 3) | (0x20 if will.retain else 0)
    if packet.username is not None:
        flags |= 0x80
    if packet.password is not None:
        if packet.username is None and not v5:
            raise LocalProtocolError("MQTT 3.1.1 cannot send a password without a user name")
        flags |= 0x40
    parts = [head, bytes((flags,)), enc_u16(packet.keep_alive)]
    if v5:
        _check_auth(packet.properties)
        parts.append(encode_properties(packet.properties, "CONNECT"))
    parts.append(enc_str(packet.client_id))
    if will is not None:
        if v5:
            if will.properties.response_topic is not None:
                _check_topic(will.properties.response_topic)
            parts.append(encode_properties(will.properties, "WILL"))
        _check_topic(will.topic)
        parts.append(enc_str(will.topic))
        parts.append(enc_bin(will.payload))
    if packet.username is not None:
        parts.append(enc_str(packet.username))
    if packet.password is not None:
        parts.append(enc_bin(packet.password))
    body = b"".join(parts)
    return fixed_header(0x10, len(body)) + body


def _check_auth(props: Properties) -> None:
    if props.authentication_data is not None and props.authentication_method is None:
        raise LocalProtocolError("authentication data without authentication method")


# --------------------------------------------------------------------------- CONNACK


def decode_connack(first: int, data: bytes, pos: int, end: int, version: int) -> ConnAck:
    """Decode a CONNACK body (flags, reason/return code, v5 properties)."""
    if version != MQTT_5 and end - pos != 2:
        raise MalformedPacket("3.1.1 CONNACK must have a remaining length of 2")
    flags, pos = read_byte(data, pos, end)
    code, pos = read_byte(data, pos, end)
    if flags & 0xFE:
        raise MalformedPacket("CONNACK reserved flags are set")  # [MQTT-3.2.2-1]
    props = NO_PROPERTIES
    if version == MQTT_5:
        if code not in _CONNACK_V5:
            raise MalformedPacket(f"CONNACK reason code 0x{code:02X} is not defined")
        props, pos = decode_properties(data, pos, end, "CONNACK")
        if pos != end:
            raise MalformedPacket("extra bytes after the CONNACK properties")
    elif code > _CONNACK_V3_MAX:
        raise MalformedPacket(f"CONNACK return code {code} is reserved")
    if flags and code:
        raise ProtocolError("session present set on a refused connection")  # [MQTT-3.2.2-4/6]
    return ConnAck(bool(flags), code, props)


def encode_connack(packet: ConnAck, version: int) -> bytes:
    """Encode CONNACK; `reason_code` is written as given (3.1.1 return code or v5 reason)."""
    code = packet.reason_code
    if version == MQTT_5:
        if code not in _CONNACK_V5:
            raise LocalProtocolError(f"0x{code:02X} is not a CONNACK reason code")
    elif not 0 <= code <= _CONNACK_V3_MAX:
        raise LocalProtocolError(f"{code} is not a 3.1.1 CONNACK return code")
    if packet.session_present and code:
        raise LocalProtocolError("session present must be 0 when the connection is refused")
    if version != MQTT_5:
        return bytes((0x20, 2, 1 if packet.session_present else 0, code))
    body = bytes((1 if packet.session_present else 0, code)) + encode_properties(
        packet.properties, "CONNACK"
    )
    return fixed_header(0x20, len(body)) + body
