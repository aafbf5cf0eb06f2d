"""02 subpub: SUBSCRIBE / UNSUBSCRIBE / PUBLISH routing for 3.1.1, wildcards and `$` topics."""

from __future__ import annotations

import pytest

from gateway.broker.codec import MQTT_3_1, Publish
from tests.gateway.broker.e2e.helpers import MosquittoSub, PahoClient, RawClient, mosquitto_pub


def publish_frame(topic: str, payload: bytes, first: int = 0x30) -> bytes:
    """A 3.1.1 QoS 0 PUBLISH, built by hand."""
    body = len(topic).to_bytes(2, "big") + topic.encode() + payload
    return bytes([first, len(body)]) + body


def topics(packets: list) -> list[str]:
    return [p.topic for p in packets if isinstance(p, Publish)]


def test_01_suback_exact_bytes(broker):
    with RawClient.to(broker) as c:
        c.connect("c02-01")
        c.send(bytes.fromhex(
            "8214" "0a0b"          # SUBSCRIBE, id 0x0a0b
            "0003" "612f30" "00"   # a/0 QoS 0
            "0003" "612f31" "01"   # a/1 QoS 1
            "0003" "612f32" "02"   # a/2 QoS 2
        ))
        assert c.recv_frame() == bytes.fromhex("9005" "0a0b" "000102")


def test_02_qos0_publish_forwarded_byte_exact(broker):
    with RawClient.to(broker) as sub, RawClient.to(broker) as pub:
        sub.connect("c02-02s")
        sub.subscribe(("c02/02", 0))
        pub.connect("c02-02p")
        pub.send(publish_frame("c02/02", b"hello"))
        assert sub.recv_frame() == publish_frame("c02/02", b"hello")


def test_03_unsubscribe_stops_delivery(broker):
    with RawClient.to(broker) as sub, RawClient.to(broker) as pub:
        sub.connect("c02-03s")
        pub.connect("c02-03p")
        sub.subscribe(("c02/03", 1))
        assert sub.unsubscribe("c02/03", packet_id=0x1234) == bytes.fromhex("b0021234")
        pub.publish("c02/03", b"gone", qos=1)
        assert sub.sync() == []
        # unsubscribing a filter that does not exist is still acknowledged
        assert sub.unsubscribe("c02/none", packet_id=7) == bytes.fromhex("b0020007")


WILDCARD_CASES = [
    # (filter, topics that must match, topics that must not)
    ("c02w/+/x", ["c02w/a/x", "c02w//x"], ["c02w/a/b/x", "c02w/x", "c02w/a/x/y"]),
    ("c02w/#", ["c02w", "c02w/a", "c02w/a/b/c", "c02w/"], ["c02wx", "c02x/a"]),
    ("c02w/+", ["c02w/a", "c02w/"], ["c02w", "c02w/a/b"]),
    ("c02w/a/#", ["c02w/a", "c02w/a/b"], ["c02w/b"]),
    ("+/c02w/+", ["x/c02w/y", "/c02w/"], ["c02w/y", "x/c02w"]),
    ("c02w/exact", ["c02w/exact"], ["c02w/exact/", "c02w/Exact", "c02w/exac"]),
    ("c02w/+/+", ["c02w//", "c02w/a/b", "c02w/a/"], ["c02w/", "c02w/a/b/c", "c02w"]),
    ("c02w//#", ["c02w/", "c02w//", "c02w//a"], ["c02w/a", "c02w"]),
]


@pytest.mark.parametrize(("topic_filter", "matching", "other"), WILDCARD_CASES)
def test_04_wildcard_semantics(broker, topic_filter, matching, other):
    with RawClient.to(broker) as sub, RawClient.to(broker) as pub:
        sub.connect("")
        pub.connect("")
        sub.subscribe((topic_filter, 0))
        for topic in other + matching:
            pub.publish(topic, topic.encode(), qos=1)
        assert sorted(topics(sub.sync())) == sorted(matching)


def test_05_wildcards_do_not_match_dollar_topics(broker):
    with RawClient.to(broker) as sub, RawClient.to(broker) as dollar, \
            RawClient.to(broker) as pub:
        sub.connect("c02-05a")
        sub.subscribe(("#", 0), ("+/c02/x", 0), ("+", 0))
        dollar.connect("c02-05b")
        dollar.subscribe(("$c02/#", 0), ("$c02/+/x", 0))
        pub.connect("c02-05p")
        for topic in ("$c02/x", "$c02/a/x", "$c02"):
            pub.publish(topic, b"$", qos=1)
        assert topics(dollar.sync()) == ["$c02/x", "$c02/a/x", "$c02"]
        got = [t for t in topics(sub.sync()) if t.startswith("$")]
        assert got == []
        # a plain topic still reaches the `#` subscriber (once, despite `+/c02/x` too)
        pub.publish("z/c02/x", b"plain", qos=1)
        assert topics(sub.sync()) == ["z/c02/x"]


def test_06_overlapping_subscriptions_delivered_once_at_highest_qos(broker):
    with RawClient.to(broker) as sub, RawClient.to(broker) as pub:
        sub.connect("c02-06s")
        assert sub.subscribe(("c02/06/#", 0), ("c02/06/+", 2), ("c02/06/a", 1)) == \
            bytes.fromhex("9005000100" "0201")
        pub.connect("c02-06p")
        pub.publish("c02/06/a", b"one", qos=2)
        packets = sub.sync()
        assert len(packets) == 1
        assert packets[0].qos == 2 and packets[0].payload == b"one"
        sub.ack(packets[0])
        assert sub.recv_frame() == bytes.fromhex("6202") + packets[0].packet_id.to_bytes(2, "big")
        sub.send(bytes.fromhex("7002") + packets[0].packet_id.to_bytes(2, "big"))
        # only the QoS 0 `#` filter matches c02/06/a/b: delivered once at QoS 0
        pub.publish("c02/06/a/b", b"two", qos=2)
        assert [(p.topic, p.qos) for p in sub.sync()] == [("c02/06/a/b", 0)]


def test_07_resubscribe_replaces_qos(broker):
    with RawClient.to(broker) as sub, RawClient.to(broker) as pub:
        sub.connect("c02-07s")
        pub.connect("c02-07p")
        sub.subscribe(("c02/07", 2))
        assert sub.subscribe(("c02/07", 0), packet_id=9) == bytes.fromhex("9003000900")
        pub.publish("c02/07", b"x", qos=2)
        assert [(p.qos, p.payload) for p in sub.sync()] == [(0, b"x")]


def test_08_publisher_receives_own_message(broker):
    with RawClient.to(broker) as c:
        c.connect("c02-08")
        c.subscribe(("c02/08", 0))
        c.send(publish_frame("c02/08", b"me"))
        assert c.recv_frame() == publish_frame("c02/08", b"me")


def test_09_many_subscribers_each_get_messages_in_order(broker):
    subs = [RawClient.to(broker) for _ in range(5)]
    try:
        for index, sub in enumerate(subs):
            sub.connect(f"c02-09-{index}")
            sub.subscribe(("c02/09/#", 0))
        with RawClient.to(broker) as pub:
            pub.connect("c02-09p")
            frames = b"".join(publish_frame(f"c02/09/{i}", str(i).encode()) for i in range(100))
            pub.send(frames)
            pub.sync()
        for sub in subs:
            assert b"".join(sub.recv_frame() for _ in range(100)) == frames
            assert sub.sync() == []
    finally:
        for sub in subs:
            sub.close()


def test_10_empty_payload_and_binary_payload(broker):
    payload = bytes(range(256)) * 4
    with RawClient.to(broker) as c:
        c.connect("c02-10")
        c.subscribe(("c02/10", 1))
        c.publish("c02/10", b"", qos=1)
        c.publish("c02/10", payload, qos=1)
        got = c.receive_publishes(2)
        assert [p.payload for p in got] == [b"", payload]


def test_11_v31_subscriber_gets_v311_publish(broker):
    with RawClient.to(broker, MQTT_3_1) as sub, RawClient.to(broker) as pub:
        sub.connect("c02-11s")
        sub.subscribe(("c02/11", 0))
        pub.connect("c02-11p")
        pub.send(publish_frame("c02/11", b"v31"))
        assert sub.recv_frame() == publish_frame("c02/11", b"v31")


def test_12_paho_to_mosquitto_sub(broker):
    with MosquittoSub(broker, "-t", "c02/12/+", "-q", "1", "-C", "3") as sub, \
            PahoClient(broker, "c02-12p") as pub:
        pub.connect()
        for index in range(3):
            pub.publish(f"c02/12/{index}", f"m{index}".encode(), qos=1)
        assert sub.wait_lines(3) == [f"c02/12/{i}|1|0|m{i}" for i in range(3)]
        assert sub.wait_exit() == 0


def test_13_mosquitto_pub_to_paho(broker):
    with PahoClient(broker, "c02-13s") as sub:
        sub.connect()
        assert sub.subscribe("c02/13/#", 2) == [2]
        mosquitto_pub(broker, "-t", "c02/13/a", "-m", "from mosquitto", "-q", "2")
        [message] = sub.wait_messages(1)
        assert (message.topic, message.payload, message.qos, message.retain) == (
            "c02/13/a", b"from mosquitto", 2, False)


def test_14_unicode_topic(broker):
    topic = "c02/14/température/℃"
    with RawClient.to(broker) as c:
        c.connect("c02-14")
        c.subscribe(("c02/14/+/℃", 1))
        c.publish(topic, b"21", qos=1)
        [message] = c.receive_publishes(1)
        assert message.topic == topic


@pytest.mark.parametrize("size", [0, 117, 118, 16_373, 16_374, 300_000, 1_000_000])
def test_15_payload_sizes_across_length_encodings(broker, size):
    # sizes around the 1/2/3-byte remaining length boundaries (topic "c02/15" + id = 10 bytes)
    payload = bytes(i % 251 for i in range(size))
    with RawClient.to(broker) as c:
        c.connect(f"c02-15-{size}")
        c.subscribe(("c02/15", 1))
        c.publish("c02/15", payload, qos=1)
        [message] = c.receive_publishes(1)
        assert message.payload == payload
