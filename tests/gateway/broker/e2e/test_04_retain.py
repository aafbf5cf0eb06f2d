"""04 retain: set, replace, delete, delivery on subscribe with RETAIN=1, live with RETAIN=0."""

from __future__ import annotations

from gateway.broker.codec import Publish
from tests.gateway.broker.e2e.helpers import MosquittoSub, PahoClient, RawClient, mosquitto_pub


def publish_bytes(topic: str, payload: bytes, first: int = 0x30, packet_id: int = 0) -> bytes:
    """A 3.1.1 PUBLISH built by hand (`first` carries type, DUP, QoS and RETAIN)."""
    body = len(topic).to_bytes(2, "big") + topic.encode()
    if first & 0x06:
        body += packet_id.to_bytes(2, "big")
    body += payload
    return bytes([first, len(body)]) + body


def test_01_retained_delivered_on_subscribe_with_retain_flag(broker):
    with RawClient.to(broker) as pub:
        pub.connect("c04-01p")
        pub.publish("c04/01", b"kept", qos=0, retain=True)
        pub.sync()  # handled in order: the message is stored before the PINGRESP
    with RawClient.to(broker) as sub:
        sub.connect("c04-01s")
        assert sub.subscribe(("c04/01", 0), packet_id=3) == bytes.fromhex("9003000300")
        assert sub.recv_frame() == publish_bytes("c04/01", b"kept", 0x31)


def test_02_live_messages_forwarded_with_retain_0(broker):
    with RawClient.to(broker) as sub, RawClient.to(broker) as pub:
        sub.connect("c04-02s")
        sub.subscribe(("c04/02", 0))
        pub.connect("c04-02p")
        pub.publish("c04/02", b"live", qos=1, retain=True)
        assert sub.recv_frame() == publish_bytes("c04/02", b"live", 0x30)
    with RawClient.to(broker) as late:
        late.connect("c04-02l")
        late.subscribe(("c04/02", 0))
        assert late.recv_frame() == publish_bytes("c04/02", b"live", 0x31)


def test_03_replace_keeps_only_latest(broker):
    with RawClient.to(broker) as pub:
        pub.connect("c04-03p")
        for value in (b"1", b"2", b"3"):
            pub.publish("c04/03", value, qos=1, retain=True)
    with RawClient.to(broker) as sub:
        sub.connect("c04-03s")
        sub.subscribe(("c04/03", 0))
        assert [(p.payload, p.retain) for p in sub.sync()] == [(b"3", True)]


def test_04_empty_payload_deletes(broker):
    with RawClient.to(broker) as pub, RawClient.to(broker) as live:
        pub.connect("c04-04p")
        live.connect("c04-04l")
        pub.publish("c04/04", b"soon gone", qos=1, retain=True)
        live.subscribe(("c04/04", 0))
        assert [p.payload for p in live.sync()] == [b"soon gone"]
        pub.publish("c04/04", b"", qos=1, retain=True)
        # the delete itself is forwarded to current subscribers as a normal empty message
        assert live.recv_frame() == publish_bytes("c04/04", b"", 0x30)
    with RawClient.to(broker) as sub:
        sub.connect("c04-04s")
        sub.subscribe(("c04/04", 0), ("c04/#", 0))
        assert [p.topic for p in sub.sync() if p.topic == "c04/04"] == []


def test_05_retained_qos_is_min_of_message_and_subscription(broker):
    with RawClient.to(broker) as pub:
        pub.connect("c04-05p")
        pub.publish("c04/05/q1", b"one", qos=1, retain=True)
        pub.publish("c04/05/q2", b"two", qos=2, retain=True)
    for sub_qos in (0, 1, 2):
        with RawClient.to(broker) as sub:
            sub.connect(f"c04-05s{sub_qos}")
            sub.subscribe(("c04/05/+", sub_qos))
            got = sub.receive_publishes(2)
            assert sorted((p.topic, p.qos, p.retain) for p in got) == [
                ("c04/05/q1", min(1, sub_qos), True), ("c04/05/q2", min(2, sub_qos), True)]
            assert sub.sync() == []


def test_06_retained_matches_wildcards_only(broker):
    with RawClient.to(broker) as pub:
        pub.connect("c04-06p")
        for topic in ("c04/06/a", "c04/06/b/c", "c04/06x", "c04/06/b"):
            pub.publish(topic, topic.encode(), qos=1, retain=True)
    with RawClient.to(broker) as sub:
        sub.connect("c04-06s")
        sub.subscribe(("c04/06/+", 0))
        assert sorted(p.topic for p in sub.sync()) == ["c04/06/a", "c04/06/b"]
        sub.subscribe(("c04/06/#", 0))
        # MQTT-3.8.4-3: a repeated (or overlapping) subscribe sends matching retained again
        assert sorted(p.topic for p in sub.sync()) == [
            "c04/06/a", "c04/06/b", "c04/06/b/c"]


def test_07_resubscribe_delivers_retained_again(broker):
    with RawClient.to(broker) as c:
        c.connect("c04-07")
        c.publish("c04/07", b"again", qos=1, retain=True)
        for _ in range(2):
            c.subscribe(("c04/07", 0))
            assert [(p.payload, p.retain) for p in c.sync()] == [(b"again", True)]


def test_08_hash_subscriber_gets_many_retained(broker):
    count = 2000
    with RawClient.to(broker) as pub:
        pub.connect("c04-08p")
        data = b"".join(publish_bytes(f"c04many/{i}/v", str(i).encode(), 0x31)
                        for i in range(count))
        pub.send(data)
        pub.sync()
    with RawClient.to(broker) as sub:
        sub.connect("c04-08s")
        sub.subscribe(("c04many/#", 1))
        got = sub.receive_publishes(count, timeout=20)
        assert sorted(int(p.payload) for p in got) == list(range(count))
        assert all(p.retain and p.qos == 0 and p.topic == f"c04many/{int(p.payload)}/v"
                   for p in got)
        assert sub.sync() == []


def test_09_retained_qos1_many_through_window(broker):
    # more retained QoS 1 messages than the in-flight window: all arrive once acked
    count = 300
    with RawClient.to(broker) as pub:
        pub.connect("c04-09p")
        for index in range(count):
            pub.publish(f"c04q/{index}", str(index).encode(), qos=1, retain=True)
    with RawClient.to(broker) as sub:
        sub.connect("c04-09s")
        sub.subscribe(("c04q/#", 1))
        got = sub.receive_publishes(count, timeout=20)
        assert sorted(int(p.payload) for p in got) == list(range(count))
        assert {(p.qos, p.retain) for p in got} == {(1, True)}
        assert sub.sync() == []


def test_10_mosquitto_retained(broker):
    mosquitto_pub(broker, "-t", "c04/10", "-m", "mosq", "-r", "-q", "1")
    with MosquittoSub(broker, "-t", "c04/10", "-C", "1") as sub:
        assert sub.wait_lines(1) == ["c04/10|0|1|mosq"]
        assert sub.wait_exit() == 0
    mosquitto_pub(broker, "-t", "c04/10", "-n", "-r")  # -n: empty payload, deletes
    with RawClient.to(broker) as c:
        c.connect("c04-10")
        c.subscribe(("c04/10", 0))
        assert c.sync() == []


def test_11_paho_retained(broker):
    with PahoClient(broker, "c04-11p") as pub:
        pub.connect()
        pub.publish("c04/11", b"paho", qos=1, retain=True)
    with PahoClient(broker, "c04-11s") as sub:
        sub.connect()
        sub.subscribe("c04/11", 1)
        [message] = sub.wait_messages(1)
        assert (message.payload, message.qos, message.retain) == (b"paho", 1, True)


def test_12_retained_zero_length_without_existing_is_not_stored(broker):
    with RawClient.to(broker) as c:
        c.connect("c04-12")
        c.publish("c04/12", b"", qos=1, retain=True)
        c.subscribe(("c04/12", 0))
        assert [p for p in c.sync() if isinstance(p, Publish)] == []


def test_13_non_retained_publish_leaves_retained_alone(broker):
    with RawClient.to(broker) as pub:
        pub.connect("c04-13p")
        pub.publish("c04/13", b"keep", qos=1, retain=True)
        pub.publish("c04/13", b"live", qos=1, retain=False)
        pub.publish("c04/13", b"", qos=1, retain=False)  # empty but not retained: no delete
    with RawClient.to(broker) as sub:
        sub.connect("c04-13s")
        sub.subscribe(("c04/13", 0))
        assert sub.recv_frame() == publish_bytes("c04/13", b"keep", 0x31)
        assert sub.sync() == []
