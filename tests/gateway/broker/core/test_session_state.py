"""Per-session state that an idle client never allocates still behaves like the full thing."""

from __future__ import annotations

from gateway.broker.core.inflight import Delivery, Outbound, QueueLimits
from gateway.broker.core.message import Message
from gateway.broker.core.router import SubOptions
from gateway.broker.core.session import Session


def _delivery(n: int, qos: int = 0) -> Delivery:
    return Delivery(Message(f"t/{n}", b"x" * n, qos, False), qos, False)


def test_queue_from_empty_through_overflow_clear_and_restore() -> None:
    limits = QueueLimits(max_messages=3, max_bytes=1 << 20, drop_oldest=True)  # a count cap
    outbound = Outbound(limits)
    assert len(outbound) == 0 and list(outbound.queue) == [] and outbound.pop() is None
    dropped = [d for n in range(1, 5) for d in outbound.enqueue(_delivery(n))]
    assert [d.message.topic for d in dropped] == ["t/1"]
    outbound.requeue_front(_delivery(9))
    assert [d.message.topic for d in outbound.iter_all()] == ["t/9", "t/2", "t/3", "t/4"]
    assert outbound.queued_bytes == sum(d.message.queued_cost for d in outbound.iter_all())
    outbound.clear()
    assert (len(outbound), outbound.queued_bytes, list(outbound.queue)) == (0, 0, [])
    for n in (5, 6):
        outbound.restore_queued(_delivery(n))
    popped = [outbound.pop(), outbound.pop(), outbound.pop()]
    assert [d.message.topic if d else None for d in popped] == ["t/5", "t/6", None]
    assert outbound.queued_bytes == 0


def test_qos2_packet_ids_wait_for_release() -> None:
    session = Session("c", 5, Outbound(QueueLimits(10, 1000, True)))
    assert not session.release(7)  # nothing was waiting
    session.await_release(7)
    session.await_release(8)
    assert 7 in session.awaiting_release and len(session.awaiting_release) == 2
    assert session.release(7) and not session.release(7)
    assert set(session.awaiting_release) == {8}
    # Sessions start from one shared empty set: one session's ids never show in another's.
    assert not Session("d", 5, Outbound(QueueLimits(10, 1000, True))).awaiting_release


def test_subscriptions_and_in_flight_start_shared_and_empty_and_never_leak() -> None:
    limits = QueueLimits(10, 1000, True)
    first, second = Session("a", 5, Outbound(limits)), Session("b", 5, Outbound(limits))
    first.subscribe("x/#", SubOptions(qos=1))
    first.subscriptions.pop("nothing", None)
    second.subscriptions.pop("x/#", None)  # reading or popping the shared empty one is harmless
    first.outbound.start(_delivery(1, qos=1))
    keeps_id = _delivery(2, qos=1)
    keeps_id.packet_id = 77  # resent after a reconnect: same identifier
    first.outbound.start(keeps_id)
    assert list(first.subscriptions) == ["x/#"] and sorted(first.outbound.inflight) == [1, 77]
    third = Session("c", 5, Outbound(limits))
    for session in (second, third):
        assert session.subscriptions == {} and session.outbound.inflight == {}
    second.outbound.start(_delivery(3, qos=1))
    assert list(second.outbound.inflight) == [1] and list(third.outbound.inflight) == []
    assert first.outbound.acknowledge(1, 1) is not None
    assert sorted(first.outbound.inflight) == [77] and list(second.outbound.inflight) == [1]


def test_reloaded_bounds_only_grow() -> None:
    old = QueueLimits(100, 1000, True, page=50)
    grown = old.grown_to(50, 5000, False)
    assert grown == QueueLimits(100, 5000, False, page=50)
