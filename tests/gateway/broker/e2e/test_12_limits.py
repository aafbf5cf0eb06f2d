"""12 limits: max connections, max packet size, bounded per-client queues with drop-oldest /
drop-newest (counted and logged), a slow consumer does not hold others up, connect timeout."""

from __future__ import annotations

import threading

import pytest

from gateway.broker.codec import Publish
from tests.gateway.broker.e2e.helpers import RawClient, wait_for

ACCEPTED = bytes.fromhex("20020000")
SERVER_UNAVAILABLE = bytes.fromhex("20020003")


def publish_bytes(topic: str, payload: bytes) -> bytes:
    """A 3.1.1 QoS 0 PUBLISH (remaining length may take several bytes)."""
    body = len(topic).to_bytes(2, "big") + topic.encode() + payload
    length = len(body)
    encoded = bytearray()
    while True:
        byte = length % 128
        length //= 128
        encoded.append(byte | (0x80 if length else 0))
        if not length:
            break
    return bytes([0x30]) + bytes(encoded) + body


def sys_value(broker, name: str) -> str:
    """The current retained `$SYS/broker/<name>` value."""
    with RawClient.to(broker) as c:
        c.connect("")
        c.subscribe((f"$SYS/broker/{name}", 0))
        [packet] = c.receive_publishes(1)
        return packet.payload.decode()


def test_01_max_connections(broker_factory):
    broker = broker_factory("[limits]\nmax_connections = 2\n")
    with RawClient.to(broker) as a, RawClient.to(broker) as b:
        assert a.connect("c12-01a") == ACCEPTED
        assert b.connect("c12-01b") == ACCEPTED
        with RawClient.to(broker) as c:
            assert c.connect("c12-01c") == SERVER_UNAVAILABLE
            assert c.expect_closed() == b""
        # the refused attempt changed nothing for the connected clients
        assert a.sync() == [] and b.sync() == []
        a.disconnect()
        with RawClient.to(broker) as d:
            assert d.connect("c12-01d") == ACCEPTED


def test_02_max_packet_size(broker_factory):
    broker = broker_factory("[limits]\nmax_packet_size = 1024\n")
    topic = "c12/02"
    largest = publish_bytes(topic, b"x" * (1024 - 3 - 2 - len(topic)))
    assert len(largest) == 1024
    with RawClient.to(broker) as sub, RawClient.to(broker) as pub:
        sub.connect("c12-02s")
        sub.subscribe((topic, 0))
        pub.connect("c12-02p")
        pub.send(largest)
        assert sub.recv_frame() == largest
        too_big = publish_bytes(topic, b"x" * (1025 - 3 - 2 - len(topic)))
        assert len(too_big) == 1025
        pub.send(too_big)
        assert pub.expect_closed() == b""  # 3.1.1: just closed
        assert sub.sync() == []  # nothing of it was delivered, the subscriber is fine
    with RawClient.to(broker) as pub:
        pub.connect("c12-02q")
        # refused from the fixed header alone: 200 MB announced, 5 bytes sent
        pub.send(bytes.fromhex("30808080 60".replace(" ", "")))
        assert pub.expect_closed() == b""


@pytest.mark.parametrize(("policy", "expected"), [
    ("drop-oldest", [b"5", b"6", b"7", b"8", b"9"]),
    ("drop-newest", [b"0", b"1", b"2", b"3", b"4"]),
])
def test_03_offline_queue_bound_and_policy(broker_factory, policy, expected):
    broker = broker_factory(
        f'[limits]\nmax_queued_messages = 5\nqueue_overflow = "{policy}"\n[sys]\ninterval = 0.5\n'
    )
    with RawClient.to(broker) as sub:
        sub.connect("c12-03", clean=False)
        sub.subscribe(("c12/03", 1))
        sub.disconnect()
    with RawClient.to(broker) as pub:
        pub.connect("c12-03p")
        for index in range(10):
            pub.publish("c12/03", str(index).encode(), qos=1)
    with RawClient.to(broker) as sub:
        assert sub.connect("c12-03", clean=False) == bytes.fromhex("20020100")
        assert [p.payload for p in sub.receive_publishes(5)] == expected
        assert sub.sync() == []
    wait_for(lambda: "queue full for client c12-03" in broker.log(),
             message="no log line for the dropped messages")
    assert f"(policy {policy})" in broker.log()
    wait_for(lambda: sys_value(broker, "messages/dropped") == "5", timeout=3)


def test_04_queue_bounded_in_bytes(broker_factory):
    broker = broker_factory("[limits]\nmax_queued_bytes = 2400\n")
    with RawClient.to(broker) as sub:
        sub.connect("c12-04", clean=False)
        sub.subscribe(("c12/04", 1))
        sub.disconnect()
    with RawClient.to(broker) as pub:
        pub.connect("c12-04p")
        for index in range(6):  # 6 + 300 bytes + 480 of objects each: three fit in 2400
            pub.publish("c12/04", bytes([0x30 + index]) * 300, qos=1)
    with RawClient.to(broker) as sub:
        assert sub.connect("c12-04", clean=False) == bytes.fromhex("20020100")
        got = sub.receive_publishes(3)
        assert [p.payload[:1] for p in got] == [b"3", b"4", b"5"]
        assert sub.sync() == []


def test_05_slow_consumer_does_not_hold_up_others(broker_factory):
    broker = broker_factory("[limits]\nmax_queued_messages = 50\n")
    count = 8000  # 8 MB: more than the kernel buffers towards the slow consumer hold
    payload = b"p" * 1000
    slow = RawClient.to(broker, rcvbuf=4096)
    fast = RawClient.to(broker)
    pub = RawClient.to(broker)
    try:
        slow.connect("c12-05-slow")
        slow.subscribe(("c12/05/#", 0))
        fast.connect("c12-05-fast")
        fast.subscribe(("c12/05/#", 0))
        pub.connect("c12-05-pub")
        data = b"".join(publish_bytes(f"c12/05/{i}", payload) for i in range(count))
        pub.sock.settimeout(30)  # sendall's timeout covers the whole send
        sender = threading.Thread(target=pub.send, args=(data,), daemon=True)
        sender.start()
        got = fast.receive_publishes(count, timeout=30)
        sender.join(10)
        assert [p.topic for p in got] == [f"c12/05/{i}" for i in range(count)]
        assert pub.sync() == []
        wait_for(lambda: "queue full for client c12-05-slow" in broker.log())
        assert "queue full for client c12-05-fast" not in broker.log()
        # the slow consumer gets an in-order subset once it reads, never more than was sent
        # (its queued messages come after what the socket buffers held, up to the last one)
        slow_topics: list[int] = []
        while not slow_topics or slow_topics[-1] != count - 1:
            packet = slow.recv(timeout=10)
            assert isinstance(packet, Publish)
            slow_topics.append(int(packet.topic.rsplit("/", 1)[1]))
        assert slow.sync() == []
        assert slow_topics == sorted(slow_topics)
        assert len(slow_topics) < count
        assert slow_topics[-1] == count - 1  # drop-oldest keeps the newest
    finally:
        for client in (slow, fast, pub):
            client.close()


def test_06_connect_timeout(broker_factory):
    broker = broker_factory("[limits]\nconnect_timeout = 0.5\n")
    with RawClient.to(broker) as silent, RawClient.to(broker) as partial, \
            RawClient.to(broker) as good:
        partial.send(bytes.fromhex("10100004"))  # a CONNECT that never completes
        assert good.connect("c12-06") == ACCEPTED
        assert silent.expect_closed(timeout=5) == b""
        assert partial.expect_closed(timeout=5) == b""
        assert good.sync() == []  # a connected client is not affected


def test_07_online_queue_behind_full_window_is_bounded(broker_factory):
    broker = broker_factory("[limits]\nmax_inflight = 8\nmax_queued_messages = 10\n")
    with RawClient.to(broker) as sub, RawClient.to(broker) as pub:
        sub.connect("c12-07")
        sub.subscribe(("c12/07", 1))
        pub.connect("c12-07p")
        for index in range(50):
            pub.publish("c12/07", str(index).encode(), qos=1)
        window = sub.receive_publishes(8, ack=False)
        assert [p.payload for p in window] == [str(i).encode() for i in range(8)]
        assert sub.sync() == []  # 8 in flight, 10 queued, 32 dropped (the oldest)
        for packet in window:
            sub.ack(packet)
        rest = sub.receive_publishes(10)
        assert [p.payload for p in rest] == [str(i).encode() for i in range(40, 50)]
        assert sub.sync() == []
    wait_for(lambda: "queue full for client c12-07" in broker.log())
