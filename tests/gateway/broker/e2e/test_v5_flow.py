"""MQTT 5.0 flow control and packet size limits, both directions.

- Towards a client: never more unacknowledged QoS 1/2 PUBLISH than the client's receive
  maximum (or our `max_inflight`, whichever is smaller); a message larger than the client's
  maximum packet size is not sent to it, others still get it.
- From a client: more QoS 2 publishes awaiting PUBREL than our receive maximum is DISCONNECT
  0x93 (a QoS 1 burst waits for our PUBACKs instead: test_26_mqttjs.py); a packet above our
  maximum packet size is DISCONNECT 0x95, readable by a client that is still writing
  (lingering close).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from gateway.broker.codec import (
    MQTT_5,
    PubAck,
    PubComp,
    Publish,
    PubRec,
    PubRel,
    ReasonCode,
    encode,
)
from gateway.broker.codec.wire import enc_varint
from tests.gateway.broker.e2e.v5_helpers import (
    TIMEOUT,
    PacketTypes,
    PahoV5,
    connected,
    paho_props,
)
from tests.support.broker_proc import BrokerProcess, start_broker

FLOW = """
[limits]
receive_maximum = 2
max_inflight = 3
max_packet_size = 2048
"""


@pytest.fixture(scope="module")
def flow(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = start_broker(tmp_path_factory.mktemp("flow"), FLOW)
    yield proc
    proc.stop()


def _publish_many(broker: BrokerProcess, topic: str, count: int, qos: int) -> None:
    with connected(broker, f"pub-{topic.replace('/', '-')}") as pub:
        for i in range(count):
            pub.publish(topic, b"m%d" % i, qos)
        pub.disconnect()


def test_qos1_window_follows_client_receive_maximum(broker: BrokerProcess) -> None:
    with connected(broker, "v5f-rm1", receive_maximum=3) as sub:
        sub.subscribe("v5f/rm1", qos=1)
        _publish_many(broker, "v5f/rm1", 10, 1)
        got = sub.publishes(3)
        assert sub.sync() == []  # three unacknowledged: the broker waits
        received = list(got)
        while len(received) < 10:
            sub.ack(got.pop(0))
            more = sub.sync()
            assert len(more) == 1, more  # one ack frees exactly one slot
            assert isinstance(more[0], Publish)
            got.append(more[0])
            received.append(more[0])
        for publish in got:
            sub.ack(publish)
        assert [p.payload for p in received] == [b"m%d" % i for i in range(10)]
        assert len({p.packet_id for p in received[:3]}) == 3
        assert sub.sync() == []


def test_qos2_slot_is_held_until_pubcomp(broker: BrokerProcess) -> None:
    with connected(broker, "v5f-rm2", receive_maximum=2) as sub:
        sub.subscribe("v5f/rm2", qos=2)
        _publish_many(broker, "v5f/rm2", 4, 2)
        first, second = sub.publishes(2)
        assert (first.qos, second.qos) == (2, 2)
        sub.send(PubRec(first.packet_id or 0))
        assert sub.expect(PubRel).packet_id == first.packet_id
        assert sub.sync() == []  # PUBREC alone does not free the slot
        sub.send(PubComp(first.packet_id or 0))
        [third] = sub.sync()
        assert isinstance(third, Publish) and third.payload == b"m2"
        sub.ack(second)
        [fourth] = sub.publishes(1)  # the slot of `second` is free again
        assert fourth.payload == b"m3"
        sub.ack(third)
        sub.ack(fourth)
        assert sub.sync() == []


def test_retained_messages_on_subscribe_respect_the_window(broker: BrokerProcess) -> None:
    with connected(broker, "v5f-ret-pub") as pub:
        for i in range(6):
            pub.publish(f"v5f/ret/{i}", b"%d" % i, 1, retain=True)
        with connected(broker, "v5f-ret", receive_maximum=2) as sub:
            sub.subscribe("v5f/ret/#", qos=1)
            window = [p for p in sub.sync() if isinstance(p, Publish)]
            assert len(window) == 2
            seen = []
            while window:
                head = window.pop(0)
                seen.append(head.payload)
                sub.ack(head)
                window += [p for p in sub.sync() if isinstance(p, Publish)]
                assert len(window) <= 2
            assert sorted(seen) == [b"%d" % i for i in range(6)]
        for i in range(6):
            pub.publish(f"v5f/ret/{i}", b"", 1, retain=True)


def test_broker_max_inflight_caps_a_larger_receive_maximum(flow: BrokerProcess) -> None:
    with connected(flow, "v5f-cap", receive_maximum=100) as sub:
        sub.subscribe("v5f/cap", qos=1)
        _publish_many(flow, "v5f/cap", 5, 1)
        got = sub.publishes(3)
        assert sub.sync() == []  # max_inflight = 3
        for publish in got:
            sub.ack(publish)
        rest = sub.publishes(2)
        assert [p.payload for p in got + rest] == [b"m%d" % i for i in range(5)]
        for publish in rest:
            sub.ack(publish)


def test_client_exceeding_our_receive_maximum_gets_0x93(flow: BrokerProcess) -> None:
    with connected(flow, "v5f-exceed") as client, connected(flow, "v5f-exceed-by") as bystander:
        bystander.subscribe("v5f/exceed", qos=0)
        assert client.publish("v5f/exceed", b"1", 2) is not None  # full flow: slot freed
        for pid in (101, 102):
            client.send(Publish("v5f/exceed", b"held", 2, packet_id=pid))
            assert client.expect(PubRec).packet_id == pid
        # Two QoS 2 messages await PUBREL: the receive maximum (2) is used up.
        client.send(Publish("v5f/exceed", b"one too many", 2, packet_id=103))
        client.expect_disconnect(ReasonCode.RECEIVE_MAXIMUM_EXCEEDED)
        payloads = [p.payload for p in bystander.sync() if isinstance(p, Publish)]
        assert payloads == [b"1", b"held", b"held"]


def test_releasing_qos2_keeps_client_within_receive_maximum(flow: BrokerProcess) -> None:
    with connected(flow, "v5f-within") as client:
        for pid in range(1, 9):
            client.send(Publish("v5f/within", b"x", 2, packet_id=pid))
            assert client.expect(PubRec).packet_id == pid
            client.send(PubRel(pid))
            assert client.expect(PubComp).packet_id == pid
        assert client.sync() == []


def test_qos2_resend_with_dup_does_not_count_twice(flow: BrokerProcess) -> None:
    with connected(flow, "v5f-dup") as client:
        client.send(Publish("v5f/dup", b"x", 2, packet_id=7))
        assert client.expect(PubRec).packet_id == 7
        for _ in range(3):
            client.send(Publish("v5f/dup", b"x", 2, dup=True, packet_id=7))
            assert client.expect(PubRec).packet_id == 7
        client.send(Publish("v5f/dup", b"y", 2, packet_id=8))
        assert client.expect(PubRec).packet_id == 8  # 2 outstanding: still allowed
        for pid in (7, 8):
            client.send(PubRel(pid))
            assert client.expect(PubComp).packet_id == pid


def test_message_too_large_for_one_subscriber_goes_to_the_others(broker: BrokerProcess) -> None:
    with connected(broker, "v5f-small", maximum_packet_size=128, receive_maximum=1) as small, \
            connected(broker, "v5f-big") as big, connected(broker, "v5f-size-pub") as pub:
        small.subscribe("v5f/size", qos=1)
        big.subscribe("v5f/size", qos=1)
        pub.publish("v5f/size", b"L" * 200, 1)
        pub.publish("v5f/size", b"small", 1)
        [large, little] = big.publishes(2)
        assert large.payload == b"L" * 200 and little.payload == b"small"
        big.ack(large)
        big.ack(little)
        # The large one was discarded for `small`, and did not keep its only window slot.
        [only] = small.publishes(1)
        assert only.payload == b"small"
        small.ack(only)
        assert small.sync() == []


def test_paho_maximum_packet_size_is_honoured(broker: BrokerProcess) -> None:
    props = paho_props(PacketTypes.CONNECT, MaximumPacketSize=256)
    with PahoV5(broker, "v5f-paho-small") as client, connected(broker, "v5f-paho-pub") as pub:
        assert client.connect(properties=props)[1] == 0
        client.subscribe("v5f/paho-size", 0)
        pub.publish("v5f/paho-size", b"z" * 300, 1)
        pub.publish("v5f/paho-size", b"fits", 1)
        msg = client.get()
        assert msg.payload == b"fits"
        client.sync()
        assert client.pending() == []


def test_packet_above_our_maximum_gets_0x95(flow: BrokerProcess) -> None:
    with connected(flow, "v5f-oversize") as client, connected(flow, "v5f-over-by") as bystander:
        bystander.subscribe("v5f/over", qos=1)
        client.send(Publish("v5f/over", b"o" * 3000, 1, packet_id=1))
        client.expect_disconnect(ReasonCode.PACKET_TOO_LARGE)
        assert bystander.sync() == []  # nothing of it was routed
        # The bystander is unaffected.
        with connected(flow, "v5f-over-pub") as pub:
            pub.publish("v5f/over", b"fine", 1)
        [got] = bystander.publishes(1)
        assert got.payload == b"fine"
        bystander.ack(got)


def test_oversize_refused_from_the_fixed_header_alone(flow: BrokerProcess) -> None:
    with connected(flow, "v5f-header") as client:
        # PUBLISH QoS 0 announcing 10,000,000 bytes; the body never comes.
        client.send_raw(b"\x30\x80\xad\xe2\x04")
        client.expect_disconnect(ReasonCode.PACKET_TOO_LARGE)


def test_packet_of_exactly_our_maximum_is_accepted(flow: BrokerProcess) -> None:
    with connected(flow, "v5f-exact") as client:
        # fixed header 3 bytes + topic 2+9 + packet id 2 + properties 1 = 17 bytes of overhead
        data = encode(Publish("v5f/exact", b"e" * (2048 - 17), 1, packet_id=5), MQTT_5)
        assert len(data) == 2048
        client.send_raw(data)
        assert client.expect(PubAck).packet_id == 5


def test_qos1_over_our_receive_maximum_waits_for_our_pubacks(flow: BrokerProcess) -> None:
    with connected(flow, "v5f-q1-exceed") as client, \
            connected(flow, "v5f-q1-exceed-by") as bystander:
        bystander.subscribe("v5f/q1exceed", qos=0)
        # Three QoS 1 PUBLISH in one write: the third arrives before the broker has sent the
        # first two PUBACKs, so the client has three in flight against a receive maximum of 2.
        # Those PUBACKs are the broker's to send: it sends them and reads on (no 0x93).
        client.send_raw(b"".join(
            encode(Publish("v5f/q1exceed", b"%d" % pid, 1, packet_id=pid), MQTT_5)
            for pid in (1, 2, 3)
        ))
        assert [client.expect(PubAck).packet_id for _ in range(3)] == [1, 2, 3]
        payloads = [p.payload for p in bystander.publishes(3)]
        assert payloads == [b"1", b"2", b"3"]
        assert client.sync() == []


def test_client_still_writing_sees_the_disconnect_reason(flow: BrokerProcess) -> None:
    """Lingering close: the broker reads and discards until the client closes, so a client
    still sending an oversized packet finishes its writes and then reads 0x95."""
    with connected(flow, "v5f-linger") as client:
        body = b"\x00\x0bv5f/lingerz" + b"x" * (1024 * 1024)
        client.send_raw(b"\x30" + enc_varint(len(body)))
        errors: list[OSError] = []

        def write_rest() -> None:
            try:
                for offset in range(0, len(body), 65536):
                    client.sock.sendall(body[offset:offset + 65536])
            except OSError as exc:
                errors.append(exc)

        writer = threading.Thread(target=write_rest)
        writer.start()
        writer.join(TIMEOUT)
        assert not writer.is_alive()
        assert errors == []  # no EPIPE / ECONNRESET while writing
        client.expect_disconnect(ReasonCode.PACKET_TOO_LARGE)
