"""One encoding per outgoing shape, shared by every subscriber of that shape."""

from __future__ import annotations

import pytest

from gateway.broker.codec import decode, encode
from gateway.broker.codec.packets import (
    MQTT_3_1,
    MQTT_3_1_1,
    MQTT_5,
    NO_PROPERTIES,
    Properties,
    Publish,
)
from gateway.broker.core.message import V3_VERSIONS, Message


def test_qos0_shape_is_shared_and_raw_bytes_are_reused() -> None:
    raw = encode(Publish("a/b", b"payload", retain=True), MQTT_3_1_1)
    message = Message("a/b", b"payload", 0, True)
    message.seed_raw(raw, V3_VERSIONS)
    first = message.encode_for(MQTT_3_1_1, 0, False, None, 0.0)
    assert first is message.encode_for(MQTT_3_1_1, 0, False, None, 0.0)
    assert first == encode(Publish("a/b", b"payload"), MQTT_3_1_1)
    assert message.encode_for(MQTT_3_1_1, 0, True, None, 0.0) == raw


def test_packet_id_and_flags_are_patched_per_subscriber() -> None:
    message = Message("t", b"x" * 200, 2, False)
    for pid, dup in ((1, False), (0x1234, True)):
        data = message.encode_for(MQTT_3_1_1, 2, False, pid, 0.0, dup=dup)
        assert data == encode(Publish("t", b"x" * 200, 2, False, dup, pid), MQTT_3_1_1)


def test_v5_remaining_expiry_and_subscription_ids() -> None:
    props = Properties(message_expiry_interval=60, user_properties=(("k", "v"),))
    message = Message("t", b"x", 1, False, props, expires_at=100.0 + 60)
    data = message.encode_for(MQTT_5, 1, False, 5, 130.0, (7,))
    result = decode(data, MQTT_5)
    assert not isinstance(result, type(None))
    packet = result[0]  # type: ignore[index]
    assert isinstance(packet, Publish)
    assert packet.properties.message_expiry_interval == 30
    assert packet.properties.subscription_identifiers == (7,)
    assert packet.properties.user_properties == (("k", "v"),)


def test_v5_raw_bytes_serve_v5_and_31x_subscribers_get_their_own_encoding() -> None:
    raw = encode(Publish("a/b", b"payload"), MQTT_5)
    message = Message("a/b", b"payload", 0, False)
    message.seed_raw(raw, (MQTT_5,))
    assert message.encode_for(MQTT_5, 0, False, None, 0.0) is raw
    v3 = message.encode_for(MQTT_3_1_1, 0, False, None, 0.0)
    assert v3 == encode(Publish("a/b", b"payload"), MQTT_3_1_1)
    assert v3 is message.encode_for(MQTT_3_1_1, 0, False, None, 0.0)
    assert message.encode_for(MQTT_3_1_1, 1, True, 9, 0.0) == encode(
        Publish("a/b", b"payload", 1, True, False, 9), MQTT_3_1_1)


@pytest.mark.parametrize("version", [MQTT_3_1, MQTT_3_1_1, MQTT_5])
@pytest.mark.parametrize("qos", [0, 1, 2])
@pytest.mark.parametrize("retain", [False, True])
@pytest.mark.parametrize("size", [0, 100, 200, 20_000])
@pytest.mark.parametrize("subscription_ids", [(), (3,)])
def test_every_shape_without_properties_is_what_encode_writes(
        version: int, qos: int, retain: bool, size: int, subscription_ids: tuple[int, ...]
) -> None:
    # shapes without properties are built without a Publish (encode_publish_shape); with a
    # subscription id a v5 copy has properties and goes through `encode`
    payload = b"p" * size
    message = Message("a/ü/c", payload, qos, False)
    pid = 0x0102 if qos else None
    for dup in ((False, True) if qos else (False,)):
        data = message.encode_for(version, qos, retain, pid, 0.0, subscription_ids, dup)
        props = (Properties(subscription_identifiers=subscription_ids)
                 if version == MQTT_5 and subscription_ids else NO_PROPERTIES)
        assert data == encode(Publish("a/ü/c", payload, qos, retain, dup, pid, props), version)
