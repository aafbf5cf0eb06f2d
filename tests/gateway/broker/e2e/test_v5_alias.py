"""MQTT 5.0 topic aliases in both directions.

Client to broker: an alias is set by a PUBLISH with topic + alias and used by a PUBLISH with an
empty topic; an alias above our topic alias maximum is DISCONNECT 0x94, an unknown alias (or
alias 0) a Protocol Error 0x82. Broker to client, only when the client's CONNECT allows it:
the first message on a topic carries topic + alias, later ones an empty topic + alias.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gateway.broker.codec import Properties, PubAck, Publish, ReasonCode
from tests.gateway.broker.e2e.v5_helpers import RawV5, connected
from tests.support.broker_proc import BrokerProcess, start_broker


@pytest.fixture(scope="module")
def no_aliases(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = start_broker(tmp_path_factory.mktemp("noalias"), "[limits]\ntopic_alias_maximum = 0\n")
    yield proc
    proc.stop()


def _aliased(topic: str, payload: bytes, alias: int, qos: int = 0, pid: int | None = None
             ) -> Publish:
    return Publish(topic, payload, qos, packet_id=pid, properties=Properties(topic_alias=alias))


def test_client_alias_is_resolved_for_subscribers(broker: BrokerProcess) -> None:
    with connected(broker, "v5a-in-sub") as sub, connected(broker, "v5a-in-pub") as pub:
        sub.subscribe("v5a/in/#", qos=1)
        pub.send(_aliased("v5a/in/one", b"set", 1))
        pub.send(_aliased("", b"use", 1))
        pub.send(_aliased("", b"use qos1", 1, qos=1, pid=9))
        assert pub.expect(PubAck).packet_id == 9
        pub.publish("v5a/in/sync", b"s", 1)
        got = [p for p in sub.sync() if isinstance(p, Publish)]
        assert [(p.topic, p.payload) for p in got] == [
            ("v5a/in/one", b"set"), ("v5a/in/one", b"use"), ("v5a/in/one", b"use qos1"),
            ("v5a/in/sync", b"s"),
        ]
        # The subscriber did not allow aliases: none is forwarded to it.
        assert all(p.properties.topic_alias is None for p in got)
        for p in got:
            if p.qos:
                sub.ack(p)


def test_client_alias_can_be_remapped(broker: BrokerProcess) -> None:
    with connected(broker, "v5a-remap-sub") as sub, connected(broker, "v5a-remap-pub") as pub:
        sub.subscribe("v5a/remap/#")
        pub.send(_aliased("v5a/remap/a", b"1", 3))
        pub.send(_aliased("v5a/remap/b", b"2", 3))
        pub.send(_aliased("", b"3", 3))
        pub.sync()
        got = [(p.topic, p.payload) for p in sub.sync() if isinstance(p, Publish)]
        assert got == [("v5a/remap/a", b"1"), ("v5a/remap/b", b"2"), ("v5a/remap/b", b"3")]


def test_alias_above_our_maximum_is_0x94(broker: BrokerProcess) -> None:
    with connected(broker, "v5a-big") as client:
        client.send(_aliased("v5a/big", b"x", 33))
        client.expect_disconnect(ReasonCode.TOPIC_ALIAS_INVALID)


def test_highest_allowed_alias_is_accepted(broker: BrokerProcess) -> None:
    with connected(broker, "v5a-max") as client:
        client.send(_aliased("v5a/max", b"x", 32))
        client.send(_aliased("", b"y", 32))
        assert client.sync() == []


def test_alias_when_we_allow_none_is_0x94(no_aliases: BrokerProcess) -> None:
    with RawV5(no_aliases) as client:
        ack = client.connect("v5a-none")
        assert ack.properties.topic_alias_maximum is None
        client.send(_aliased("v5a/none", b"x", 1))
        client.expect_disconnect(ReasonCode.TOPIC_ALIAS_INVALID)


def test_unknown_alias_is_a_protocol_error(broker: BrokerProcess) -> None:
    with connected(broker, "v5a-unknown-by") as bystander, \
            connected(broker, "v5a-unknown") as client:
        bystander.subscribe("v5a/#")
        client.send(_aliased("", b"x", 5))
        client.expect_disconnect(ReasonCode.PROTOCOL_ERROR)
        assert bystander.sync() == []


def test_alias_zero_is_an_invalid_topic_alias(broker: BrokerProcess) -> None:
    with connected(broker, "v5a-zero") as client:
        # topic "v5a/z", property block: length 3, 0x23 topic alias = 0 [MQTT-3.3.2-8]
        client.send_raw(b"\x30\x0b\x00\x05v5a/z\x03\x23\x00\x00")
        client.expect_disconnect(ReasonCode.TOPIC_ALIAS_INVALID)


def test_aliases_do_not_outlive_the_connection(broker: BrokerProcess) -> None:
    with connected(broker, "v5a-conn", session_expiry_interval=60) as client:
        client.send(_aliased("v5a/conn", b"x", 1))
        client.disconnect()
    with connected(broker, "v5a-conn", clean_start=False) as client:
        client.send(_aliased("", b"y", 1))
        client.expect_disconnect(ReasonCode.PROTOCOL_ERROR)


def test_empty_topic_without_alias_is_a_protocol_error(broker: BrokerProcess) -> None:
    with connected(broker, "v5a-empty") as client:
        client.send_raw(b"\x30\x04\x00\x00\x00x")  # topic "", no properties, payload "x"
        client.expect_disconnect(ReasonCode.PROTOCOL_ERROR)


def test_broker_sends_aliases_up_to_the_client_maximum(broker: BrokerProcess) -> None:
    with connected(broker, "v5a-out", topic_alias_maximum=2) as sub, \
            connected(broker, "v5a-out-pub") as pub:
        sub.subscribe("v5a/out/#", qos=1)
        for topic in ("a", "a", "b", "c", "a", "b", "c"):
            pub.publish(f"v5a/out/{topic}", topic.encode(), 1)
        got = sub.publishes(7)
        for p in got:
            sub.ack(p)
        seen = [(p.topic, p.properties.topic_alias, p.payload) for p in got]
        assert seen == [
            ("v5a/out/a", 1, b"a"),
            ("", 1, b"a"),
            ("v5a/out/b", 2, b"b"),
            ("v5a/out/c", None, b"c"),  # the client allows 2 aliases: both in use
            ("", 1, b"a"),
            ("", 2, b"b"),
            ("v5a/out/c", None, b"c"),
        ]


def test_no_aliases_towards_a_client_that_did_not_allow_them(broker: BrokerProcess) -> None:
    with connected(broker, "v5a-plain") as sub, connected(broker, "v5a-plain-pub") as pub:
        sub.subscribe("v5a/plain")
        for _ in range(3):
            pub.publish("v5a/plain", b"p", 1)
        got = sub.publishes(3)
        assert [(p.topic, p.properties.topic_alias) for p in got] == [("v5a/plain", None)] * 3


def test_alias_not_assumed_for_a_message_that_was_never_sent(broker: BrokerProcess) -> None:
    with connected(broker, "v5a-size", topic_alias_maximum=4, maximum_packet_size=100) as sub, \
            connected(broker, "v5a-size-pub") as pub:
        sub.subscribe("v5a/size")
        pub.publish("v5a/size", b"B" * 200, 1)  # too large for `sub`: discarded
        pub.publish("v5a/size", b"small", 1)
        [got] = sub.publishes(1)
        # The client never saw the large message, so it cannot know an alias from it.
        assert got.topic == "v5a/size"
        assert got.payload == b"small"
        pub.publish("v5a/size", b"2nd", 1)
        [again] = sub.publishes(1)
        assert (again.topic, again.properties.topic_alias) == ("", got.properties.topic_alias)
