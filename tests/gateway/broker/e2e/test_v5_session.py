"""MQTT 5.0 sessions: clean start, session expiry interval (including expiry while offline),
the session present flag, session takeover, and DISCONNECT changing the expiry."""

from __future__ import annotations

import time
from collections.abc import Callable

from gateway.broker.codec import (
    Disconnect,
    Properties,
    PubAck,
    PubComp,
    Publish,
    PubRec,
    PubRel,
    ReasonCode,
    Subscription,
)
from tests.conftest import require
from tests.gateway.broker.e2e.v5_helpers import (
    PacketTypes,
    PahoV5,
    RawV5,
    connected,
    paho_props,
    run_tool,
)
from tests.support.broker_proc import BrokerProcess


def _offline_session(broker: BrokerProcess, client_id: str, topic: str, expiry: int) -> None:
    """Create a session with a QoS 1 subscription to `topic`, then leave it offline."""
    with connected(broker, client_id, session_expiry_interval=expiry) as client:
        assert client.subscribe(topic, qos=1).reason_codes == [1]
        client.disconnect()


def _publish(broker: BrokerProcess, topic: str, payload: bytes, qos: int = 1) -> None:
    with connected(broker, f"pub-{time.monotonic_ns()}") as pub:
        pub.publish(topic, payload, qos)
        pub.disconnect()


def test_first_connect_has_no_session_present(broker: BrokerProcess) -> None:
    with RawV5(broker) as client:
        ack = client.connect("v5s-first", clean_start=False, session_expiry_interval=30)
        assert ack.reason_code == 0
        assert ack.session_present is False
        client.disconnect(properties=Properties(session_expiry_interval=0))


def test_session_resumed_with_subscriptions_and_queued_messages(broker: BrokerProcess) -> None:
    _offline_session(broker, "v5s-resume", "v5s/resume", 60)
    _publish(broker, "v5s/resume", b"while offline 1")
    _publish(broker, "v5s/resume", b"while offline 2", qos=2)
    with RawV5(broker) as client:
        ack = client.connect("v5s-resume", clean_start=False, session_expiry_interval=60)
        assert ack.reason_code == 0
        assert ack.session_present is True
        first, second = client.publishes(2)
        assert (first.payload, first.qos) == (b"while offline 1", 1)
        assert (second.payload, second.qos) == (b"while offline 2", 1)  # granted QoS 1
        client.ack(first)
        client.ack(second)
        # The subscription survived too: new messages arrive while online.
        _publish(broker, "v5s/resume", b"online")
        [third] = client.publishes(1)
        assert third.payload == b"online"
        client.ack(third)
        client.disconnect(properties=Properties(session_expiry_interval=0))


def test_clean_start_discards_the_old_session(broker: BrokerProcess) -> None:
    _offline_session(broker, "v5s-clean", "v5s/clean", 60)
    _publish(broker, "v5s/clean", b"queued")
    with RawV5(broker) as client:
        ack = client.connect("v5s-clean", clean_start=True, session_expiry_interval=60)
        assert ack.session_present is False
        assert client.sync() == []  # the queued message went with the session
        _publish(broker, "v5s/clean", b"after")
        assert client.sync() == []  # and so did the subscription
        client.disconnect(properties=Properties(session_expiry_interval=0))


def test_session_expires_after_its_interval(broker: BrokerProcess) -> None:
    _offline_session(broker, "v5s-expire", "v5s/expire", 1)
    _publish(broker, "v5s/expire", b"queued")
    time.sleep(1.8)  # 1 s expiry, checked on a 0.5 s tick
    with RawV5(broker) as client:
        ack = client.connect("v5s-expire", clean_start=False, session_expiry_interval=1)
        assert ack.reason_code == 0
        assert ack.session_present is False
        assert client.sync() == []  # neither the queued message nor the subscription survived
        _publish(broker, "v5s/expire", b"after")
        assert client.sync() == []
        client.disconnect(properties=Properties(session_expiry_interval=0))


def test_session_expiry_zero_ends_session_at_disconnect(broker: BrokerProcess) -> None:
    _offline_session(broker, "v5s-zero", "v5s/zero", 0)
    with RawV5(broker) as client:
        ack = client.connect("v5s-zero", clean_start=False)
        assert ack.session_present is False


def test_session_expiry_zero_ends_session_on_network_loss(broker: BrokerProcess) -> None:
    client = connected(broker, "v5s-zero-drop")
    client.subscribe("v5s/zero-drop", qos=1)
    client.close()  # no DISCONNECT
    with RawV5(broker) as again:
        ack = again.connect("v5s-zero-drop", clean_start=False)
        assert ack.session_present is False


def test_takeover_sends_0x8e_to_the_old_connection(broker: BrokerProcess) -> None:
    with connected(broker, "v5s-take", session_expiry_interval=60) as old:
        old.subscribe("v5s/take", qos=1)
        with RawV5(broker) as new:
            ack = new.connect("v5s-take", clean_start=False, session_expiry_interval=60)
            assert ack.reason_code == 0
            assert ack.session_present is True
            old.expect_disconnect(ReasonCode.SESSION_TAKEN_OVER)
            # The session moved with its subscription to the new connection.
            _publish(broker, "v5s/take", b"to the new one")
            [msg] = new.publishes(1)
            assert msg.payload == b"to the new one"
            new.ack(msg)
            new.disconnect(properties=Properties(session_expiry_interval=0))


def test_takeover_with_clean_start_gives_a_fresh_session(broker: BrokerProcess) -> None:
    with connected(broker, "v5s-take-clean", session_expiry_interval=60) as old:
        old.subscribe("v5s/take-clean", qos=1)
        with PahoV5(broker, "v5s-take-clean") as new:
            flags, reason, _ = new.connect(clean_start=True)
            assert reason == 0
            assert flags.session_present is False
            old.expect_disconnect(ReasonCode.SESSION_TAKEN_OVER)
            _publish(broker, "v5s/take-clean", b"nobody")
            new.sync()
            assert new.pending() == []


def test_disconnect_can_shorten_the_session_expiry(broker: BrokerProcess) -> None:
    with connected(broker, "v5s-shorten", session_expiry_interval=600) as client:
        client.subscribe("v5s/shorten", qos=1)
        client.disconnect(properties=Properties(session_expiry_interval=0))
    with RawV5(broker) as client:
        ack = client.connect("v5s-shorten", clean_start=False, session_expiry_interval=600)
        assert ack.session_present is False
        client.disconnect(properties=Properties(session_expiry_interval=0))


def test_disconnect_can_lengthen_a_nonzero_expiry(broker: BrokerProcess) -> None:
    with connected(broker, "v5s-lengthen", session_expiry_interval=1) as client:
        client.subscribe("v5s/lengthen", qos=1)
        client.disconnect(properties=Properties(session_expiry_interval=600))
    time.sleep(1.8)  # past the 1 s the CONNECT asked for
    with RawV5(broker) as client:
        ack = client.connect("v5s-lengthen", clean_start=False, session_expiry_interval=0)
        assert ack.session_present is True
        client.disconnect()


def test_disconnect_setting_expiry_after_zero_is_a_protocol_error(broker: BrokerProcess) -> None:
    with connected(broker, "v5s-zero-then") as client:
        client.send(Disconnect(0, Properties(session_expiry_interval=30)))
        client.expect_disconnect(ReasonCode.PROTOCOL_ERROR)
    with RawV5(broker) as again:
        ack = again.connect("v5s-zero-then", clean_start=False)
        assert ack.session_present is False  # the session did not become persistent


def test_paho_session_present_flag(broker: BrokerProcess) -> None:
    props = paho_props(PacketTypes.CONNECT, SessionExpiryInterval=60)
    with PahoV5(broker, "v5s-paho") as client:
        flags, reason, _ = client.connect(clean_start=True, properties=props)
        assert reason == 0 and flags.session_present is False
        client.subscribe("v5s/paho", 1)
    _publish(broker, "v5s/paho", b"kept for paho")
    with PahoV5(broker, "v5s-paho") as client:
        flags, reason, _ = client.connect(clean_start=False, properties=props)
        assert reason == 0 and flags.session_present is True
        msg = client.get()
        assert (msg.topic, msg.payload, msg.qos) == ("v5s/paho", b"kept for paho", 1)
    with RawV5(broker) as cleanup:
        cleanup.connect("v5s-paho", clean_start=True)
        cleanup.disconnect()


def test_mosquitto_clients_persistent_session(broker: BrokerProcess) -> None:
    sub = require("mosquitto_sub")
    pub = require("mosquitto_pub")
    common = [
        "-h", broker.host, "-p", str(broker.port), "-V", "mqttv5", "-i", "v5s-mosq",
        "-c", "-x", "60", "-q", "1", "-t", "v5s/mosq",
    ]
    done = run_tool([sub, *common, "-E"])  # subscribe and exit: the session stays
    assert done.returncode == 0, done.stderr
    sent = run_tool([pub, "-h", broker.host, "-p", str(broker.port), "-V", "mqttv5",
                     "-q", "1", "-t", "v5s/mosq", "-m", "queued for mosquitto_sub"])
    assert sent.returncode == 0, sent.stderr
    got = run_tool([sub, *common, "-C", "1", "-W", "5"])
    assert got.returncode == 0, got.stderr
    assert got.stdout == "queued for mosquitto_sub\n"
    with RawV5(broker) as cleanup:
        cleanup.connect("v5s-mosq", clean_start=True)
        cleanup.disconnect()


def test_unacknowledged_messages_resent_with_dup_and_same_ids(broker: BrokerProcess) -> None:
    with connected(broker, "v5s-dup", session_expiry_interval=60) as client:
        client.subscribe(Subscription("v5s/dup/1", 1), Subscription("v5s/dup/2", 2))
        _publish(broker, "v5s/dup/1", b"q1")
        _publish(broker, "v5s/dup/2", b"q2", qos=2)
        q1, q2 = client.publishes(2)
        assert (q1.dup, q2.dup) == (False, False)
        client.send(PubRec(q2.packet_id or 0))  # QoS 2 half done: PUBREL outstanding
        assert client.expect(PubRel).packet_id == q2.packet_id
        client.close()  # network loss, neither PUBACK nor PUBCOMP
    with RawV5(broker) as client:
        ack = client.connect("v5s-dup", clean_start=False, session_expiry_interval=60)
        assert ack.session_present is True
        resent = client.sync()
        assert len(resent) == 2, resent
        again, pubrel = resent
        assert isinstance(again, Publish) and isinstance(pubrel, PubRel)
        assert (again.payload, again.dup, again.packet_id) == (b"q1", True, q1.packet_id)
        assert pubrel.packet_id == q2.packet_id
        client.send(PubAck(q1.packet_id or 0))
        client.send(PubComp(q2.packet_id or 0))
        assert client.sync() == []
        client.disconnect(properties=Properties(session_expiry_interval=0))


def test_resend_respects_a_smaller_receive_maximum(broker: BrokerProcess) -> None:
    with connected(broker, "v5s-shrink", session_expiry_interval=60) as client:
        client.subscribe("v5s/shrink", qos=1)
        with connected(broker, "v5s-shrink-pub") as pub:
            for i in range(5):
                pub.publish("v5s/shrink", b"%d" % i, 1)
        first = client.publishes(5)
        client.close()  # five in flight, none acknowledged
    with RawV5(broker) as client:
        ack = client.connect(
            "v5s-shrink", clean_start=False, session_expiry_interval=60, receive_maximum=2
        )
        assert ack.session_present is True
        window = client.sync()
        assert len(window) == 2, window  # [MQTT-3.3.4-9]
        seen = []
        while len(seen) < 5:
            assert window, "the broker stopped resending"
            head = window.pop(0)
            assert isinstance(head, Publish) and head.dup
            seen.append(head)
            client.send(PubAck(head.packet_id or 0))
            window += client.sync()
            assert len(window) <= 2
        # Same messages, same packet identifiers, in order.
        assert [(p.payload, p.packet_id) for p in seen] == [
            (p.payload, p.packet_id) for p in first
        ]
        assert client.sync() == []
        client.disconnect(properties=Properties(session_expiry_interval=0))


def test_v5_clients_told_when_the_broker_shuts_down(broker_factory: Callable[..., BrokerProcess]
                                                    ) -> None:
    own = broker_factory()
    with connected(own, "v5s-shutdown") as client:
        own.stop()
        client.expect_disconnect(ReasonCode.SERVER_SHUTTING_DOWN)
