"""When a commit may wait for a publisher's next message (gateway/broker/net/ack_hold.py),
worked through with explicit times."""

from __future__ import annotations

from gateway.broker.net.ack_hold import MIN_GAP, OVERDUE_GAPS, RELEARN_SECONDS, AckPace, hold_until

HOLD = 1.0
RECEIVE_MAXIMUM = 64


def paced(*arrivals: float) -> AckPace:
    """A pace whose acknowledged publishes arrived at `arrivals`, none committed yet."""
    pace = AckPace()
    for t in arrivals:
        pace.acknowledged(t)
    return pace


def test_a_steady_pipelining_publisher_is_held_until_the_hold_or_its_next_message_is_late() -> None:
    pace = paced(0.0, 0.1)
    pace.committing()  # the first two went out in a commit of their own
    pace.acknowledged(0.2)
    pace.acknowledged(0.3)
    # held until the first of: one HOLD after its oldest waiting acknowledgement (1.2), and
    # OVERDUE_GAPS average gaps after its latest message
    assert hold_until([(pace, 2)], HOLD, RECEIVE_MAXIMUM, 0.3) == 0.3 + OVERDUE_GAPS * pace.gap
    for n in range(4, 13):
        pace.acknowledged(n / 10)
    assert hold_until([(pace, 11)], HOLD, RECEIVE_MAXIMUM, 1.2) is None  # HOLD has passed
    assert pace.window == 0  # nothing learned: it never stopped sending


def test_a_publisher_that_stops_when_held_has_its_window_learned() -> None:
    pace = paced(0.0, 0.01, 0.02)
    late = 0.02 + OVERDUE_GAPS * 0.01
    assert hold_until([(pace, 3)], HOLD, RECEIVE_MAXIMUM, late - 0.001) is not None
    assert hold_until([(pace, 3)], HOLD, RECEIVE_MAXIMUM, late) is None
    assert pace.window == 3
    pace.committing()
    pace.acknowledged(0.1)
    assert hold_until([(pace, 1)], HOLD, RECEIVE_MAXIMUM, 0.1) is not None
    pace.acknowledged(0.11)
    # half its window: committed now, it never has to stop sending while the commit runs
    assert hold_until([(pace, 2)], HOLD, RECEIVE_MAXIMUM, 0.11) is None


def test_a_lock_step_publisher_is_held_once_then_not_until_the_verdict_expires() -> None:
    pace = paced(0.0)
    pace.committing()
    pace.acknowledged(0.02)  # one in flight: it waits for this PUBACK before the next
    assert hold_until([(pace, 1)], HOLD, RECEIVE_MAXIMUM, 0.02) == 0.02 + OVERDUE_GAPS * 0.02
    assert hold_until([(pace, 1)], HOLD, RECEIVE_MAXIMUM, 0.08) is None
    assert pace.window == 1
    t = 0.1
    while t < 0.08 + RELEARN_SECONDS:  # every PUBACK goes out with the next commit
        pace.committing()
        pace.acknowledged(t)
        assert hold_until([(pace, 1)], HOLD, RECEIVE_MAXIMUM, t) is None
        t += 0.02
    pace.committing()
    pace.acknowledged(t)
    assert hold_until([(pace, 1)], HOLD, RECEIVE_MAXIMUM, t) is not None  # tried again
    assert pace.window == 0


def test_nothing_is_held_for_fast_or_slow_publishers_or_anything_else() -> None:
    fast = paced(0.0, MIN_GAP / 2)
    assert hold_until([(fast, 2)], HOLD, RECEIVE_MAXIMUM, MIN_GAP / 2) is None
    slow = paced(0.0, 0.6)  # a second message would not come within the hold
    assert hold_until([(slow, 1)], HOLD, RECEIVE_MAXIMUM, 0.6) is None
    first = paced(0.0)  # no gap known yet
    assert hold_until([(first, 1)], HOLD, RECEIVE_MAXIMUM, 0.0) is None
    steady = paced(0.0, 0.1)
    assert hold_until([(steady, 2)], HOLD, RECEIVE_MAXIMUM, 0.1) is not None
    assert hold_until([(steady, 2)], 0.0, RECEIVE_MAXIMUM, 0.1) is None  # holding is off
    assert hold_until([(steady, 2), (None, 0)], HOLD, RECEIVE_MAXIMUM, 0.1) is None  # a CONNACK
    assert hold_until([(steady, 2)], HOLD, 4, 0.1) is None  # half the Receive Maximum
    steady.other = True  # a delivery waits behind its acknowledgements
    assert hold_until([(steady, 2)], HOLD, RECEIVE_MAXIMUM, 0.1) is None
    steady.committing()
    assert hold_until([(steady, 0)], HOLD, RECEIVE_MAXIMUM, 0.1) is None  # nothing waits


def test_the_earliest_deadline_of_all_held_publishers_ends_the_hold() -> None:
    a = paced(0.0, 0.1)
    b = paced(0.05, 0.25)
    until = hold_until([(a, 2), (b, 2)], HOLD, RECEIVE_MAXIMUM, 0.25)
    assert until == min(0.1 + OVERDUE_GAPS * 0.1, 0.25 + OVERDUE_GAPS * 0.2)
