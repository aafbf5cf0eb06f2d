"""A tiny MQTT 3.1.1 encoder and packet walker for the load generator.

Theory of operation: the load generator never builds packet objects on its hot path. It encodes
each packet shape once here (CONNECT, SUBSCRIBE, PUBLISH, PUBACK) and then sends and counts raw
bytes. Everything in a scenario has a fixed size, so a stream of PUBLISH packets can be counted
as `bytes // size` and its packet ids read with extended slices (`data[offset::size]`).

`iter_packets` is the slow, exact walker used only to verify results after a timed section.
It is deliberately independent of `gateway.broker.codec`: the benchmark must not trust the code it
measures.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

CONNACK_ACCEPTED = b"\x20\x02\x00\x00"
DISCONNECT = b"\xe0\x00"
PINGREQ = b"\xc0\x00"

PUBLISH = 0x3
PUBACK = 0x4
SUBACK = 0x9


def remaining_length(n: int) -> bytes:
    """The variable-length 'remaining length' field of the fixed header."""
    if not 0 <= n <= 268_435_455:
        raise ValueError(f"remaining length out of range: {n}")
    out = bytearray()
    while True:
        digit, n = n % 128, n // 128
        if n:
            out.append(digit | 0x80)
        else:
            out.append(digit)
            return bytes(out)


def _utf8(text: str) -> bytes:
    data = text.encode()
    return struct.pack(">H", len(data)) + data


def connect(client_id: str, keepalive: int = 600, clean: bool = True) -> bytes:
    """CONNECT for MQTT 3.1.1, no will, no credentials."""
    body = b"\x00\x04MQTT\x04" + bytes([0x02 if clean else 0x00])
    body += struct.pack(">H", keepalive) + _utf8(client_id)
    return b"\x10" + remaining_length(len(body)) + body


def subscribe(packet_id: int, topic_filter: str, qos: int) -> bytes:
    """SUBSCRIBE with one filter."""
    body = struct.pack(">H", packet_id) + _utf8(topic_filter) + bytes([qos])
    return b"\x82" + remaining_length(len(body)) + body


def publish(
    topic: str, payload: bytes, qos: int = 0, packet_id: int = 0, retain: bool = False
) -> bytes:
    """PUBLISH; `packet_id` is required (non-zero) for QoS 1 and 2."""
    if qos and not 1 <= packet_id <= 0xFFFF:
        raise ValueError("QoS > 0 needs a packet id from 1 to 65535")
    body = _utf8(topic) + (struct.pack(">H", packet_id) if qos else b"") + payload
    first = (PUBLISH << 4) | (qos << 1) | (1 if retain else 0)
    return bytes([first]) + remaining_length(len(body)) + body


def puback(packet_id: int) -> bytes:
    return struct.pack(">BBH", PUBACK << 4, 2, packet_id)


def publish_layout(topic: str, payload_size: int, qos: int) -> tuple[int, int, int]:
    """(packet size, packet-id offset, payload offset) of a PUBLISH as this module encodes it.

    The packet-id offset is -1 for QoS 0. Brokers forward PUBLISH packets in the same minimal
    encoding, so a subscriber can use the same figures for what it receives.
    """
    pid_len = 2 if qos else 0
    body_len = 2 + len(topic.encode()) + pid_len + payload_size
    header = 1 + len(remaining_length(body_len))
    pid_offset = header + 2 + len(topic.encode()) if qos else -1
    payload_offset = header + 2 + len(topic.encode()) + pid_len
    return header + body_len, pid_offset, payload_offset


def split_packet(data: bytes | bytearray | memoryview, start: int) -> tuple[int, int, int] | None:
    """(first byte, body start, packet end) of the packet at `start`, or None if incomplete."""
    end = len(data)
    if start >= end:
        return None
    first = data[start]
    length = 0
    multiplier = 1
    pos = start + 1
    for _ in range(4):
        if pos >= end:
            return None
        byte = data[pos]
        pos += 1
        length += (byte & 0x7F) * multiplier
        multiplier *= 128
        if not byte & 0x80:
            break
    else:
        raise ValueError(f"malformed remaining length at offset {start}")
    if pos + length > end:
        return None
    return first, pos, pos + length


def iter_packets(data: bytes | bytearray | memoryview) -> Iterator[tuple[int, int, int]]:
    """Every complete packet in `data` as (first byte, body start, packet end)."""
    pos = 0
    for _ in range(len(data)):
        found = split_packet(data, pos)
        if found is None:
            return
        yield found
        pos = found[2]


def publish_topic(data: bytes | bytearray | memoryview, body_start: int) -> bytes:
    """The topic name of the PUBLISH whose body starts at `body_start`."""
    (length,) = struct.unpack_from(">H", data, body_start)
    return bytes(data[body_start + 2 : body_start + 2 + length])
