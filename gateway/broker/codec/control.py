"""PINGREQ, PINGRESP, DISCONNECT, AUTH (MQTT 3.1.1 sections 3.12-3.14, 5.0 sections 3.12-3.15).

How this works: same shape as the other packet-family modules. PINGREQ and PINGRESP have an
empty body (a non-zero remaining length is malformed). DISCONNECT and AUTH share one layout:
in 5.0 an optional reason code and an optional property block — remaining length 0 means
"reason 0x00, no properties", 1 means "this reason, no properties" (5.0 3.14.2.1 and
3.15.2.1). The encoder writes the shortest form. A 3.1.1 DISCONNECT has an empty body (the
encoder drops the reason code and properties); AUTH does not exist before 5.0 (the decoder's
first-byte table already rejects packet type 15 there, and the encoder refuses it).
"""

from __future__ import annotations

from gateway.broker.codec.errors import LocalProtocolError, MalformedPacket
from gateway.broker.codec.packets import (
    MQTT_5,
    NO_PROPERTIES,
    Auth,
    Disconnect,
    PingReq,
    PingResp,
    Properties,
)
from gateway.broker.codec.properties import decode_properties, encode_properties
from gateway.broker.codec.reason_codes import ALLOWED_REASON_CODES
from gateway.broker.codec.wire import fixed_header

__all__ = [
    "decode_auth",
    "decode_disconnect",
    "decode_pingreq",
    "decode_pingresp",
    "encode_auth",
    "encode_disconnect",
    "encode_pingreq",
    "encode_pingresp",
]

_PINGREQ = b"\xc0\x00"
_PINGRESP = b"\xd0\x00"
_DISCONNECT_EMPTY = b"\xe0\x00"


def decode_pingreq(first: int, data: bytes, pos: int, end: int, version: int) -> PingReq:
    """Decode PINGREQ (empty body)."""
    if pos != end:
        raise MalformedPacket("PINGREQ with a non-zero remaining length")
    return PingReq()


def decode_pingresp(first: int, data: bytes, pos: int, end: int, version: int) -> PingResp:
    """Decode PINGRESP (empty body)."""
    if pos != end:
        raise MalformedPacket("PINGRESP with a non-zero remaining length")
    return PingResp()


def _reason_and_properties(
    data: bytes, pos: int, end: int, name: str
) -> tuple[int, Properties]:
    """Read the optional reason code and optional property block of DISCONNECT / AUTH."""
    if pos == end:
        return 0, NO_PROPERTIES
    code = data[pos]
    if code not in ALLOWED_REASON_CODES[name]:
        raise MalformedPacket(f"{name} reason code 0x{code:02X} is not defined")
    if pos + 1 == end:
        return code, NO_PROPERTIES
    props, pos = decode_properties(data, pos + 1, end, name)
    if pos != end:
        raise MalformedPacket(f"extra bytes after the {name} properties")
    return code, props


def decode_disconnect(first: int, data: bytes, pos: int, end: int, version: int) -> Disconnect:
    """Decode DISCONNECT (empty in 3.1.1; optional reason and properties in 5.0)."""
    if version != MQTT_5:
        if pos != end:
            raise MalformedPacket("3.1.1 DISCONNECT with a non-zero remaining length")
        return Disconnect()
    code, props = _reason_and_properties(data, pos, end, "DISCONNECT")
    return Disconnect(code, props)


def decode_auth(first: int, data: bytes, pos: int, end: int, version: int) -> Auth:
    """Decode AUTH (5.0 only; optional reason and properties)."""
    code, props = _reason_and_properties(data, pos, end, "AUTH")
    return Auth(code, props)


def encode_pingreq(packet: PingReq, version: int) -> bytes:
    """Encode PINGREQ."""
    return _PINGREQ


def encode_pingresp(packet: PingResp, version: int) -> bytes:
    """Encode PINGRESP."""
    return _PINGRESP


def _encode_reason(first: int, name: str, packet: Disconnect | Auth) -> bytes:
    code = packet.reason_code
    if code not in ALLOWED_REASON_CODES[name]:
        raise LocalProtocolError(f"0x{code:02X} is not a {name} reason code")
    block = encode_properties(packet.properties, name)
    if block == b"\x00":
        if code == 0:
            return bytes((first, 0))
        return bytes((first, 1, code))
    body = bytes((code,)) + block
    return fixed_header(first, len(body)) + body


def encode_disconnect(packet: Disconnect, version: int) -> bytes:
    """Encode DISCONNECT in its shortest form (always empty for 3.1.1)."""
    if version != MQTT_5:
        return _DISCONNECT_EMPTY
    return _encode_reason(0xE0, "DISCONNECT", packet)


def encode_auth(packet: Auth, version: int) -> bytes:
    """Encode AUTH in its shortest form (5.0 only)."""
    if version != MQTT_5:
        raise LocalProtocolError("AUTH exists only in MQTT 5.0")
    return _encode_reason(0xF0, "AUTH", packet)
