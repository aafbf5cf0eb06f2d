"""The hot path's encoders without a packet object write exactly what `encode` writes.

`encode_publish_shape` (the shared PUBLISH of a routed message without properties) and
`short_ack` (PUBACK and its siblings with reason 0) replace `encode` once per message, so any
difference would reach every subscriber: they are checked against the golden vectors and, by
property, against `encode` itself, errors included.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.broker.codec import encode
from gateway.broker.codec.acks import PUBACK_FIRST, short_ack
from gateway.broker.codec.errors import LocalProtocolError
from gateway.broker.codec.packets import (
    MQTT_3_1,
    MQTT_3_1_1,
    MQTT_5,
    NO_PROPERTIES,
    PubAck,
    PubComp,
    Publish,
    PubRec,
    PubRel,
)
from gateway.broker.codec.publish import encode_publish_shape
from tests.gateway.broker.codec.strategies import PACKET_ID, TOPIC
from tests.vectors.golden import GOLDEN, Golden

VERSIONS = (MQTT_3_1, MQTT_3_1_1, MQTT_5)
ACKS = ((PubAck, 0x40), (PubRec, 0x50), (PubRel, 0x62), (PubComp, 0x70))
# payload sizes around the remaining length's 1-, 2- and 3-byte forms
PAYLOAD = st.one_of(
    st.binary(max_size=300),
    st.integers(16_370, 16_400).map(lambda n: b"p" * n),
)


def _shape_cases() -> list[Golden]:
    """Golden PUBLISHes of the form the router shares: no properties, no flags, QoS 0 or
    QoS 1 with packet identifier 1."""
    return [
        case for case in GOLDEN
        if type(case.packet) is Publish and case.packet.properties is NO_PROPERTIES
        and not case.packet.retain and not case.packet.dup
        and (case.packet.qos, case.packet.packet_id) in ((0, None), (1, 1))
    ]  # fmt: skip


def _short_ack_cases() -> list[Golden]:
    return [
        case for case in GOLDEN
        if type(case.packet) in (PubAck, PubRec, PubRel, PubComp)
        and case.packet.reason_code == 0 and case.packet.properties is NO_PROPERTIES
    ]  # fmt: skip


def _publish(topic: str, payload: bytes, with_id: bool) -> Publish:
    return Publish(topic, payload, 1 if with_id else 0, packet_id=1 if with_id else None)


def test_the_golden_tables_hold_cases_of_both_forms() -> None:
    shapes = _shape_cases()
    assert {case.packet.qos for case in shapes} == {0, 1}  # type: ignore[attr-defined]
    assert {case.version for case in shapes} >= {MQTT_3_1_1, MQTT_5}
    assert len(_short_ack_cases()) >= 4


@pytest.mark.parametrize("case", _shape_cases(), ids=lambda case: case.name)
def test_publish_shape_writes_the_golden_bytes(case: Golden) -> None:
    packet = case.packet
    assert isinstance(packet, Publish)
    data, pid_offset = encode_publish_shape(
        packet.topic, packet.payload, packet.qos == 1, case.version == MQTT_5)
    assert data.hex() == case.hex
    if packet.qos:
        assert data[pid_offset:pid_offset + 2] == b"\x00\x01"
    else:
        assert pid_offset == 0


@pytest.mark.parametrize("case", _short_ack_cases(), ids=lambda case: case.name)
def test_short_ack_writes_the_golden_bytes(case: Golden) -> None:
    packet = case.packet
    assert isinstance(packet, PubAck | PubRec | PubRel | PubComp)
    assert short_ack(case.data[0], packet.packet_id).hex() == case.hex


@settings(max_examples=400, deadline=None)
@given(topic=TOPIC, payload=PAYLOAD, with_id=st.booleans(), version=st.sampled_from(VERSIONS))
def test_publish_shape_equals_encode(topic: str, payload: bytes, with_id: bool,
                                     version: int) -> None:
    data, pid_offset = encode_publish_shape(topic, payload, with_id, version == MQTT_5)
    assert data == encode(_publish(topic, payload, with_id), version)
    if with_id:
        # where the router patches each subscriber's packet identifier
        header = 2
        while data[header - 1] & 0x80:
            header += 1
        assert pid_offset == header + 2 + len(topic.encode())
    else:
        assert pid_offset == 0


@pytest.mark.parametrize("topic", ["", "a/+", "#", "a/\x00", "bad\ud800"])
@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("with_id", [False, True])
def test_publish_shape_refuses_what_encode_refuses(topic: str, version: int,
                                                   with_id: bool) -> None:
    with pytest.raises(LocalProtocolError):
        encode(_publish(topic, b"x", with_id), version)
    with pytest.raises(LocalProtocolError):
        encode_publish_shape(topic, b"x", with_id, version == MQTT_5)


def test_publish_shape_refuses_a_topic_too_long_for_its_length_field() -> None:
    topic = "t" * 0x10000
    with pytest.raises(LocalProtocolError):
        encode(_publish(topic, b"", True), MQTT_3_1_1)
    with pytest.raises(LocalProtocolError):
        encode_publish_shape(topic, b"", True, False)


@settings(max_examples=300, deadline=None)
@given(packet_id=PACKET_ID, version=st.sampled_from(VERSIONS), kind=st.sampled_from(ACKS))
def test_short_ack_equals_encode(packet_id: int, version: int,
                                 kind: tuple[type[PubAck | PubRec | PubRel | PubComp], int]
                                 ) -> None:
    cls, first = kind
    assert short_ack(first, packet_id) == encode(cls(packet_id), version)


def test_puback_first_is_the_puback_type_byte() -> None:
    assert short_ack(PUBACK_FIRST, 1) == encode(PubAck(1), MQTT_3_1_1)


@pytest.mark.parametrize("packet_id", [0, 0x10000, -1])
def test_short_ack_refuses_what_encode_refuses(packet_id: int) -> None:
    with pytest.raises(LocalProtocolError):
        encode(PubAck(packet_id), MQTT_5)
    with pytest.raises(LocalProtocolError):
        short_ack(PUBACK_FIRST, packet_id)
