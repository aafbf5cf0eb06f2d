"""Fuzzing: random and mutated bytes give a packet, NEED_DATA or an MQTTProtocolError only.

Whatever the decoder accepts must also be re-encodable, and decode back to the same packet.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.broker.codec import (
    DEFAULT_MAX_PACKET_SIZE,
    NEED_DATA,
    Connect,
    MQTTProtocolError,
    decode,
    encode,
)
from gateway.broker.codec.wire import enc_varint
from tests.vectors.golden import GOLDEN
from tests.vectors.malformed import MALFORMED

VERSIONS = st.sampled_from([0, 3, 4, 5])
MAX_SIZES = st.sampled_from([DEFAULT_MAX_PACKET_SIZE, 2, 16, 1024])
SEEDS = [case.data for case in GOLDEN] + [case.data for case in MALFORMED]


def check(buf: bytes, version: int, max_size: int = DEFAULT_MAX_PACKET_SIZE) -> None:
    """The decoder contract, for every accepted buffer type."""
    for view in (buf, bytearray(buf), memoryview(buf)):
        try:
            result = decode(view, version, max_size)
        except MQTTProtocolError as exc:
            assert 0x80 <= exc.reason_code <= 0xFF
            continue
        if result is NEED_DATA:
            continue
        packet, used = result
        assert 0 < used <= len(buf)
        assert used <= max_size
        level = packet.protocol_level if isinstance(packet, Connect) else version
        again = decode(encode(packet, level), level)
        assert again is not NEED_DATA
        assert again[0] == packet


@settings(max_examples=300, deadline=None)
@given(buf=st.binary(max_size=40), version=VERSIONS, max_size=MAX_SIZES)
def test_random_bytes(buf: bytes, version: int, max_size: int) -> None:
    check(buf, version, max_size)


@settings(max_examples=400, deadline=None)
@given(first=st.integers(0, 255), body=st.binary(max_size=48), version=VERSIONS)
def test_random_bodies_with_a_consistent_header(first: int, body: bytes, version: int) -> None:
    check(bytes((first,)) + enc_varint(len(body)) + body, version)


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    data = bytearray(draw(st.sampled_from(SEEDS)))
    for _ in range(draw(st.integers(1, 3))):
        how = draw(st.sampled_from(["flip", "truncate", "insert", "delete", "length", "byte"]))
        pos = draw(st.integers(0, max(len(data) - 1, 0)))
        if how == "flip" and data:
            data[pos] ^= 1 << draw(st.integers(0, 7))
        elif how == "truncate":
            del data[pos:]
        elif how == "insert":
            data.insert(pos, draw(st.integers(0, 255)))
        elif how == "delete" and data:
            del data[pos]
        elif how == "length" and len(data) > 1:
            data[1] = (data[1] + draw(st.integers(-3, 3))) % 256
        elif how == "byte" and data:
            data[pos] = draw(st.integers(0, 255))
    return bytes(data)


@settings(max_examples=800, deadline=None)
@given(buf=mutated(), version=VERSIONS)
def test_mutated_vectors(buf: bytes, version: int) -> None:
    check(buf, version)


@pytest.mark.parametrize("version", [0, 3, 4, 5])
def test_every_truncation_of_every_vector(version: int) -> None:
    for seed in SEEDS:
        for size in range(len(seed) + 1):
            check(seed[:size], version)
