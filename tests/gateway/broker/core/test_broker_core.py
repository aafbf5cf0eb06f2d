"""The pure broker core driven with packets and a fake clock."""

from __future__ import annotations

from gateway.broker.codec.packets import (
    MQTT_3_1_1,
    MQTT_5,
    ConnAck,
    Disconnect,
    Properties,
    PubAck,
    PubComp,
    Publish,
    PubRec,
    PubRel,
    SubAck,
    Will,
)
from gateway.broker.contracts.hooks import BrokerHooks
from storage.memory import MemoryStore
from tests.gateway.broker.core.fakes import FakeSink, Harness


def publishes(sink_packets: list[object]) -> list[Publish]:
    return [p for p in sink_packets if isinstance(p, Publish)]


def test_qos1_roundtrip_and_ack_order() -> None:
    h = Harness()
    sub, sub_sink = h.connect("sub")
    h.subscribe(sub, "t/#", qos=1)
    pub, pub_sink = h.connect("pub")
    assert [type(p) for p in sub_sink.packets()] == [ConnAck, SubAck]
    pub_sink.packets()
    for pid in (1, 2, 3):
        h.send(pub, Publish("t/x", b"%d" % pid, qos=1, packet_id=pid))
    assert pub_sink.packets() == [PubAck(1), PubAck(2), PubAck(3)]
    got = publishes(sub_sink.packets())
    assert [(p.payload, p.qos, p.packet_id) for p in got] == [
        (b"1", 1, 1), (b"2", 1, 2), (b"3", 1, 3)
    ]


def test_overlapping_subscriptions_deliver_once_at_highest_qos() -> None:
    h = Harness()
    sub, sink = h.connect("sub", MQTT_5)
    h.subscribe(sub, "a/#", qos=0)
    h.subscribe(sub, "a/+", qos=2)
    sink.packets()
    pub, _ = h.connect("pub")
    h.send(pub, Publish("a/b", b"x", qos=2, packet_id=7))
    got = publishes(sink.packets())
    assert len(got) == 1 and got[0].qos == 2


def test_qos2_towards_subscriber_is_exactly_once() -> None:
    h = Harness()
    sub, sink = h.connect("sub")
    h.subscribe(sub, "q", qos=2)
    pub, pub_sink = h.connect("pub")
    sink.packets()
    h.send(pub, Publish("q", b"once", qos=2, packet_id=9))
    h.send(pub, Publish("q", b"once", qos=2, packet_id=9, dup=True))  # resent before PUBREL
    assert pub_sink.packets()[-2:] == [PubRec(9), PubRec(9)]
    h.send(pub, PubRel(9))
    assert pub_sink.packets() == [PubComp(9)]
    delivered = publishes(sink.packets())
    assert len(delivered) == 1
    pid = delivered[0].packet_id
    assert pid is not None
    h.send(sub, PubRec(pid))
    assert sink.packets() == [PubRel(pid)]
    h.send(sub, PubComp(pid))
    assert not sub.session or not sub.session.outbound.inflight


def test_offline_queue_and_dup_redelivery() -> None:
    h = Harness()
    sub, sink = h.connect("sub", clean=False)
    h.subscribe(sub, "q", qos=1)
    pub, _ = h.connect("pub")
    h.send(pub, Publish("q", b"1", qos=1, packet_id=1))
    first = publishes(sink.packets())
    assert first[0].dup is False
    h.drop(sub)
    h.send(pub, Publish("q", b"2", qos=1, packet_id=2))
    h.send(pub, Publish("q", b"3", qos=0))  # QoS 0 is not queued for offline sessions
    _, sink2 = h.connect("sub", clean=False)
    packets = sink2.packets()
    assert isinstance(packets[0], ConnAck) and packets[0].session_present
    again = publishes(packets)
    assert [(p.payload, p.dup) for p in again] == [(b"1", True), (b"2", False)]
    assert again[0].packet_id == first[0].packet_id


def test_queue_overflow_policies_are_counted() -> None:
    for policy, kept in (("drop-oldest", [b"3", b"4"]), ("drop-newest", [b"1", b"2"])):
        h = Harness(max_queued_messages=2, queue_overflow=policy)
        sub, _ = h.connect("sub", clean=False)
        h.subscribe(sub, "q", qos=1)
        h.drop(sub)
        pub, _ = h.connect("pub")
        for n in range(1, 5):
            h.send(pub, Publish("q", b"%d" % n, qos=1, packet_id=n))
        assert h.broker.counters.dropped == 2
        _, sink = h.connect("sub", clean=False)
        assert [p.payload for p in publishes(sink.packets())] == kept


def test_slow_consumer_fills_only_its_own_queue() -> None:
    h = Harness(max_queued_messages=3)
    slow, slow_sink = h.connect("slow")
    fast, fast_sink = h.connect("fast")
    h.subscribe(slow, "t")
    h.subscribe(fast, "t")
    slow_sink.pending = 10**9  # its socket buffer is full
    pub, _ = h.connect("pub")
    for n in range(10):
        h.send(pub, Publish("t", b"%d" % n))
    assert len(publishes(fast_sink.packets())) == 10
    assert publishes(slow_sink.packets()) == []
    assert slow.session is not None and len(slow.session.outbound) == 3
    slow_sink.pending = 0
    h.broker.dispatch.pump(slow.session, h.now)
    assert [p.payload for p in publishes(slow_sink.packets())] == [b"7", b"8", b"9"]


def test_keepalive_timeout_publishes_will() -> None:
    h = Harness()
    watcher, sink = h.connect("watcher")
    h.subscribe(watcher, "wills/#")
    h.connect("dying", keep_alive=10, will=Will("wills/dying", b"gone"))
    sink.packets()
    h.advance(14)
    assert publishes(sink.packets()) == []
    h.advance(2)  # 16 s > 1.5 x 10 s
    assert [p.payload for p in publishes(sink.packets())] == [b"gone"]


def test_connections_before_connect_time_out_and_connected_ones_are_found_by_session() -> None:
    h = Harness(connect_timeout=5.0)
    silent_sink = FakeSink(MQTT_3_1_1)
    silent = h.broker.open_connection(silent_sink, "test", "127.0.0.1:2", True, h.now)
    client, _ = h.connect("client", keep_alive=10)
    # the connected one is found through its session; only the silent one waits for CONNECT
    assert h.broker.connecting == {silent}
    assert set(h.broker.connections()) == {client, silent}
    h.advance(6)  # past the connect timeout; within the client's keepalive
    assert silent.closed and silent_sink.closed and not client.closed
    h.advance(10)  # 16 s > 1.5 x 10 s without a packet
    assert client.closed
    h.drop(silent)
    h.drop(client)
    assert h.broker.connecting == set() and h.broker.connections() == []


def test_normal_disconnect_suppresses_will_but_0x04_sends_it() -> None:
    h = Harness()
    watcher, sink = h.connect("watcher")
    h.subscribe(watcher, "w")
    for reason, expected in ((0x00, []), (0x04, [b"bye"])):
        conn, _ = h.connect("c", MQTT_5, will=Will("w", b"bye"))
        sink.packets()
        h.send(conn, Disconnect(reason))
        h.drop(conn)
        assert [p.payload for p in publishes(sink.packets())] == expected


def test_will_delay_cancelled_by_reconnect_and_sent_after_delay() -> None:
    h = Harness()
    watcher, sink = h.connect("watcher")
    h.subscribe(watcher, "w")
    expiry = Properties(session_expiry_interval=100)
    will = Will("w", b"late", properties=Properties(will_delay_interval=5))
    conn, _ = h.connect("c", MQTT_5, clean=True, will=will, properties=expiry)
    h.drop(conn)
    h.advance(3)
    h.connect("c", MQTT_5, clean=False, properties=expiry)  # back within the delay
    h.advance(10)
    assert publishes(sink.packets()) == []
    conn2, _ = h.connect("d", MQTT_5, will=will, properties=expiry)
    h.drop(conn2)
    h.advance(4)
    assert publishes(sink.packets()) == []
    h.advance(2)
    assert [p.payload for p in publishes(sink.packets())] == [b"late"]


def test_session_expiry() -> None:
    h = Harness()
    conn, _ = h.connect("c", MQTT_5, properties=Properties(session_expiry_interval=30))
    h.subscribe(conn, "x", qos=1)
    h.drop(conn)
    h.advance(29)
    assert "c" in h.broker.sessions
    h.advance(2)
    assert "c" not in h.broker.sessions
    assert h.broker.table.count == 0


def test_shared_subscription_round_robin() -> None:
    h = Harness()
    sinks = []
    for name in ("m1", "m2"):
        conn, sink = h.connect(name)
        h.subscribe(conn, "$share/g/jobs/#")
        sink.packets()
        sinks.append(sink)
    pub, _ = h.connect("pub")
    for n in range(6):
        h.send(pub, Publish("jobs/x", b"%d" % n))
    counts = [len(publishes(s.packets())) for s in sinks]
    assert counts == [3, 3]


def test_restore_from_memory_store() -> None:
    store = MemoryStore()
    h = Harness(store)
    sub, _ = h.connect("sub", clean=False)
    h.subscribe(sub, "q/#", qos=1)
    h.drop(sub)
    pub, _ = h.connect("pub")
    h.send(pub, Publish("q/1", b"queued", qos=1, packet_id=1))
    h.send(pub, Publish("r", b"kept", retain=True))
    h2 = Harness(store)
    h2.broker.restore(store.restore(), h2.now)
    sub2, sink = h2.connect("sub", clean=False)
    packets = sink.packets()
    assert isinstance(packets[0], ConnAck) and packets[0].session_present
    assert [p.payload for p in publishes(packets)] == [b"queued"]
    h2.subscribe(sub2, "r")
    assert [p.payload for p in publishes(sink.packets())] == [b"kept"]


class _Durable(BrokerHooks):
    durable = True


def test_durable_hooks_gate_acknowledgements() -> None:
    h = Harness(_Durable())
    pub, sink = h.connect("pub", MQTT_3_1_1)
    sink.gated.clear()
    h.send(pub, Publish("t", b"x", qos=1, packet_id=4))
    h.send(pub, Publish("t", b"x", qos=0))
    assert len(sink.gated) == 1 and sink.packets()[-1] == PubAck(4)


def test_topics_over_the_limits_get_their_own_reason_codes() -> None:
    h = Harness(max_topic_length=20, max_topic_levels=3)
    v5, sink = h.connect("v5", version=MQTT_5)
    sink.packets()
    h.send(v5, Publish("a/b/c/d", b"deep", qos=1, packet_id=1))  # 4 levels
    h.send(v5, Publish("x" * 21, b"long", qos=1, packet_id=2))
    h.send(v5, Publish("é" * 10, b"fits", qos=1, packet_id=3))  # 20 bytes
    h.send(v5, Publish("a/b/c/d", b"deep", qos=2, packet_id=4))
    assert [(p.packet_id, p.reason_code) for p in sink.packets()] == [
        (1, 0x90), (2, 0x90), (3, 0), (4, 0x90)
    ]
    h.subscribe(v5, "a/+/c/#")
    assert [p.reason_codes for p in sink.packets()] == [[0x8F]]  # type: ignore[attr-defined]
    v3, sink3 = h.connect("v3")
    h.subscribe(v3, "a/+/c/#")
    h.send(v3, Publish("a/b/c/d", b"deep", qos=1, packet_id=5))
    assert sink3.packets()[1:] == [SubAck(1, [0x80]), PubAck(5)]  # 3.1.1: acked and dropped
    _, wsink = h.connect("w5", version=MQTT_5, will=Will("w/" * 3 + "x", b"gone"))
    _, wsink3 = h.connect("w3", will=Will("w/" * 3 + "x", b"gone"))
    assert [p.reason_code for p in wsink.packets()] == [0x90]  # type: ignore[attr-defined]
    assert [p.reason_code for p in wsink3.packets()] == [5]  # type: ignore[attr-defined]
    assert h.broker.counters.topic_limited == 8
    # in-process links are exempt: their topics come from the configuration
    from gateway.broker.engine.links import Link

    received: list[str] = []
    reader = Link(h.broker, "uplink", lambda: h.now, lambda m, q, r: received.append(m.topic))
    reader.subscribe("a/+/c/#", qos=1)
    writer = Link(h.broker, "bridge", lambda: h.now, lambda m, q, r: None)
    assert writer.publish("a/b/c/d", b"ok") == 1
    assert received == ["a/b/c/d"]
