"""The lander's MQTT 5 codec (pure): PUBLISH as the uplink sends it, answers, bad packets."""

from __future__ import annotations

import pytest

from bench.fleet.gateways import publish_packet
from cloud_spark import mqtt_codec as mc

PROPS = (("gateway", "gw-1"), ("epoch", "e-1"), ("seq", "7"), ("topic", "devices/m/p"))


def _cut(packet: bytes) -> tuple[int, memoryview]:
    found = mc.split_packet(packet, 0)
    assert found is not None
    first, start, end = found
    assert end == len(packet)
    return first, memoryview(packet[start:end])


def test_a_publish_with_user_properties_is_read_whole() -> None:
    packet = publish_packet("outpost/gw-1/devices/m/p", b'{"value":1}', 513, PROPS)
    first, body = _cut(packet)
    message = mc.decode_publish(first, body)
    assert (message.topic, message.payload, message.qos, message.mid) == (
        "outpost/gw-1/devices/m/p", b'{"value":1}', 1, 513,
    )  # fmt: skip
    assert message.user_properties == list(PROPS)


def test_other_properties_are_skipped_by_their_type() -> None:
    # content type (string), message expiry (4 bytes), payload format (1 byte), a user pair
    props = b"\x03\x00\x04json" + b"\x02\x00\x00\x00\x3c" + b"\x01\x01" + b"\x26\x00\x01k\x00\x01v"
    body = b"\x00\x01t" + b"\x00\x09" + bytes([len(props)]) + props + b"data"
    message = mc.decode_publish(0x32, memoryview(body))
    assert (message.topic, message.mid, message.payload) == ("t", 9, b"data")
    assert message.user_properties == [("k", "v")]


def test_a_packet_split_across_reads_waits_for_the_rest() -> None:
    packet = publish_packet("t", b"x" * 300, 1, PROPS)
    for cut in (1, 2, 3, len(packet) - 1):
        assert mc.split_packet(packet[:cut], 0) is None
    assert mc.split_packet(packet + packet[:5], 0) == (packet[0], 3, len(packet))


def test_answers() -> None:
    connack = mc.decode_ack(0x20, memoryview(b"\x01\x00\x03\x21\x00\x40"))
    assert connack.flags & 1 and connack.codes == [0]
    assert connack.properties[mc.PROP_RECEIVE_MAXIMUM] == 64
    suback = mc.decode_ack(0x90, memoryview(b"\x00\x05\x00\x01\x87"))
    assert (suback.mid, suback.codes) == (5, [1, 0x87])
    assert mc.decode_ack(0x40, memoryview(b"\x00\x02")).codes == [0]
    assert mc.decode_ack(0xE0, memoryview(b"\x8e\x00")).codes == [0x8E]


@pytest.mark.parametrize(
    ("first", "body"),
    [
        (0x32, b"\x00\x09short"),  # the topic runs past the packet
        (0x32, b"\x00\x01t\x00\x01\x02\x7f\x00"),  # an unknown property
        (0x32, b"\x00\x01t\x00\x01\x05\x26\x00\x01k"),  # properties past their length
        (0x32, b"\x00\x01t"),  # QoS 1 without a packet id
        (0x36, b"\x00\x01t\x00\x01\x00"),  # QoS 3
        (0x32, b"\x00\x02\xff\xfe\x00\x01\x00"),  # a topic that is not UTF-8
        (0x50, b"\x00\x01"),  # PUBREC: never expected
    ],
)
def test_bad_packets_raise_a_protocol_error(first: int, body: bytes) -> None:
    with pytest.raises(mc.ProtocolError):
        if first & 0xF0 == mc.PUBLISH:
            mc.decode_publish(first, memoryview(body))
        else:
            mc.decode_ack(first, memoryview(body))


def test_a_remaining_length_of_five_bytes_is_refused() -> None:
    with pytest.raises(mc.ProtocolError):
        mc.split_packet(b"\x30\xff\xff\xff\xff\x01", 0)
