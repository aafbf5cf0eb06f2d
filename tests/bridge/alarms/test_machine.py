"""The alarm state machine (bridge/alarms/machine.py): every (state, cause) pair, and random
event sequences keeping its rules."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bridge.alarms.machine import AlarmState, Cause, State, Transition, expire, step

N, AU, AA, CU, SH = (State.NORMAL, State.ACTIVE_UNACKED, State.ACTIVE_ACKED,
                     State.CLEARED_UNACKED, State.SHELVED)

# (state, active, cause) -> the state after it, None: no transition
TABLE = [
    (N, False, Cause.RAISE, AU), (N, False, Cause.CLEAR, None), (N, False, Cause.ACK, None),
    (AU, True, Cause.ACK, AA), (AU, True, Cause.CLEAR, CU), (AU, True, Cause.RAISE, None),
    (AA, True, Cause.CLEAR, N), (AA, True, Cause.ACK, None), (AA, True, Cause.RAISE, None),
    (CU, False, Cause.ACK, N), (CU, False, Cause.RAISE, AU), (CU, False, Cause.CLEAR, None),
    (N, False, Cause.UNSHELVE, None), (AU, True, Cause.SHELVE, SH), (CU, False, Cause.SHELVE, SH),
    (SH, True, Cause.UNSHELVE, AU), (SH, False, Cause.UNSHELVE, N), (SH, True, Cause.ACK, None),
    (SH, False, Cause.RAISE, None), (SH, True, Cause.CLEAR, None),
]


@pytest.mark.parametrize(("state", "active", "cause", "after"), TABLE)
def test_each_state_and_cause(state: State, active: bool, cause: Cause,
                              after: State | None) -> None:
    alarm = AlarmState("a", state, active, number=4, since_ms=1)
    new, transition = step(alarm, cause, 1000, 7.5, "bob", shelve_until_ms=5000)
    if after is None:
        assert transition is None and new.state is state and new.number == 4
        return
    assert transition == Transition("a", 5, state, after, cause, 7.5, 1000, "bob")
    assert new.state is after and new.number == 5 and new.since_ms == 1000
    assert new.shelved_until_ms == (5000 if after is SH else None)


def test_a_shelved_alarm_follows_its_condition_silently_and_unshelves_to_it() -> None:
    alarm, _ = step(AlarmState("a"), Cause.SHELVE, 0, shelve_until_ms=10_000)
    alarm, transition = step(alarm, Cause.RAISE, 100, 99.0)
    assert transition is None and alarm.active and alarm.state is SH
    assert expire(alarm, 9_999) == (alarm, None)
    alarm, transition = expire(alarm, 10_000)
    assert transition is not None and transition.cause is Cause.UNSHELVE
    assert alarm.state is AU and alarm.raised_ms == 10_000


def test_an_occurrence_keeps_its_raise_time_until_it_is_normal_again() -> None:
    alarm, _ = step(AlarmState("a"), Cause.RAISE, 10)
    alarm, _ = step(alarm, Cause.ACK, 20)
    assert alarm.raised_ms == 10
    alarm, _ = step(alarm, Cause.CLEAR, 30)
    assert alarm.state is N and alarm.raised_ms is None


def test_states_and_transitions_survive_their_json() -> None:
    alarm, transition = step(AlarmState("a"), Cause.RAISE, 10, 1.5)
    assert transition is not None
    assert AlarmState.from_json(alarm.to_json()) == alarm
    assert Transition.from_json(transition.to_json()) == transition


def test_shelving_needs_its_end() -> None:
    with pytest.raises(ValueError, match="shelve_until_ms"):
        step(AlarmState("a"), Cause.SHELVE, 0)


@given(st.lists(st.sampled_from(list(Cause)), max_size=60))
def test_any_sequence_numbers_transitions_one_by_one_and_keeps_the_rules(
        causes: list[Cause]) -> None:
    alarm = AlarmState("a")
    numbers: list[int] = []
    for i, cause in enumerate(causes):
        before = alarm
        alarm, transition = step(alarm, cause, i, i, shelve_until_ms=i + 10)
        if transition is not None:
            numbers.append(transition.number)
            assert transition.from_state is before.state and transition.to_state is alarm.state
        # the state says what the condition is, except while shelved
        if alarm.state in (AU, AA):
            assert alarm.active
        if alarm.state in (N, CU):
            assert not alarm.active
        if alarm.state is N:
            assert alarm.raised_ms is None
        if alarm.state in (AU, AA, CU):
            assert alarm.raised_ms is not None
    assert numbers == list(range(1, len(numbers) + 1))
