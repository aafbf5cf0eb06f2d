"""The pure refusal decisions of CONNECT and PUBLISH: a row per refusal, and rows that pass."""

from __future__ import annotations

import pytest

from gateway.broker.codec.packets import (
    MQTT_3_1,
    MQTT_3_1_1,
    MQTT_5,
    Connect,
    Properties,
    Publish,
)
from gateway.broker.codec.reason_codes import ReasonCode
from gateway.broker.contracts.config import LimitsConfig
from gateway.broker.engine.refusals import (
    Refusal,
    connect_refusal,
    publish_refusal,
    publish_topic,
)

LIMITS = LimitsConfig(max_connections=2, max_keepalive=120, max_client_id_length=23,
                      topic_alias_maximum=4, receive_maximum=2, max_topic_length=16,
                      max_topic_levels=3)
BAD_ID = ReasonCode.CLIENT_IDENTIFIER_NOT_VALID


@pytest.mark.parametrize(
    ("packet", "clients", "internal", "reason"),
    [
        pytest.param(Connect("", MQTT_3_1), 0, False, BAD_ID, id="3.1 empty identifier"),
        pytest.param(Connect("", MQTT_3_1_1, clean_start=False), 0, False, BAD_ID,
                     id="3.1.1 empty identifier, persistent session"),
        pytest.param(Connect("c" * 24), 0, False, BAD_ID, id="identifier too long"),
        pytest.param(Connect("c", MQTT_5, properties=Properties(authentication_method="SCRAM")),
                     0, False, ReasonCode.BAD_AUTHENTICATION_METHOD, id="authentication method"),
        pytest.param(Connect("c"), 2, False, ReasonCode.SERVER_BUSY, id="max_connections"),
        pytest.param(Connect("c", keep_alive=0), 0, False, BAD_ID, id="3.1.1 no keep alive"),
        pytest.param(Connect("c", keep_alive=121), 0, False, BAD_ID,
                     id="3.1.1 keep alive over the limit"),
        pytest.param(Connect("c" * 24, keep_alive=0), 2, False, BAD_ID,
                     id="the first rule broken decides"),
        pytest.param(Connect("$outpost-x"), 0, False, BAD_ID,
                     id="a $ identifier from the network: the gateway's links' own"),
        pytest.param(Connect("$outpost-x"), 0, True, None, id="a $ identifier of a link"),
        pytest.param(Connect("c"), 1, False, None, id="accepted"),
        pytest.param(Connect(""), 0, False, None, id="3.1.1 empty identifier, clean: assigned"),
        pytest.param(Connect("", MQTT_5, clean_start=False), 0, False, None,
                     id="5.0 empty identifier: assigned"),
        pytest.param(Connect("link"), 2, True, None, id="in-process link past max_connections"),
        pytest.param(Connect("c", MQTT_5, keep_alive=0), 0, False, None,
                     id="5.0 keep alive over the limit: the server's is granted instead"),
    ],
)
def test_connect_refusal(packet: Connect, clients: int, internal: bool,
                         reason: int | None) -> None:
    refusal = connect_refusal(packet, LIMITS, clients, internal)
    assert (refusal.reason if refusal else None) == reason
    if refusal is not None:
        assert not refusal.disconnect and refusal.why


ALIASES = {1: "known/topic"}


@pytest.mark.parametrize(
    ("packet", "v5", "awaiting", "internal", "expected"),
    [
        pytest.param(Publish("t", properties=Properties(subscription_identifiers=(3,))), True,
                     set(), False, (ReasonCode.PROTOCOL_ERROR, True),
                     id="subscription identifier"),
        pytest.param(Publish("t", properties=Properties(topic_alias=5)), True, set(), False,
                     (ReasonCode.TOPIC_ALIAS_INVALID, True), id="topic alias too big"),
        pytest.param(Publish("", properties=Properties(topic_alias=2)), True, set(), False,
                     (ReasonCode.PROTOCOL_ERROR, True), id="unknown topic alias"),
        pytest.param(Publish("t", b"\xff", 1, packet_id=1,
                             properties=Properties(payload_format_indicator=1)),
                     True, set(), False, (ReasonCode.PAYLOAD_FORMAT_INVALID, False),
                     id="payload not UTF-8"),
        pytest.param(Publish("t", qos=2, packet_id=9), True, {1, 2}, False,
                     (ReasonCode.RECEIVE_MAXIMUM_EXCEEDED, True), id="receive maximum"),
        pytest.param(Publish("t" * 17, qos=1, packet_id=1), False, set(), False,
                     (ReasonCode.TOPIC_NAME_INVALID, False), id="topic too long"),
        pytest.param(Publish("a/b/c/d"), False, set(), False,
                     (ReasonCode.TOPIC_NAME_INVALID, False), id="topic too deep"),
        pytest.param(Publish("$SYS/load"), False, set(), False,
                     (ReasonCode.NOT_AUTHORIZED, False), id="$SYS"),
        pytest.param(Publish("t", qos=1, packet_id=1), True, set(), False, None, id="accepted"),
        pytest.param(Publish("", properties=Properties(topic_alias=1)), True, set(), False, None,
                     id="known topic alias"),
        pytest.param(Publish("t", b"\xff", properties=Properties(payload_format_indicator=0)), True,
                     set(), False, None, id="binary payload"),
        pytest.param(Publish("t", qos=2, packet_id=9), False, {1, 2}, False, None,
                     id="3.1.1 has no receive maximum"),
        pytest.param(Publish("t" * 17, qos=2, packet_id=1), True, {1, 2}, False, None,
                     id="a QoS 2 resend is answered, not refused"),
        pytest.param(Publish("a/b/c/d"), True, set(), True, None,
                     id="in-process link past the topic limits"),
    ],
)
def test_publish_refusal(packet: Publish, v5: bool, awaiting: set[int], internal: bool,
                         expected: tuple[int, bool] | None) -> None:
    topic = publish_topic(packet, ALIASES)
    refusal = publish_refusal(packet, topic, v5, awaiting, 0, LIMITS, internal)
    assert (None if refusal is None else (refusal.reason, refusal.disconnect)) == expected


@pytest.mark.parametrize(
    ("qos", "inflight", "awaiting", "expected"),
    [
        pytest.param(1, 2, set(), (ReasonCode.RECEIVE_MAXIMUM_EXCEEDED, True),
                     id="QoS 1 past receive maximum"),
        pytest.param(1, 1, {7}, (ReasonCode.RECEIVE_MAXIMUM_EXCEEDED, True),
                     id="QoS 1 and QoS 2 in flight count together"),
        pytest.param(2, 2, set(), (ReasonCode.RECEIVE_MAXIMUM_EXCEEDED, True),
                     id="QoS 2 behind QoS 1 in flight"),
        pytest.param(1, 1, set(), None, id="QoS 1 within receive maximum"),
        pytest.param(0, 5, {7, 8}, None, id="QoS 0 is never in flight"),
    ],
)
def test_receive_maximum_counts_qos1_in_flight(qos: int, inflight: int, awaiting: set[int],
                                               expected: tuple[int, bool] | None) -> None:
    packet = Publish("t", qos=qos, packet_id=1 if qos else None)
    refusal = publish_refusal(packet, "t", True, awaiting, inflight, LIMITS, False)
    assert (None if refusal is None else (refusal.reason, refusal.disconnect)) == expected


def test_publish_topic_through_an_alias() -> None:
    def topic(name: str, alias: int) -> str | None:
        return publish_topic(Publish(name, properties=Properties(topic_alias=alias)), ALIASES)

    assert topic("", 1) == "known/topic"
    assert topic("new", 1) == "new"
    assert topic("", 3) is None


def test_a_refusal_names_its_reason() -> None:
    refusal = connect_refusal(Connect("c"), LIMITS, 2, False)
    assert refusal == Refusal(ReasonCode.SERVER_BUSY, "limits.max_connections clients connected")
