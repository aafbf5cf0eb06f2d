"""When an alarm's condition holds (bridge/alarms/condition.py): limits and their deadband,
on/off delays, rate of change, stale values, offline devices, faults; time passed in."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bridge.alarms.condition import Condition
from bridge.alarms.config import AlarmDefinition


def alarm(**keys: Any) -> AlarmDefinition:
    return AlarmDefinition.model_validate({"name": "a", "point": "d/p", **keys})


def feed(condition: Condition, values: list[tuple[float, object]]) -> list[bool]:
    states = []
    for now, value in values:
        condition.value(value, now)
        states.append(condition.evaluate(now)[0])
    return states


@pytest.mark.parametrize(("keys", "values", "expected"), [
    ({"kind": "high", "limit": 10, "deadband": 2},
     [10, 10.5, 9, 8.5, 8, 11, 7.9], [False, True, True, True, False, True, False]),
    ({"kind": "high-high", "limit": 10}, [11, 10, 11], [True, False, True]),
    ({"kind": "low", "limit": 5, "deadband": 1},
     [5, 4.9, 5.5, 6, 4], [False, True, True, False, True]),
    ({"kind": "low-low", "limit": 0}, [-1, None, "x", 1], [True, True, True, False]),
    ({"kind": "fault"}, [False, True, 0, 2, False], [False, True, False, True, False]),
])
def test_limits_deadbands_and_faults(keys: dict[str, Any], values: list[object],
                                     expected: list[bool]) -> None:
    condition = Condition(alarm(**keys), 0.0)
    assert feed(condition, [(float(i), v) for i, v in enumerate(values)]) == expected


def test_on_and_off_delays_need_the_condition_to_hold_that_long() -> None:
    condition = Condition(alarm(kind="high", limit=10, on_delay=5, off_delay=3), 0.0)
    assert feed(condition, [(0, 11), (4, 12)]) == [False, False]
    assert condition.evaluate(4.5) == (False, 5.0)  # looked at again when the delay is over
    assert condition.evaluate(5.0)[0] is True
    assert feed(condition, [(6, 9), (7, 11), (8, 9)]) == [True, True, True]  # a blip resets
    assert condition.evaluate(10.9)[0] is True
    assert condition.evaluate(11.0)[0] is False


def test_a_brief_excursion_shorter_than_the_on_delay_raises_nothing() -> None:
    condition = Condition(alarm(kind="high", limit=10, on_delay=2), 0.0)
    assert feed(condition, [(0, 11), (1, 9), (5, 9)]) == [False, False, False]


def test_rate_of_change_over_its_window() -> None:
    condition = Condition(alarm(kind="rate", limit=1.0, window=10), 0.0)
    assert feed(condition, [(0, 0.0), (5, 4.0)]) == [False, False]  # 0.8 / s
    assert feed(condition, [(6, 8.0)]) == [True]  # 8 in 6 s
    assert condition.evaluate(15.0)[0] is True  # (5, 4) -> (6, 8): 4 per s, still in window
    assert condition.evaluate(16.5)[0] is False  # one value left in the window: no rate


def test_stale_when_the_value_does_not_change_for_its_time() -> None:
    condition = Condition(alarm(kind="stale", stale_after=10), 0.0)
    assert feed(condition, [(1, 5), (8, 5)]) == [False, False]
    assert condition.evaluate(9)[1] == 11.0  # no change since 1
    assert condition.evaluate(11)[0] is True
    assert feed(condition, [(12, 6)]) == [False]


def test_offline_after_being_seen_online_or_after_the_grace() -> None:
    offline = alarm(point="d", kind="offline")
    condition = Condition(offline, 0.0, grace=30)
    condition.status(False, 0.0)  # the bridge's first "offline" at start
    assert condition.evaluate(1.0) == (False, 30.0)
    assert condition.evaluate(30.0)[0] is True  # never came up
    condition.status(True, 31.0)
    assert condition.evaluate(31.0)[0] is False
    condition.status(False, 40.0)
    assert condition.evaluate(40.0)[0] is True


def test_a_restored_active_alarm_clears_at_its_first_normal_value() -> None:
    condition = Condition(alarm(kind="high", limit=10, deadband=1), 0.0, active=True)
    assert feed(condition, [(0, 9.5)]) == [True]  # inside the deadband: still active
    assert feed(condition, [(1, 8.0)]) == [False]


@given(st.lists(st.floats(-100, 100), min_size=1, max_size=50), st.floats(0, 10))
def test_a_high_alarm_never_flaps_inside_its_deadband(values: list[float],
                                                     deadband: float) -> None:
    condition = Condition(alarm(kind="high", limit=50, deadband=deadband), 0.0)
    states = feed(condition, [(float(i), v) for i, v in enumerate(values)])
    previous = False
    for value, active in zip(values, states, strict=True):
        if active != previous:  # a change happens only past the limit or its deadband
            assert (value > 50) if active else (value <= 50 - deadband)
        else:
            assert not (not previous and value > 50)
            assert not (previous and value <= 50 - deadband)
        previous = active
