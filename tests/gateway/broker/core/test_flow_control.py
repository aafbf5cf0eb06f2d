"""Backpressure in the pure core: which publishers are paused, when they resume.

The fake sink records `pause_reading` / `resume_reading` in `reading`; the fake clock drives the
stall rule. Limits are small so the marks are easy to reach: max_queued_messages 40 gives a
high-water mark of 20 queued messages and a low-water mark of 5.
"""

from __future__ import annotations

from gateway.broker.codec.packets import MQTT_5, Disconnect, PubAck, Publish
from gateway.broker.codec.reason_codes import ReasonCode
from gateway.broker.core.session import Connection
from gateway.broker.engine.flow_control import STALL_SECONDS
from tests.gateway.broker.core.fakes import FakeSink, Harness

LIMITS = {"max_queued_messages": 40, "max_inflight": 4}


def publishes(sink: FakeSink) -> list[Publish]:
    return [p for p in sink.packets() if isinstance(p, Publish)]


def publish_until_paused(h: Harness, pub: Connection, sink: FakeSink, topic: str,
                         qos: int = 1, limit: int = 1000) -> int:
    """Publish like a socket read loop does: stop once the broker pauses the publisher."""
    sent = 0
    while sink.reading and sent < limit:
        sent += 1
        h.send(pub, Publish(topic, b"%d" % sent, qos=qos, packet_id=sent if qos else None))
    return sent


def ack_all(h: Harness, sub: Connection, got: list[Publish]) -> None:
    for packet in got:
        h.send(sub, PubAck(packet.packet_id or 0))


def test_publisher_paused_while_subscriber_is_behind_and_resumed_after() -> None:
    h = Harness(**LIMITS)
    sub, sub_sink = h.connect("sub")
    h.subscribe(sub, "t", qos=1)
    pub, pub_sink = h.connect("pub")
    sent = publish_until_paused(h, pub, pub_sink, "t")
    # 4 in flight, then the queue reaches its high-water mark of 20: reading stops there.
    assert not pub_sink.reading
    assert sent == 4 + 20
    assert len(sub.session.outbound) == 20 if sub.session else False
    got = publishes(sub_sink)
    assert len(got) == 4
    # Acknowledging drains the queue; below the low-water mark (5) the publisher resumes.
    received = list(got)
    while not pub_sink.reading:
        ack_all(h, sub, got)
        got = publishes(sub_sink)
        received += got
    assert sub.session is not None and len(sub.session.outbound) <= 5
    # Nothing was dropped and everything arrives in order.
    ack_all(h, sub, got)
    received += publishes(sub_sink)
    assert [p.payload for p in received] == [b"%d" % i for i in range(1, sent + 1)]
    assert sub.session.dropped == 0


def test_stalled_subscriber_does_not_pause_others() -> None:
    h = Harness(**LIMITS)
    stalled, stalled_sink = h.connect("stalled")
    h.subscribe(stalled, "t", qos=1)
    fast, fast_sink = h.connect("fast")
    h.subscribe(fast, "t", qos=1)
    other_pub, other_sink = h.connect("other-pub")
    pub, pub_sink = h.connect("pub")
    publish_until_paused(h, pub, pub_sink, "t")
    assert not pub_sink.reading
    assert len(publishes(stalled_sink)) == 4  # its window, never acknowledged
    # The fast subscriber catches up; the publisher still waits for the stalled one.
    fast_got = publishes(fast_sink)
    received = list(fast_got)
    assert fast.session is not None
    while len(fast.session.outbound) > 5:
        ack_all(h, fast, fast_got)
        fast_got = publishes(fast_sink)
        received += fast_got
    assert not pub_sink.reading
    # A publisher to topics the stalled client does not read is never paused.
    for i in range(1, 200):
        h.send(other_pub, Publish("elsewhere", b"x", qos=1, packet_id=i))
    assert other_sink.reading
    # The stalled subscriber never acknowledges: after STALL_SECONDS it is slow and the
    # publisher resumes; from then on its own queue limit (drop-oldest) applies to it alone.
    h.advance(STALL_SECONDS)
    assert pub_sink.reading
    assert stalled.session is not None and stalled.session.slow
    assert not fast.session.slow
    for i in range(1000, 1200):
        ack_all(h, fast, fast_got)
        h.send(pub, Publish("t", b"%d" % i, qos=1, packet_id=i))
        assert pub_sink.reading
        fast_got = publishes(fast_sink)
        received += fast_got
    while fast_got:
        ack_all(h, fast, fast_got)
        fast_got = publishes(fast_sink)
        received += fast_got
    assert [p.payload for p in received][-200:] == [b"%d" % i for i in range(1000, 1200)]
    assert stalled.session.dropped > 0
    assert len(stalled.session.outbound) == 40
    assert fast.session.dropped == 0
    assert publishes(stalled_sink) == []


def acknowledge_windows(h: Harness, sub: Connection, sink: FakeSink, windows: int) -> int:
    """The subscriber acknowledges what it has, `windows` times over; returns how many."""
    count = 0
    for _ in range(windows):
        got = publishes(sink)
        ack_all(h, sub, got)
        count += len(got)
    return count


def test_slow_subscriber_that_keeps_up_again_is_no_longer_slow() -> None:
    # The harness's case on a starved machine: the subscriber was marked slow once (here: it
    # did not acknowledge for a second), then acknowledges again, but the publisher, no longer
    # paused, outruns it, so its queue never drains below the low-water mark. It must not
    # stay slow: delivering the gap between the marks (15 here) per STALL_SECONDS is keeping
    # up, and its publishers are paused for it again.
    h = Harness(max_queued_messages=40, max_inflight=4, queue_overflow="drop-newest")
    sub, sub_sink = h.connect("sub")
    h.subscribe(sub, "t", qos=1)
    pub, pub_sink = h.connect("pub")
    sent = publish_until_paused(h, pub, pub_sink, "t")
    h.advance(STALL_SECONDS)
    session = sub.session
    assert session is not None and session.slow and pub_sink.reading
    # the publisher outruns it: 8 messages per 4 it takes, never below the low-water mark
    for _ in range(3):
        acknowledge_windows(h, sub, sub_sink, 1)
        for _ in range(8):
            sent += 1
            h.send(pub, Publish("t", b"%d" % sent, qos=1, packet_id=sent))
        assert pub_sink.reading and len(session.outbound) > 5
    h.advance(STALL_SECONDS / 2)  # 12 delivered in half a second: 7.5 needed
    assert not session.slow
    sent += 1
    h.send(pub, Publish("t", b"%d" % sent, qos=1, packet_id=sent))
    assert not pub_sink.reading  # paused for it again
    # Its backlog (40) takes longer than a second to drain at 8 per half second: still
    # keeping up, so the publisher waits, and is resumed once the queue has drained.
    for _ in range(3):
        assert acknowledge_windows(h, sub, sub_sink, 2) == 8
        h.advance(STALL_SECONDS / 2)
        assert not session.slow and not pub_sink.reading
    while not pub_sink.reading:
        assert acknowledge_windows(h, sub, sub_sink, 1) > 0
    assert not session.slow and len(session.outbound) <= 5
    # A subscriber that stops taking messages is slow again after STALL_SECONDS.
    publish_until_paused(h, pub, pub_sink, "t", limit=sent + 100)
    assert not pub_sink.reading
    h.advance(STALL_SECONDS / 2)
    h.advance(STALL_SECONDS / 2)
    assert session.slow and pub_sink.reading
    assert h.broker.dispatch.flow.recovered_sessions == 1


def test_subscriber_that_drains_too_slowly_stays_slow() -> None:
    # 4 messages per half second (8 per second against the 15 that count as keeping up)
    h = Harness(max_queued_messages=40, max_inflight=4, queue_overflow="drop-newest")
    sub, sub_sink = h.connect("sub")
    h.subscribe(sub, "t", qos=1)
    pub, pub_sink = h.connect("pub")
    sent = publish_until_paused(h, pub, pub_sink, "t")
    h.advance(STALL_SECONDS)
    session = sub.session
    assert session is not None and session.slow
    for _ in range(6):
        assert acknowledge_windows(h, sub, sub_sink, 1) == 4
        for _ in range(8):
            sent += 1
            h.send(pub, Publish("t", b"%d" % sent, qos=1, packet_id=sent))
        assert pub_sink.reading
        h.advance(STALL_SECONDS / 2)
        assert session.slow
    assert h.broker.dispatch.flow.recovered_sessions == 0


def test_qos0_fanout_to_readers_never_pauses() -> None:
    h = Harness(**LIMITS)
    subs = [h.connect(f"sub{i}") for i in range(16)]
    for conn, _ in subs:
        h.subscribe(conn, "f/#", qos=0)
    pub, pub_sink = h.connect("pub")
    for i in range(500):
        h.send(pub, Publish("f/x", b"%d" % i))
        assert pub_sink.reading
    for _, sink in subs:
        assert [p.payload for p in publishes(sink)] == [b"%d" % i for i in range(500)]


def test_offline_session_never_pauses_publishers() -> None:
    h = Harness(**LIMITS)
    sub, _ = h.connect("offline", clean=False)
    h.subscribe(sub, "t", qos=1)
    h.drop(sub)
    pub, pub_sink = h.connect("pub")
    for i in range(1, 100):
        h.send(pub, Publish("t", b"x", qos=1, packet_id=i))
    assert pub_sink.reading
    session = h.broker.sessions["offline"]
    assert len(session.outbound) == 40 and session.dropped == 99 - 40


def test_subscriber_leaving_resumes_its_publishers() -> None:
    h = Harness(**LIMITS)
    sub, _ = h.connect("sub")
    h.subscribe(sub, "t", qos=1)
    pub, pub_sink = h.connect("pub")
    publish_until_paused(h, pub, pub_sink, "t")
    assert not pub_sink.reading
    h.drop(sub)
    assert pub_sink.reading


def test_clients_publishing_to_each_other_do_not_deadlock() -> None:
    h = Harness(**LIMITS)
    a, a_sink = h.connect("a")
    b, b_sink = h.connect("b")
    h.subscribe(a, "to-a", qos=1)
    h.subscribe(b, "to-b", qos=1)
    publish_until_paused(h, a, a_sink, "to-b")
    assert not a_sink.reading  # waits for b to acknowledge
    # b cannot be paused for a: a's acknowledgements are unread while a is paused.
    for i in range(1, 100):
        h.send(b, Publish("to-a", b"x", qos=1, packet_id=i))
    assert b_sink.reading
    ack_all(h, b, publishes(b_sink))


def test_v5_qos1_over_receive_maximum_is_disconnect_0x93() -> None:
    h = Harness(receive_maximum=3)
    pub, sink = h.connect("pub", MQTT_5)
    sink.packets()
    for pid in (1, 2, 3):
        h.send(pub, Publish("t", b"x", qos=1, packet_id=pid))
    assert sink.packets() == [PubAck(1), PubAck(2), PubAck(3)]
    # The fake sink never hands bytes to a socket: three PUBACKs are still "in flight".
    h.send(pub, Publish("t", b"x", qos=1, packet_id=4))
    packets = sink.packets()
    assert isinstance(packets[-1], Disconnect)
    assert packets[-1].reason_code == ReasonCode.RECEIVE_MAXIMUM_EXCEEDED
    assert sink.closed
