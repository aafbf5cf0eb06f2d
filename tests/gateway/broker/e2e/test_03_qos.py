"""03 qos: QoS 0/1/2 in both directions, downgrade to the granted QoS, packet identifiers."""

from __future__ import annotations

import pytest

from gateway.broker.codec import PubAck, Publish, PubRec, PubRel
from tests.gateway.broker.e2e.helpers import MosquittoSub, PahoClient, RawClient, mosquitto_pub


def publish_bytes(topic: str, payload: bytes, qos: int, packet_id: int, dup: bool = False,
                  retain: bool = False) -> bytes:
    """A 3.1.1 PUBLISH built by hand."""
    body = len(topic).to_bytes(2, "big") + topic.encode()
    if qos:
        body += packet_id.to_bytes(2, "big")
    body += payload
    first = 0x30 | (qos << 1) | (0x08 if dup else 0) | (0x01 if retain else 0)
    return bytes([first, len(body)]) + body


def test_01_qos1_puback_exact(broker):
    with RawClient.to(broker) as c:
        c.connect("c03-01")
        c.send(publish_bytes("c03/01", b"x", 1, 0x0107))
        assert c.recv_frame() == bytes.fromhex("40020107")


def test_02_qos2_pubrec_pubcomp_exact(broker):
    with RawClient.to(broker) as c:
        c.connect("c03-02")
        c.send(publish_bytes("c03/02", b"x", 2, 0xBEEF))
        assert c.recv_frame() == bytes.fromhex("5002beef")
        c.send(bytes.fromhex("6202beef"))  # PUBREL
        assert c.recv_frame() == bytes.fromhex("7002beef")


def test_03_qos2_inbound_duplicate_before_pubrel_delivered_once(broker):
    with RawClient.to(broker) as sub, RawClient.to(broker) as pub:
        sub.connect("c03-03s")
        sub.subscribe(("c03/03", 0))
        pub.connect("c03-03p")
        pub.send(publish_bytes("c03/03", b"once", 2, 5))
        assert pub.recv_frame() == bytes.fromhex("50020005")
        for _ in range(3):  # the publisher did not see PUBREC: it resends with DUP
            pub.send(publish_bytes("c03/03", b"once", 2, 5, dup=True))
            assert pub.recv_frame() == bytes.fromhex("50020005")
        pub.send(bytes.fromhex("62020005"))
        assert pub.recv_frame() == bytes.fromhex("70020005")
        assert [p.payload for p in sub.sync()] == [b"once"]
        # the id is free again: a new message with the same id is a new message
        pub.send(publish_bytes("c03/03", b"again", 2, 5))
        assert pub.recv_frame() == bytes.fromhex("50020005")
        assert [p.payload for p in sub.sync()] == [b"again"]
        pub.send(bytes.fromhex("62020005"))
        assert pub.recv_frame() == bytes.fromhex("70020005")


def test_04_pubrel_for_unknown_id_still_completed(broker):
    with RawClient.to(broker) as c:
        c.connect("c03-04")
        c.send(bytes.fromhex("62024242"))
        assert c.recv_frame() == bytes.fromhex("70024242")


def test_05_qos1_resend_with_dup_is_acked_again(broker):
    with RawClient.to(broker) as c:
        c.connect("c03-05")
        c.send(publish_bytes("c03/05", b"x", 1, 9))
        assert c.recv_frame() == bytes.fromhex("40020009")
        c.send(publish_bytes("c03/05", b"x", 1, 9, dup=True))
        assert c.recv_frame() == bytes.fromhex("40020009")


# (subscription QoS, publish QoS) -> delivered QoS = min of the two
@pytest.mark.parametrize("sub_qos", [0, 1, 2])
@pytest.mark.parametrize("pub_qos", [0, 1, 2])
def test_06_delivered_at_granted_qos(broker, sub_qos, pub_qos):
    topic = f"c03/06/{sub_qos}{pub_qos}"
    with RawClient.to(broker) as sub, RawClient.to(broker) as pub:
        sub.connect(f"c03-06s-{sub_qos}{pub_qos}")
        assert sub.subscribe((topic, sub_qos), packet_id=1) == bytes([0x90, 3, 0, 1, sub_qos])
        pub.connect(f"c03-06p-{sub_qos}{pub_qos}")
        pub.publish(topic, b"payload", qos=pub_qos)
        frame = sub.recv_frame()
        qos = min(sub_qos, pub_qos)
        packet = sub.decode(frame)
        assert isinstance(packet, Publish)
        assert frame == publish_bytes(topic, b"payload", qos, packet.packet_id or 0)
        if qos:
            assert packet.packet_id
        sub.ack(packet)
        if qos == 2:
            assert sub.recv_frame() == bytes.fromhex("6202") + packet.packet_id.to_bytes(2, "big")
            sub.send(bytes.fromhex("7002") + packet.packet_id.to_bytes(2, "big"))
        assert sub.sync() == []


def test_07_outbound_packet_ids_distinct_while_in_flight(broker):
    with RawClient.to(broker) as sub, RawClient.to(broker) as pub:
        sub.connect("c03-07s")
        sub.subscribe(("c03/07", 2))
        pub.connect("c03-07p")
        for index in range(20):
            pub.publish("c03/07", str(index).encode(), qos=1 + index % 2)
        received = sub.receive_publishes(20, ack=False)
        ids = [p.packet_id for p in received]
        assert all(ids) and len(set(ids)) == 20
        assert [p.payload for p in received] == [str(i).encode() for i in range(20)]
        assert [p.qos for p in received] == [1 + i % 2 for i in range(20)]
        # complete them all, out of order; QoS 2 ones go through PUBREL / PUBCOMP
        for packet in reversed(received):
            sub.ack(packet)
        pubrels = [sub.recv() for _ in range(10)]
        assert all(isinstance(p, PubRel) for p in pubrels)
        assert sorted(p.packet_id for p in pubrels) == sorted(
            p.packet_id for p in received if p.qos == 2)
        for pubrel in pubrels:
            sub.ack(pubrel)
        assert sub.sync() == []


def test_08_outbound_qos2_full_flow_exact(broker):
    with RawClient.to(broker) as sub, RawClient.to(broker) as pub:
        sub.connect("c03-08s")
        sub.subscribe(("c03/08", 2))
        pub.connect("c03-08p")
        pub.publish("c03/08", b"q2", qos=2)
        frame = sub.recv_frame()
        pid = frame[2 + 2 + len("c03/08"):][:2]
        assert frame == bytes([0x34, 12]) + b"\x00\x06c03/08" + pid + b"q2"
        sub.send(b"\x50\x02" + pid)
        assert sub.recv_frame() == b"\x62\x02" + pid
        sub.send(b"\x70\x02" + pid)
        assert sub.sync() == []


def test_09_unacked_window_resumes_after_acks(broker):
    # more QoS 1 messages than the in-flight window (64): the rest are sent as acks arrive
    count = 150
    with RawClient.to(broker) as sub, RawClient.to(broker) as pub:
        sub.connect("c03-09s")
        sub.subscribe(("c03/09", 1))
        pub.connect("c03-09p")
        for index in range(count):
            pub.publish("c03/09", str(index).encode(), qos=1)
        first = sub.receive_publishes(64, ack=False)
        assert sub.sync() == []  # the window is full: nothing more until acks
        for packet in first:
            sub.send(PubAck(packet.packet_id or 0))
        rest = sub.receive_publishes(count - 64)
        assert [p.payload for p in first + rest] == [str(i).encode() for i in range(count)]


@pytest.mark.parametrize("qos", [0, 1, 2])
def test_10_paho_both_directions(broker, qos):
    count = 50
    with PahoClient(broker, f"c03-10s-{qos}") as sub, PahoClient(broker, f"c03-10p-{qos}") as pub:
        sub.connect()
        assert sub.subscribe(f"c03/10/{qos}", qos) == [qos]
        pub.connect()
        for index in range(count):
            pub.publish(f"c03/10/{qos}", str(index).encode(), qos=qos)
        messages = sub.wait_messages(count)
        assert [m.payload for m in messages] == [str(i).encode() for i in range(count)]
        assert {m.qos for m in messages} == {qos}
        pub.publish(f"c03/10/{qos}", b"end", qos=1)
        assert len(sub.wait_messages(count + 1)) == count + 1


def test_11_mosquitto_qos2(broker):
    with MosquittoSub(broker, "-t", "c03/11", "-q", "2", "-C", "2") as sub:
        mosquitto_pub(broker, "-t", "c03/11", "-m", "a", "-q", "2")
        mosquitto_pub(broker, "-t", "c03/11", "-m", "b", "-q", "1")
        assert sub.wait_lines(2) == ["c03/11|2|0|a", "c03/11|1|0|b"]
        assert sub.wait_exit() == 0


def test_12_pubrec_for_unknown_id_answered_with_pubrel(broker):
    with RawClient.to(broker) as c:
        c.connect("c03-12")
        c.send(PubRec(77))
        assert c.recv_frame() == bytes.fromhex("6202004d")


def test_13_v311_pipelined_qos2_has_no_receive_maximum(broker):
    # 3.1.1 has no Receive Maximum: 100 unreleased QoS 2 publishes in a row are legal
    count = 100
    with RawClient.to(broker) as sub, RawClient.to(broker) as pub:
        sub.connect("c03-13s")
        sub.subscribe(("c03/13", 0))
        pub.connect("c03-13p")
        pub.send(b"".join(publish_bytes("c03/13", str(i).encode(), 2, i)
                          for i in range(1, count + 1)))
        assert [pub.recv_frame() for _ in range(count)] == [
            bytes.fromhex("5002") + i.to_bytes(2, "big") for i in range(1, count + 1)]
        pub.send(b"".join(bytes.fromhex("6202") + i.to_bytes(2, "big")
                          for i in range(1, count + 1)))
        assert [pub.recv_frame() for _ in range(count)] == [
            bytes.fromhex("7002") + i.to_bytes(2, "big") for i in range(1, count + 1)]
        got = sub.receive_publishes(count)
        assert [p.payload for p in got] == [str(i).encode() for i in range(1, count + 1)]


def test_14_ack_for_unknown_packet_id_is_ignored(broker):
    with RawClient.to(broker) as c:
        c.connect("c03-14")
        c.send(bytes.fromhex("40021234"))  # PUBACK nobody asked for
        c.send(bytes.fromhex("70021235"))  # PUBCOMP nobody asked for
        assert c.sync() == []
