"""MQTT 5.0 message expiry interval: expired queued messages are dropped, the interval
forwarded is the time remaining, and retained messages expire too."""

from __future__ import annotations

import time

from gateway.broker.codec import Properties, Publish
from tests.conftest import require
from tests.gateway.broker.e2e.v5_helpers import RawV5, connected, run_tool
from tests.support.broker_proc import BrokerProcess


def _offline_subscriber(broker: BrokerProcess, client_id: str, topic: str) -> None:
    with connected(broker, client_id, session_expiry_interval=60) as client:
        assert client.subscribe(topic, qos=1).reason_codes == [1]
        client.disconnect()


def test_online_delivery_carries_the_full_interval(broker: BrokerProcess) -> None:
    with connected(broker, "v5e-online") as sub, connected(broker, "v5e-online-pub") as pub:
        sub.subscribe("v5e/online", qos=1)
        pub.publish("v5e/online", b"fresh", 1, message_expiry_interval=30)
        pub.publish("v5e/online", b"forever", 1)
        first, second = sub.publishes(2)
        assert first.properties.message_expiry_interval == 30
        assert second.properties.message_expiry_interval is None
        sub.ack(first)
        sub.ack(second)


def test_queued_messages_expire_and_remaining_time_is_forwarded(broker: BrokerProcess) -> None:
    _offline_subscriber(broker, "v5e-queued", "v5e/queued")
    with connected(broker, "v5e-queued-pub") as pub:
        pub.publish("v5e/queued", b"short", 1, message_expiry_interval=1)
        pub.publish("v5e/queued", b"long", 1, message_expiry_interval=30)
        pub.publish("v5e/queued", b"never", 2)
    time.sleep(1.5)
    with RawV5(broker) as client:
        ack = client.connect("v5e-queued", clean_start=False, session_expiry_interval=60)
        assert ack.session_present is True
        long, never = client.publishes(2)
        assert long.payload == b"long"
        # 30 s minus the >= 1.5 s spent in the queue (rounded up to whole seconds).
        remaining = long.properties.message_expiry_interval
        assert remaining is not None and 20 <= remaining <= 29
        assert never.payload == b"never"
        assert never.properties.message_expiry_interval is None
        client.ack(long)
        client.ack(never)
        assert client.sync() == []  # "short" was dropped, not delivered late
        client.disconnect(properties=Properties(session_expiry_interval=0))


def test_message_waiting_behind_a_full_window_expires(broker: BrokerProcess) -> None:
    with connected(broker, "v5e-window", receive_maximum=1) as sub, \
            connected(broker, "v5e-window-pub") as pub:
        sub.subscribe("v5e/window", qos=1)
        pub.publish("v5e/window", b"in flight", 1)
        pub.publish("v5e/window", b"expires in queue", 1, message_expiry_interval=1)
        [held] = sub.publishes(1)
        assert held.payload == b"in flight"
        assert sub.sync() == []  # the window of 1 is full: the second one waits
        time.sleep(1.3)
        sub.ack(held)
        pub.publish("v5e/window", b"after", 1)
        [nxt] = sub.publishes(1)
        assert nxt.payload == b"after"
        sub.ack(nxt)
        assert sub.sync() == []


def test_retained_message_expires(broker: BrokerProcess) -> None:
    with connected(broker, "v5e-ret-pub") as pub:
        pub.publish("v5e/retained/short", b"short", 1, retain=True, message_expiry_interval=1)
        pub.publish("v5e/retained/long", b"long", 1, retain=True, message_expiry_interval=60)
    with connected(broker, "v5e-ret-sub1") as sub:
        sub.subscribe("v5e/retained/short", qos=1)
        [got] = sub.publishes(1)
        assert got.retain and got.payload == b"short"
        assert got.properties.message_expiry_interval == 1
        sub.ack(got)
    time.sleep(1.3)
    with connected(broker, "v5e-ret-sub2") as sub:
        sub.subscribe("v5e/retained/#", qos=1)
        packets = sub.sync()
        assert [p.payload for p in packets if isinstance(p, Publish)] == [b"long"]
        [got] = packets
        assert isinstance(got, Publish) and got.retain
        remaining = got.properties.message_expiry_interval
        assert remaining is not None and 50 <= remaining <= 59
        sub.ack(got)
    with connected(broker, "v5e-ret-clean") as pub:
        pub.publish("v5e/retained/long", b"", 1, retain=True)


def test_mosquitto_pub_message_expiry_on_retained(broker: BrokerProcess) -> None:
    pub = require("mosquitto_pub")
    sent = run_tool([
        pub, "-h", broker.host, "-p", str(broker.port), "-V", "mqttv5", "-q", "1", "-r",
        "-t", "v5e/mosq", "-m", "soon gone", "-D", "publish", "message-expiry-interval", "1",
    ])
    assert sent.returncode == 0, sent.stderr
    with connected(broker, "v5e-mosq-1") as sub:
        sub.subscribe("v5e/mosq", qos=1)
        [got] = sub.publishes(1)
        assert got.payload == b"soon gone"
        assert got.properties.message_expiry_interval == 1
        sub.ack(got)
    time.sleep(1.3)
    with connected(broker, "v5e-mosq-2") as sub:
        sub.subscribe("v5e/mosq", qos=1)
        assert sub.sync() == []
