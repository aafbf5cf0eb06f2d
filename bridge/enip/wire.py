"""CIP messages of the Logix tag services, and their answers.

Every request the bridge sends is one Multiple Service Packet (service 0x0A to the Message
Router, class 2 instance 1) carrying one or more services: Read Tag (0x4C: path, element
count), Read Tag Fragmented (0x52: the same and a byte offset, for an answer larger than one
connected message), Write Tag (0x4D: path, type, count, data), Get Instance Attribute List
(0x55 to the Symbol class 0x6B: the controller's tag list, `browse`). Its answer holds one
answer per service: reply service, general status, extended status words, data.

Pure: struct only; bridge/enip/session.py carries the bytes.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

MULTIPLE = 0x0A
READ, READ_FRAGMENTED, WRITE, LIST = 0x4C, 0x52, 0x4D, 0x55
ROUTER_PATH = b"\x20\x02\x24\x01"  # class 2 (Message Router), instance 1
# What a general status means for a tag (CIP Vol 1 appendix B; Logix 1756-PM020)
STATUS = {
    0x01: "connection failure", 0x02: "resource unavailable", 0x03: "invalid parameter",
    0x04: "no such tag (path segment error)", 0x05: "no such tag (path destination unknown)",
    0x06: "partial transfer", 0x08: "service not supported", 0x09: "invalid attribute value",
    0x0A: "attribute list error", 0x0C: "object state conflict", 0x0E: "attribute not settable",
    0x0F: "privilege violation", 0x10: "device state conflict (the controller is in a mode "
    "that refuses it)", 0x11: "reply data too large", 0x13: "not enough data",
    0x14: "attribute not supported", 0x15: "too much data", 0x1E: "embedded service error",
    0x1F: "vendor specific error", 0x20: "invalid parameter", 0x26: "path size invalid",
}
EXTENDED = {  # general status 0xFF
    0x2101: "the controller is in a mode that refuses it (keyswitch in RUN?)",
    0x2104: "offset beyond the end of the tag", 0x2105: "beyond the end of the tag",
    0x2107: "the data type does not match the tag's", 0x2108: "beyond the end of the tag",
}


class ProtocolError(Exception):
    """An answer that is not an answer to the request (the session is lost)."""


@dataclass(frozen=True, slots=True)
class Reply:
    """One service's answer."""

    service: int
    status: int
    extended: tuple[int, ...]
    data: bytes

    @property
    def ok(self) -> bool:
        return self.status == 0

    def reason(self) -> str:
        """Why it failed, as a person reads it."""
        if self.status == 0xFF and self.extended:
            code = self.extended[0]
            return EXTENDED.get(code, f"extended status 0x{code:04X}")
        text = STATUS.get(self.status, f"status 0x{self.status:02X}")
        if any(self.extended):
            text += " (" + ", ".join(f"0x{code:04X}" for code in self.extended) + ")"
        return text


def read_tag(path: bytes, elements: int) -> bytes:
    """Read Tag: `elements` from the tag (element) at `path`."""
    return bytes((READ, len(path) // 2)) + path + struct.pack("<H", elements)


def read_fragment(path: bytes, elements: int, offset: int) -> bytes:
    """Read Tag Fragmented: the answer's bytes from `offset` on."""
    return bytes((READ_FRAGMENTED, len(path) // 2)) + path + struct.pack("<HI", elements,
                                                                          offset)


def write_tag(path: bytes, kind: bytes, elements: int, data: bytes) -> bytes:
    """Write Tag: `data` of the type `kind` (2 bytes, or 4 for a structure with its handle)."""
    return bytes((WRITE, len(path) // 2)) + path + kind + struct.pack("<H", elements) + data


def list_tags(after: int, program: str | None = None) -> bytes:
    """Get Instance Attribute List on the Symbol class from instance `after` on: names and
    types (attributes 1 and 2), of the controller or of one program."""
    prefix = b""
    if program is not None:
        name = program.encode("ascii")
        prefix = bytes((0x91, len(name))) + name + (b"\0" if len(name) % 2 else b"")
    path = prefix + b"\x20\x6b\x25\x00" + struct.pack("<H", after)
    return bytes((LIST, len(path) // 2)) + path + struct.pack("<HHH", 2, 1, 2)


def multiple(services: list[bytes]) -> bytes:
    """The request data of a Multiple Service Packet carrying `services`."""
    offsets, at = [], 2 + 2 * len(services)
    for service in services:
        offsets.append(at)
        at += len(service)
    return struct.pack(f"<{len(services) + 1}H", len(services), *offsets) + b"".join(services)


def request_size(services: list[bytes]) -> int:
    """Bytes of the whole connected request (its service, path, count and offsets)."""
    return 2 + len(ROUTER_PATH) + 2 + 2 * len(services) + sum(map(len, services))


def parse_reply(data: bytes) -> Reply:
    """One service's answer: reply service, reserved, status, extended size, words, data."""
    if len(data) < 4 or not data[0] & 0x80:
        raise ProtocolError(f"not a CIP answer ({data[:8].hex(' ')})")
    size = data[3]
    if len(data) < 4 + 2 * size:
        raise ProtocolError("a CIP answer shorter than its status")
    extended = struct.unpack_from(f"<{size}H", data, 4)
    return Reply(data[0] & 0x7F, data[2], extended, data[4 + 2 * size:])


def parse_multiple(answer: bytes, requests: list[bytes]) -> list[Reply]:
    """The answers of a Multiple Service Packet, one per service sent, checked to be theirs."""
    outer = parse_reply(answer)
    if outer.service != MULTIPLE:
        raise ProtocolError(f"answer to service 0x{outer.service:02X}, not to the request")
    if outer.status not in (0, 0x1E):  # 0x1E: some services failed, each says why
        raise ProtocolError(f"the Multiple Service Packet failed: {outer.reason()}")
    body = outer.data
    if len(body) < 2 or struct.unpack_from("<H", body)[0] != len(requests):
        raise ProtocolError("a Multiple Service Packet answer with another number of answers")
    offsets = [*struct.unpack_from(f"<{len(requests)}H", body, 2), len(body)]
    replies = []
    for i, request in enumerate(requests):
        if not offsets[i] < offsets[i + 1] <= len(body):
            raise ProtocolError("a Multiple Service Packet answer with bad offsets")
        reply = parse_reply(body[offsets[i]:offsets[i + 1]])
        if reply.service != request[0]:
            raise ProtocolError(f"answer to service 0x{reply.service:02X} where "
                                f"0x{request[0]:02X} was sent")
        replies.append(reply)
    return replies


def parse_tag_list(data: bytes) -> list[tuple[int, str, int]]:
    """(instance, name, symbol type) of each tag of a Get Instance Attribute List answer."""
    out, at = [], 0
    while at + 6 <= len(data):
        instance, length = struct.unpack_from("<IH", data, at)
        name = data[at + 6:at + 6 + length].decode("latin-1")
        at += 6 + length
        if at + 2 > len(data):
            raise ProtocolError("a tag list entry without its type")
        out.append((instance, name, struct.unpack_from("<H", data, at)[0]))
        at += 2
    return out


def symbol_type(symbol: int) -> tuple[str, int, bool]:
    """A tag list type word: (type name, array dimensions, a system tag or not)."""
    dimensions = symbol >> 13 & 0x3
    structure = bool(symbol & 0x8000)
    system = bool(symbol & 0x1000)
    code = symbol & 0x0FFF
    name = (f"structure 0x{code:03X}" if code != LOGIX_STRING_ID else "STRING") \
        if structure else NAMES_OF.get(code & 0xFF, f"type 0x{code:02X}")
    return name, dimensions, system


LOGIX_STRING_ID = 0x0FCE
NAMES_OF = {0xC1: "BOOL", 0xC2: "SINT", 0xC3: "INT", 0xC4: "DINT", 0xC5: "LINT",
            0xC6: "USINT", 0xC7: "UINT", 0xC8: "UDINT", 0xC9: "ULINT", 0xCA: "REAL",
            0xCB: "LREAL", 0xD3: "BOOL[32] (DWORD)"}
