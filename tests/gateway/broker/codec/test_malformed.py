"""Malformed vectors: each raises its exact reason code, never too early, never another error."""

from __future__ import annotations

import pytest

from gateway.broker.codec import (
    NEED_DATA,
    MalformedPacket,
    MQTTProtocolError,
    PacketTooLarge,
    ProtocolError,
    TopicFilterInvalid,
    TopicNameInvalid,
    UnsupportedProtocolVersion,
    decode,
)
from tests.vectors.malformed import MALFORMED, Malformed

TRAILER = bytes.fromhex("DEADBEEF")

ERROR_CLASSES: dict[int, type[MQTTProtocolError]] = {
    0x81: MalformedPacket,
    0x82: ProtocolError,
    0x84: UnsupportedProtocolVersion,
    0x8F: TopicFilterInvalid,
    0x90: TopicNameInvalid,
    0x94: ProtocolError,  # Topic Alias invalid: a protocol error with its own code
    0x95: PacketTooLarge,
}


def _id(case: Malformed) -> str:
    return case.name


@pytest.mark.parametrize("case", MALFORMED, ids=_id)
def test_raises_exact_reason_code(case: Malformed) -> None:
    with pytest.raises(MQTTProtocolError) as info:
        decode(case.data, case.version, case.max_packet_size)
    assert info.value.reason_code == case.reason_code, info.value.reason
    assert isinstance(info.value, ERROR_CLASSES[case.reason_code])


@pytest.mark.parametrize("case", MALFORMED, ids=_id)
def test_trailing_bytes_do_not_change_the_error(case: Malformed) -> None:
    with pytest.raises(MQTTProtocolError) as info:
        decode(bytearray(case.data + TRAILER), case.version, case.max_packet_size)
    assert info.value.reason_code == case.reason_code
    # In place, the bytes around the packet are there to be misread: they must not be.
    with pytest.raises(MQTTProtocolError) as info:
        decode(TRAILER + case.data + TRAILER, case.version, case.max_packet_size, len(TRAILER))
    assert info.value.reason_code == case.reason_code


@pytest.mark.parametrize("case", MALFORMED, ids=_id)
def test_prefixes_need_data_or_raise_the_same_code(case: Malformed) -> None:
    data = case.data
    for size in range(len(data)):
        try:
            result = decode(data[:size], case.version, case.max_packet_size)
        except MQTTProtocolError as exc:
            assert exc.reason_code == case.reason_code, (size, exc.reason)
        else:
            assert result is NEED_DATA, size


def test_enough_cases() -> None:
    assert len(MALFORMED) >= 110
    assert len({case.name for case in MALFORMED}) == len(MALFORMED)
    assert any(case.reason_code == 0x95 and len(case.data) <= 5 for case in MALFORMED)


def test_too_large_is_refused_from_the_fixed_header_alone() -> None:
    with pytest.raises(PacketTooLarge):
        decode(b"\x30\x80\x80\x01", 4, max_packet_size=10_000)  # 16384-byte body announced
    assert decode(b"\x30\x80\x80\x01", 4, max_packet_size=16_388) is NEED_DATA


def test_connect_errors_carry_the_protocol_level() -> None:
    # v5 CONNECT with receive maximum 0: the broker can answer with a v5 CONNACK 0x82.
    data = bytes.fromhex("1010 00044d515454 05 02 003c 03 210000 0000")
    with pytest.raises(ProtocolError) as info:
        decode(data, 0)
    assert info.value.protocol_level == 5
    with pytest.raises(UnsupportedProtocolVersion) as unsupported:
        decode(bytes.fromhex("100c 00044d515454 06 02 003c 0000"), 0)
    assert unsupported.value.protocol_level == 6
    with pytest.raises(MalformedPacket) as garbage:
        decode(bytes.fromhex("100c 00044d515458 04 02 003c 0000"), 0)
    assert garbage.value.protocol_level is None


def test_invalid_version_argument_is_local_misuse() -> None:
    from gateway.broker.codec import LocalProtocolError

    with pytest.raises(LocalProtocolError):
        decode(b"\xc0\x00", 6)
