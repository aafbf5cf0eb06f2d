"""MQTT 5.0 wills: will delay interval (cancelled by a reconnect, sent after the delay, sent at
session end if that comes first), DISCONNECT 0x04 sends the will and 0x00 does not, takeover
and protocol errors send it, and will properties reach the subscriber."""

from __future__ import annotations

import time

from gateway.broker.codec import Connect, Disconnect, Properties, Publish, ReasonCode, Will
from tests.conftest import require
from tests.gateway.broker.e2e.v5_helpers import (
    Background,
    PacketTypes,
    PahoV5,
    RawV5,
    connected,
    paho_props,
)
from tests.support.broker_proc import BrokerProcess


def _will(topic: str, payload: bytes = b"gone", qos: int = 1, **props: object) -> Will:
    return Will(topic, payload, qos, False, Properties(**props))  # type: ignore[arg-type]


def _watcher(broker: BrokerProcess, topic: str) -> RawV5:
    watcher = connected(broker, f"watch-{topic.replace('/', '-')}")
    assert watcher.subscribe(topic, qos=1).reason_codes == [1]
    return watcher


def test_will_sent_after_the_delay(broker: BrokerProcess) -> None:
    with _watcher(broker, "v5w/delayed") as watcher:
        client = connected(broker, "v5w-delayed", session_expiry_interval=60,
                           will=_will("v5w/delayed", will_delay_interval=1))
        client.close()  # network loss, no DISCONNECT
        dropped_at = time.monotonic()
        assert watcher.sync() == []  # not yet: the delay has not passed
        [will] = watcher.publishes(1, timeout=5)
        assert time.monotonic() - dropped_at >= 0.9
        assert (will.topic, will.payload, will.qos) == ("v5w/delayed", b"gone", 1)
        assert will.properties.will_delay_interval is None
        watcher.ack(will)
    with RawV5(broker) as cleanup:
        cleanup.connect("v5w-delayed")
        cleanup.disconnect()


def test_will_not_sent_when_client_reconnects_within_the_delay(broker: BrokerProcess) -> None:
    with _watcher(broker, "v5w/cancel") as watcher:
        client = connected(broker, "v5w-cancel", session_expiry_interval=60,
                           will=_will("v5w/cancel", will_delay_interval=1))
        client.close()
        with connected(broker, "v5w-cancel", clean_start=False,
                       session_expiry_interval=60) as again:
            time.sleep(1.6)  # past the 1 s delay, checked on a 0.5 s tick
            assert watcher.sync() == []
            again.disconnect(properties=Properties(session_expiry_interval=0))
        assert watcher.sync() == []  # a normal DISCONNECT later does not revive it


def test_will_sent_at_session_end_if_earlier_than_delay(broker: BrokerProcess) -> None:
    with _watcher(broker, "v5w/session-end") as watcher:
        client = connected(broker, "v5w-session-end", session_expiry_interval=1,
                           will=_will("v5w/session-end", will_delay_interval=3600))
        client.close()
        [will] = watcher.publishes(1, timeout=5)  # at ~1 s, not after an hour
        assert will.payload == b"gone"
        watcher.ack(will)
    with RawV5(broker) as again:
        assert again.connect("v5w-session-end", clean_start=False).session_present is False


def test_will_sent_at_once_when_session_expiry_is_zero(broker: BrokerProcess) -> None:
    with _watcher(broker, "v5w/zero") as watcher:
        client = connected(broker, "v5w-zero", will=_will("v5w/zero", will_delay_interval=3600))
        client.close()
        [will] = watcher.publishes(1, timeout=3)
        assert will.payload == b"gone"
        watcher.ack(will)


def test_disconnect_0x04_sends_the_will(broker: BrokerProcess) -> None:
    with _watcher(broker, "v5w/with-will") as watcher:
        client = connected(broker, "v5w-with-will", will=_will("v5w/with-will", b"asked"))
        client.disconnect(ReasonCode.DISCONNECT_WITH_WILL)
        [will] = watcher.publishes(1)
        assert will.payload == b"asked"
        watcher.ack(will)


def test_disconnect_0x00_does_not_send_the_will(broker: BrokerProcess) -> None:
    with _watcher(broker, "v5w/normal") as watcher:
        client = connected(broker, "v5w-normal", will=_will("v5w/normal"))
        client.disconnect(ReasonCode.SUCCESS)
        assert watcher.sync() == []
        # Still nothing later (a 0 s delay would have fired on the next tick).
        time.sleep(0.6)
        assert watcher.sync() == []


def test_takeover_sends_the_old_connection_will(broker: BrokerProcess) -> None:
    with _watcher(broker, "v5w/takeover") as watcher:
        old = connected(broker, "v5w-takeover", will=_will("v5w/takeover", b"old"))
        with connected(broker, "v5w-takeover") as new:
            old.expect_disconnect(ReasonCode.SESSION_TAKEN_OVER)
            old.close()
            [will] = watcher.publishes(1)
            assert will.payload == b"old"
            watcher.ack(will)
            new.disconnect()
        assert watcher.sync() == []  # the new connection had no will


def test_protocol_error_sends_the_will(broker: BrokerProcess) -> None:
    with _watcher(broker, "v5w/proto") as watcher:
        with connected(broker, "v5w-proto", will=_will("v5w/proto", b"broken")) as client:
            client.send(Connect("v5w-proto", 5))  # a second CONNECT
            client.expect_disconnect(ReasonCode.PROTOCOL_ERROR)
        [will] = watcher.publishes(1)
        assert will.payload == b"broken"
        watcher.ack(will)


def test_will_properties_reach_the_subscriber(broker: BrokerProcess) -> None:
    with _watcher(broker, "v5w/props") as watcher:
        will = Will("v5w/props", b"\xe2\x9c\x93 offline", 1, False, Properties(
            payload_format_indicator=1, message_expiry_interval=120, content_type="text/plain",
            response_topic="v5w/reply", correlation_data=b"\x00\x01",
            user_properties=(("site", "farm"), ("a", "1"), ("site", "barn")),
        ))
        client = connected(broker, "v5w-props", will=will)
        client.close()
        [got] = watcher.publishes(1)
        props = got.properties
        assert got.payload == b"\xe2\x9c\x93 offline"
        assert props.payload_format_indicator == 1
        assert props.content_type == "text/plain"
        assert props.response_topic == "v5w/reply"
        assert props.correlation_data == b"\x00\x01"
        assert props.user_properties == (("site", "farm"), ("a", "1"), ("site", "barn"))
        assert props.message_expiry_interval is not None
        assert 118 <= props.message_expiry_interval <= 120
        watcher.ack(got)


def test_paho_will_with_delay(broker: BrokerProcess) -> None:
    with _watcher(broker, "v5w/paho") as watcher:
        client = PahoV5(broker, "v5w-paho")
        client.client.will_set(
            "v5w/paho", b"paho gone", 1,
            properties=paho_props(PacketTypes.WILLMESSAGE, WillDelayInterval=1),
        )
        _, reason, _ = client.connect(
            properties=paho_props(PacketTypes.CONNECT, SessionExpiryInterval=30)
        )
        assert reason == 0
        # Drop the network connection without DISCONNECT.
        client.client.loop_stop()
        client.started = False
        sock = client.client.socket()
        assert sock is not None
        sock.close()
        assert watcher.sync() == []
        [will] = watcher.publishes(1, timeout=5)
        assert will.payload == b"paho gone"
        watcher.ack(will)
    with RawV5(broker) as cleanup:
        cleanup.connect("v5w-paho")
        cleanup.disconnect()


def test_mosquitto_sub_killed_sends_its_will(broker: BrokerProcess) -> None:
    sub = require("mosquitto_sub")
    with connected(broker, "v5w-mosq-ready") as ready:
        ready.publish("v5w/mosq-ready", b"ready", 1, retain=True)
        with _watcher(broker, "v5w/mosq") as watcher:
            with Background([
                sub, "-h", broker.host, "-p", str(broker.port), "-V", "mqttv5",
                "-i", "v5w-mosq", "-t", "v5w/mosq-ready",
                "--will-topic", "v5w/mosq", "--will-payload", "mosq gone", "--will-qos", "1",
                "-D", "will", "user-property", "k", "v",
                "-D", "will", "will-delay-interval", "1",
                "-D", "connect", "session-expiry-interval", "30",
            ]) as proc:
                assert proc.line() == "ready"  # connected and subscribed
                proc.proc.kill()  # no DISCONNECT
                proc.proc.wait(5)
                assert watcher.sync() == []  # the 1 s delay has not passed
            [will] = watcher.publishes(1, timeout=5)
            assert will.payload == b"mosq gone"
            assert will.properties.user_properties == (("k", "v"),)
            watcher.ack(will)
        ready.publish("v5w/mosq-ready", b"", 1, retain=True)
    with RawV5(broker) as cleanup:
        cleanup.connect("v5w-mosq")
        cleanup.disconnect()


def test_will_qos_is_capped_by_subscription(broker: BrokerProcess) -> None:
    with connected(broker, "watch-v5w-q0") as watcher:
        watcher.subscribe("v5w/q0", qos=0)
        client = connected(broker, "v5w-q0", will=_will("v5w/q0", qos=2))
        client.send(Disconnect(ReasonCode.DISCONNECT_WITH_WILL))
        client.wait_closed()
        client.close()
        got = watcher.expect(Publish)
        assert (got.qos, got.packet_id) == (0, None)


def test_disconnect_0x04_will_still_waits_for_the_delay(broker: BrokerProcess) -> None:
    with _watcher(broker, "v5w/with-will-delay") as watcher:
        client = connected(broker, "v5w-with-will-delay", session_expiry_interval=30,
                           will=_will("v5w/with-will-delay", b"later", will_delay_interval=1))
        client.disconnect(ReasonCode.DISCONNECT_WITH_WILL)
        assert watcher.sync() == []
        [will] = watcher.publishes(1, timeout=5)
        assert will.payload == b"later"
        watcher.ack(will)
    with RawV5(broker) as cleanup:
        cleanup.connect("v5w-with-will-delay")
        cleanup.disconnect()
