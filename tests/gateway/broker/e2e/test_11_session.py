"""11 session: 3.1.1 persistent sessions, clean session, offline queueing, DUP redelivery,
QoS 2 exactly once across reconnects, session takeover."""

from __future__ import annotations

from gateway.broker.codec import Publish
from tests.gateway.broker.e2e.helpers import PahoClient, RawClient, mosquitto_pub

NEW_SESSION = bytes.fromhex("20020000")
SESSION_PRESENT = bytes.fromhex("20020100")


def publish_bytes(topic: str, payload: bytes, qos: int, packet_id: int = 0,
                  dup: bool = False) -> bytes:
    body = len(topic).to_bytes(2, "big") + topic.encode()
    if qos:
        body += packet_id.to_bytes(2, "big")
    body += payload
    return bytes([0x30 | (qos << 1) | (0x08 if dup else 0), len(body)]) + body


def persistent(broker, client_id: str, *filters: tuple[str, int]) -> RawClient:
    """Connect with clean session 0 and subscribe."""
    client = RawClient.to(broker)
    client.connect(client_id, clean=False)
    if filters:
        client.subscribe(*filters)
    return client


def forget(broker, client_id: str) -> None:
    """End a persistent session (connect with clean session 1, then disconnect)."""
    with RawClient.to(broker) as c:
        c.connect(client_id, clean=True)
        c.disconnect()


def test_01_offline_qos1_qos2_queued_qos0_not(broker):
    with persistent(broker, "c11-01", ("c11/01/#", 2)) as sub:
        sub.disconnect()
    with RawClient.to(broker) as pub:
        pub.connect("c11-01p")
        pub.publish("c11/01/a", b"q1", qos=1)
        pub.publish("c11/01/b", b"q0", qos=0)
        pub.publish("c11/01/c", b"q2", qos=2)
        pub.sync()
    with RawClient.to(broker) as sub:
        assert sub.connect("c11-01", clean=False) == SESSION_PRESENT
        got = sub.receive_publishes(2)
        assert [(p.topic, p.payload, p.qos, p.dup) for p in got] == [
            ("c11/01/a", b"q1", 1, False), ("c11/01/c", b"q2", 2, False)]
        assert sub.sync() == []
        # the subscription survived: live messages arrive without subscribing again
        sub.publish("c11/01/live", b"live", qos=1)
        [live] = sub.receive_publishes(1)
        assert (live.topic, live.qos) == ("c11/01/live", 1)
    forget(broker, "c11-01")


def test_02_clean_session_discards_state(broker):
    with persistent(broker, "c11-02", ("c11/02", 1)) as sub:
        sub.disconnect()
    with RawClient.to(broker) as pub:
        pub.connect("c11-02p")
        pub.publish("c11/02", b"lost", qos=1)
    with RawClient.to(broker) as sub:
        assert sub.connect("c11-02", clean=True) == NEW_SESSION
        assert sub.sync() == []
        sub.disconnect()
    with RawClient.to(broker) as pub:
        pub.connect("c11-02p")
        pub.publish("c11/02", b"nobody", qos=1)
    with RawClient.to(broker) as sub:
        # the clean session ended with its connection: nothing to resume, no subscription
        assert sub.connect("c11-02", clean=False) == NEW_SESSION
        assert sub.sync() == []
    forget(broker, "c11-02")


def test_03_unacked_qos1_redelivered_with_dup_and_same_id(broker):
    with persistent(broker, "c11-03", ("c11/03", 1)) as sub, RawClient.to(broker) as pub:
        pub.connect("c11-03p")
        pub.publish("c11/03", b"first", qos=1)
        pub.publish("c11/03", b"second", qos=1)
        frames = [sub.recv_frame(), sub.recv_frame()]
        ids = [sub.decode(f).packet_id for f in frames]
        assert frames == [publish_bytes("c11/03", b"first", 1, ids[0]),
                          publish_bytes("c11/03", b"second", 1, ids[1])]
    # socket dropped without acking: the broker keeps both in flight
    with RawClient.to(broker) as sub:
        assert sub.connect("c11-03", clean=False) == SESSION_PRESENT
        assert [sub.recv_frame(), sub.recv_frame()] == [
            publish_bytes("c11/03", b"first", 1, ids[0], dup=True),
            publish_bytes("c11/03", b"second", 1, ids[1], dup=True)]
        sub.send(bytes.fromhex("4002") + ids[0].to_bytes(2, "big"))
        sub.close()
    with RawClient.to(broker) as sub:
        assert sub.connect("c11-03", clean=False) == SESSION_PRESENT
        assert sub.recv_frame() == publish_bytes("c11/03", b"second", 1, ids[1], dup=True)
        sub.send(bytes.fromhex("4002") + ids[1].to_bytes(2, "big"))
        assert sub.sync() == []
        sub.disconnect()
    with RawClient.to(broker) as sub:
        assert sub.connect("c11-03", clean=False) == SESSION_PRESENT
        assert sub.sync() == []
    forget(broker, "c11-03")


def test_04_unacked_qos2_publish_redelivered_with_dup(broker):
    with persistent(broker, "c11-04", ("c11/04", 2)) as sub, RawClient.to(broker) as pub:
        pub.connect("c11-04p")
        pub.publish("c11/04", b"two", qos=2)
        frame = sub.recv_frame()
        pid = sub.decode(frame).packet_id or 0
        assert frame == publish_bytes("c11/04", b"two", 2, pid)
    with RawClient.to(broker) as sub:
        assert sub.connect("c11-04", clean=False) == SESSION_PRESENT
        assert sub.recv_frame() == publish_bytes("c11/04", b"two", 2, pid, dup=True)
        sub.send(bytes.fromhex("5002") + pid.to_bytes(2, "big"))
        assert sub.recv_frame() == bytes.fromhex("6202") + pid.to_bytes(2, "big")
        sub.send(bytes.fromhex("7002") + pid.to_bytes(2, "big"))
        assert sub.sync() == []
    forget(broker, "c11-04")


def test_05_qos2_after_pubrec_pubrel_resent_not_publish(broker):
    with persistent(broker, "c11-05", ("c11/05", 2)) as sub, RawClient.to(broker) as pub:
        pub.connect("c11-05p")
        pub.publish("c11/05", b"exactly once", qos=2)
        packet = sub.recv()
        assert isinstance(packet, Publish)
        pid = packet.packet_id or 0
        sub.send(bytes.fromhex("5002") + pid.to_bytes(2, "big"))  # PUBREC
        assert sub.recv_frame() == bytes.fromhex("6202") + pid.to_bytes(2, "big")
        # dropped before PUBCOMP
    for _ in range(2):  # resent on every reconnect until completed
        with RawClient.to(broker) as sub:
            assert sub.connect("c11-05", clean=False) == SESSION_PRESENT
            assert sub.recv_frame() == bytes.fromhex("6202") + pid.to_bytes(2, "big")
            assert sub.sync() == []
    with RawClient.to(broker) as sub:
        assert sub.connect("c11-05", clean=False) == SESSION_PRESENT
        assert sub.recv_frame() == bytes.fromhex("6202") + pid.to_bytes(2, "big")
        sub.send(bytes.fromhex("7002") + pid.to_bytes(2, "big"))
        assert sub.sync() == []
        sub.disconnect()
    with RawClient.to(broker) as sub:
        assert sub.connect("c11-05", clean=False) == SESSION_PRESENT
        assert sub.sync() == []
    forget(broker, "c11-05")


def test_06_inbound_qos2_resent_after_reconnect_delivered_once(broker):
    with RawClient.to(broker) as watch:
        watch.connect("c11-06w")
        watch.subscribe(("c11/06", 1))
        with RawClient.to(broker) as pub:
            assert pub.connect("c11-06p", clean=False) == NEW_SESSION
            pub.send(publish_bytes("c11/06", b"once", 2, 0x0505))
            assert pub.recv_frame() == bytes.fromhex("50020505")
            # connection lost before the publisher saw the PUBREC
        with RawClient.to(broker) as pub:
            assert pub.connect("c11-06p", clean=False) == SESSION_PRESENT
            pub.send(publish_bytes("c11/06", b"once", 2, 0x0505, dup=True))
            assert pub.recv_frame() == bytes.fromhex("50020505")
            # and lost again, this time after PUBREC: the client now only sends PUBREL
        with RawClient.to(broker) as pub:
            assert pub.connect("c11-06p", clean=False) == SESSION_PRESENT
            pub.send(bytes.fromhex("62020505"))
            assert pub.recv_frame() == bytes.fromhex("70020505")
            pub.disconnect()
        [message] = watch.receive_publishes(1)
        assert message.payload == b"once"
        assert watch.sync() == []
    forget(broker, "c11-06p")


def test_07_takeover_closes_old_connection_and_keeps_session(broker):
    old = persistent(broker, "c11-07", ("c11/07", 1))
    try:
        with RawClient.to(broker) as new:
            assert new.connect("c11-07", clean=False) == SESSION_PRESENT
            assert old.expect_closed() == b""  # 3.1.1: closed, no DISCONNECT
            new.publish("c11/07", b"to the new one", qos=1)
            [message] = new.receive_publishes(1)
            assert message.payload == b"to the new one"
            # takeover with clean session 1: the old session (and its subscription) is gone
            with RawClient.to(broker) as clean:
                assert clean.connect("c11-07", clean=True) == NEW_SESSION
                assert new.expect_closed() == b""
                clean.publish("c11/07", b"nobody", qos=1)
                assert clean.sync() == []
    finally:
        old.close()


def test_08_takeover_with_inflight_redelivers_to_new_connection(broker):
    old = persistent(broker, "c11-08", ("c11/08", 1))
    try:
        with RawClient.to(broker) as pub:
            pub.connect("c11-08p")
            pub.publish("c11/08", b"inflight", qos=1)
        frame = old.recv_frame()
        pid = old.decode(frame).packet_id or 0
        with RawClient.to(broker) as new:
            assert new.connect("c11-08", clean=False) == SESSION_PRESENT
            assert new.recv_frame() == publish_bytes("c11/08", b"inflight", 1, pid, dup=True)
            new.send(bytes.fromhex("4002") + pid.to_bytes(2, "big"))
            assert new.sync() == []
            new.disconnect()
    finally:
        old.close()
    forget(broker, "c11-08")


def test_09_many_offline_messages_in_order_inflight_first(broker):
    count = 200
    with persistent(broker, "c11-09", ("c11/09", 1)) as sub, RawClient.to(broker) as pub:
        pub.connect("c11-09p")
        pub.publish("c11/09", b"early", qos=1)
        [early] = sub.receive_publishes(1, ack=False)
        sub.disconnect()  # the broker has handled it: the rest is queued, never sent
        for index in range(count):
            pub.publish("c11/09", str(index).encode(), qos=1)
    with RawClient.to(broker) as sub:
        assert sub.connect("c11-09", clean=False) == SESSION_PRESENT
        got = sub.receive_publishes(count + 1, timeout=10)
        assert (got[0].payload, got[0].dup, got[0].packet_id) == (b"early", True, early.packet_id)
        assert [p.payload for p in got[1:]] == [str(i).encode() for i in range(count)]
        assert not any(p.dup for p in got[1:])
        assert sub.sync() == []
    forget(broker, "c11-09")


def test_10_offline_qos0_queued_when_configured(broker_factory):
    broker = broker_factory("[limits]\nqueue_qos0 = true\n")
    with persistent(broker, "c11-10", ("c11/10", 0)) as sub:
        sub.disconnect()
    with RawClient.to(broker) as pub:
        pub.connect("c11-10p")
        for payload in (b"a", b"b"):
            pub.publish("c11/10", payload, qos=0)
        pub.sync()
    with RawClient.to(broker) as sub:
        assert sub.connect("c11-10", clean=False) == SESSION_PRESENT
        assert [sub.recv_frame(), sub.recv_frame()] == [
            publish_bytes("c11/10", b"a", 0), publish_bytes("c11/10", b"b", 0)]


def test_11_paho_persistent_session_with_mosquitto_pub(broker):
    with PahoClient(broker, "c11-11", clean_session=False) as sub:
        assert sub.connect() == (False, 0)
        sub.subscribe("c11/11", 2)
    mosquitto_pub(broker, "-t", "c11/11", "-m", "while away", "-q", "2")
    mosquitto_pub(broker, "-t", "c11/11", "-m", "and again", "-q", "1")
    with PahoClient(broker, "c11-11", clean_session=False) as sub:
        assert sub.connect() == (True, 0)
        messages = sub.wait_messages(2)
        # paho hands a QoS 2 message over only at PUBREL, so the order may differ
        assert sorted((m.payload, m.qos) for m in messages) == [
            (b"and again", 1), (b"while away", 2)]
    forget(broker, "c11-11")


def test_12_unacked_survives_clean_disconnect(broker):
    with persistent(broker, "c11-12", ("c11/12", 2)) as sub:
        sub.publish("c11/12", b"mine", qos=1)
        [packet] = sub.receive_publishes(1, ack=False)
        sub.disconnect()
    with RawClient.to(broker) as sub:
        assert sub.connect("c11-12", clean=False) == SESSION_PRESENT
        again = sub.recv()
        assert isinstance(again, Publish)
        assert (again.packet_id, again.dup, again.payload) == (packet.packet_id, True, b"mine")
        sub.ack(again)
        assert sub.sync() == []
    forget(broker, "c11-12")


def test_13_full_window_redelivered_in_order_then_queue(broker):
    window, count = 64, 100  # the default in-flight window towards a 3.1.1 client is 64
    with persistent(broker, "c11-13", ("c11/13", 1)) as sub, RawClient.to(broker) as pub:
        pub.connect("c11-13p")
        for index in range(count):
            pub.publish("c11/13", str(index).encode(), qos=1)
        first = sub.receive_publishes(window, ack=False)
        assert sub.sync() == []
        sub.disconnect()
    with RawClient.to(broker) as sub:
        assert sub.connect("c11-13", clean=False) == SESSION_PRESENT
        again = sub.receive_publishes(window, ack=False)
        assert [(p.packet_id, p.payload, p.dup) for p in again] == [
            (p.packet_id, p.payload, True) for p in first]
        assert sub.sync() == []  # the queue waits for the window
        for packet in again:
            sub.ack(packet)
        rest = sub.receive_publishes(count - window)
        assert [(p.payload, p.dup) for p in rest] == [
            (str(i).encode(), False) for i in range(window, count)]
        assert sub.sync() == []
    forget(broker, "c11-13")


def test_14_takeover_of_a_clean_session_is_not_resumed(broker):
    old = RawClient.to(broker)
    try:
        assert old.connect("c11-14", clean=True) == NEW_SESSION
        old.subscribe(("c11/14", 1))
        with RawClient.to(broker) as new:
            # the old session ended with its connection: nothing to resume
            assert new.connect("c11-14", clean=False) == NEW_SESSION
            assert old.expect_closed() == b""
            new.publish("c11/14", b"unsubscribed", qos=1)
            assert new.sync() == []
    finally:
        old.close()
    forget(broker, "c11-14")
