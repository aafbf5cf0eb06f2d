"""Property tests: encode then decode gives the packet back (v5-only fields dropped for 3.1.1)."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.broker.codec import (
    MQTT_5,
    NO_PROPERTIES,
    ConnAck,
    Connect,
    Disconnect,
    Packet,
    PubAck,
    PubComp,
    Publish,
    PubRec,
    PubRel,
    SubAck,
    Subscribe,
    Subscription,
    UnsubAck,
    Unsubscribe,
    decode,
    encode,
)
from tests.gateway.broker.codec.strategies import STRATEGIES


def normalise(packet: Packet, version: int) -> Packet:
    """What a 3.1 / 3.1.1 peer receives: the packet without its 5.0-only fields."""
    if version == MQTT_5:
        return packet
    if isinstance(packet, Connect):
        will = packet.will
        if will is not None:
            will = dataclasses.replace(will, properties=NO_PROPERTIES)
        return dataclasses.replace(packet, will=will, properties=NO_PROPERTIES)
    if isinstance(packet, PubAck | PubRec | PubRel | PubComp | Disconnect):
        return dataclasses.replace(packet, reason_code=0, properties=NO_PROPERTIES)
    if isinstance(packet, Subscribe):
        subs = [Subscription(sub.topic_filter, sub.qos) for sub in packet.subscriptions]
        return dataclasses.replace(packet, subscriptions=subs, properties=NO_PROPERTIES)
    if isinstance(packet, UnsubAck):
        return dataclasses.replace(packet, reason_codes=[], properties=NO_PROPERTIES)
    if isinstance(packet, ConnAck | Publish | SubAck | Unsubscribe):
        return dataclasses.replace(packet, properties=NO_PROPERTIES)
    return packet


CASES = [(kind, version) for kind in STRATEGIES for version in (3, 4, 5)
         if kind != "auth" or version == MQTT_5]


@pytest.mark.parametrize(("kind", "version"), CASES)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_encode_decode_round_trip(kind: str, version: int, data: st.DataObject) -> None:
    packet = data.draw(STRATEGIES[kind](version), label="packet")
    wire = encode(packet, version)
    expected = normalise(packet, version)
    assert decode(wire, version) == (expected, len(wire))
    assert decode(wire + b"\x00", version) == (expected, len(wire))
    # Decoding is the inverse of encoding: re-encoding the decoded packet gives the same bytes.
    assert encode(expected, version) == wire
