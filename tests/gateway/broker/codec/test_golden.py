"""Golden vectors: decoded whole, byte by byte and with trailing bytes; encoded exactly."""

from __future__ import annotations

import pytest

from gateway.broker.codec import NEED_DATA, Connect, PacketType, decode, encode
from gateway.broker.codec.packets import NO_PROPERTIES, Properties
from gateway.broker.codec.properties import PROPERTY_TABLE
from tests.vectors.golden import GOLDEN, NON_CANONICAL, Golden, NonCanonical

TRAILER = bytes.fromhex("DEADBEEF")


def _id(case: Golden | NonCanonical) -> str:
    return case.name


@pytest.mark.parametrize("case", GOLDEN, ids=_id)
def test_decode_whole(case: Golden) -> None:
    assert decode(case.data, case.version) == (case.packet, len(case.data))


@pytest.mark.parametrize("case", GOLDEN, ids=_id)
def test_decode_byte_by_byte(case: Golden) -> None:
    data = case.data
    buf = bytearray()
    for byte in data[:-1]:
        buf.append(byte)
        assert decode(buf, case.version) is NEED_DATA, f"decoded early at {len(buf)} bytes"
    buf.append(data[-1])
    assert decode(buf, case.version) == (case.packet, len(data))


@pytest.mark.parametrize("case", GOLDEN, ids=_id)
def test_trailing_bytes_stay_unread(case: Golden) -> None:
    buf = case.data + TRAILER
    assert decode(buf, case.version) == (case.packet, len(case.data))
    assert decode(memoryview(buf), case.version) == (case.packet, len(case.data))


@pytest.mark.parametrize("case", GOLDEN, ids=_id)
def test_decode_in_place_at_an_offset(case: Golden) -> None:
    # How the server reads a burst: one bytes object, no copy per packet.
    buf = TRAILER + case.data + TRAILER
    assert decode(buf, case.version, offset=len(TRAILER)) == (case.packet, len(case.data))


@pytest.mark.parametrize("case", GOLDEN, ids=_id)
def test_encode_exact_bytes(case: Golden) -> None:
    assert encode(case.packet, case.version).hex() == case.hex


@pytest.mark.parametrize("case", [c for c in GOLDEN if isinstance(c.packet, Connect)], ids=_id)
def test_connect_decodes_before_any_version_is_known(case: Golden) -> None:
    assert decode(case.data, 0) == (case.packet, len(case.data))


@pytest.mark.parametrize("case", NON_CANONICAL, ids=_id)
def test_non_canonical_forms(case: NonCanonical) -> None:
    assert decode(case.data + TRAILER, case.version) == (case.packet, len(case.data))
    assert encode(case.packet, case.version).hex() == case.canonical


@pytest.mark.parametrize("version", [3, 4, 5])
def test_back_to_back_stream(version: int) -> None:
    cases = [c for c in GOLDEN if c.version == version]
    stream = b"".join(c.data for c in cases)
    offset = 0
    for case in cases:
        result = decode(memoryview(stream)[offset:], version)
        assert result == (case.packet, len(case.data)), case.name
        assert decode(stream, version, offset=offset) == result, case.name
        offset += len(case.data)
    assert offset == len(stream)


def _all_properties(case: Golden) -> list[Properties]:
    props = [getattr(case.packet, "properties", NO_PROPERTIES)]
    if isinstance(case.packet, Connect) and case.packet.will is not None:
        props.append(case.packet.will.properties)
    return props


def test_table_covers_every_property() -> None:
    seen = {
        spec.name
        for case in GOLDEN
        for props in _all_properties(case)
        for spec in PROPERTY_TABLE
        if getattr(props, spec.name) not in (None, ())
    }
    assert seen == {spec.name for spec in PROPERTY_TABLE}


def test_table_covers_every_packet_type_and_version() -> None:
    seen = {(case.data[0] >> 4, case.version) for case in GOLDEN}
    wanted = {
        (ptype.value, version)
        for ptype in PacketType
        for version in (3, 4, 5)
        if ptype is not PacketType.AUTH or version == 5
    }
    assert wanted <= seen
    assert len(GOLDEN) >= 60
    assert len({case.name for case in GOLDEN}) == len(GOLDEN)
