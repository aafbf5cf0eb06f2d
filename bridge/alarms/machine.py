"""The alarm state machine, in the spirit of ISA-18.2 (pure: times are passed in).

How this works: an alarm is in one of five states:

    normal ──raise──► active_unacked ──ack──► active_acked
      ▲                   │    ▲                   │
      │                 clear  raise             clear
      │                   ▼    │                   │
      └──────ack──── cleared_unacked ◄─────────────┘ (active_acked + clear goes to normal)

and `shelved` beside them: shelving takes an alarm out of service for a while (any state goes
to shelved); while shelved its condition is still followed (`AlarmState.active`) but makes no
transition; unshelving (by hand, or when the shelving time is over, `expire`) returns it to
active_unacked when its condition holds, else to normal.

`step(state, event, cause, ts_ms, value)` returns the new state and the `Transition` it made, or
None when the event changes nothing (an ack of an acknowledged alarm, a clear of a normal one).
Every transition carries its alarm's next transition number (1, 2, ...): the cloud deduplicates
on (gateway, alarm, number), so a transition published twice is counted once.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class State(StrEnum):
    NORMAL = "normal"
    ACTIVE_UNACKED = "active_unacked"
    ACTIVE_ACKED = "active_acked"
    CLEARED_UNACKED = "cleared_unacked"
    SHELVED = "shelved"


class Cause(StrEnum):
    RAISE = "raise"  # the condition began (after its on-delay)
    CLEAR = "clear"  # the condition ended (after its deadband and off-delay)
    ACK = "ack"  # an operator acknowledged it
    SHELVE = "shelve"
    UNSHELVE = "unshelve"  # by hand, or its shelving time is over


@dataclass(frozen=True, slots=True)
class AlarmState:
    """Where one alarm is, and what it last saw."""

    name: str
    state: State = State.NORMAL
    active: bool = False  # the condition holds (also while shelved)
    number: int = 0  # the number of its last transition
    value: Any = None  # the value of its last transition
    since_ms: int | None = None  # when it entered `state`
    raised_ms: int | None = None  # when the current occurrence was raised
    shelved_until_ms: int | None = None

    @property
    def acked(self) -> bool:
        return self.state in (State.NORMAL, State.ACTIVE_ACKED)

    def to_json(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["state"] = str(self.state)
        return data

    @staticmethod
    def from_json(data: dict[str, Any]) -> AlarmState:
        return AlarmState(**{**data, "state": State(data["state"])})


@dataclass(frozen=True, slots=True)
class Transition:
    """One change of state: what the event topic carries and the journal keeps."""

    alarm: str
    number: int
    from_state: State
    to_state: State
    cause: Cause
    value: Any
    ts_ms: int
    user: str | None = None

    def payload(self, severity: str, kind: str, point: str) -> bytes:
        """The event's JSON (docs/alarms.md)."""
        return json.dumps({
            "alarm": self.alarm, "transition": self.number, "from": str(self.from_state),
            "to": str(self.to_state), "cause": str(self.cause), "value": json_value(self.value),
            "ts": self.ts_ms, "severity": severity, "kind": kind, "point": point,
            "user": self.user}, separators=(",", ":")).encode()

    def to_json(self) -> dict[str, Any]:
        return {"alarm": self.alarm, "number": self.number, "from": str(self.from_state),
                "to": str(self.to_state), "cause": str(self.cause),
                "value": json_value(self.value), "ts_ms": self.ts_ms, "user": self.user}

    @staticmethod
    def from_json(data: dict[str, Any]) -> Transition:
        return Transition(data["alarm"], data["number"], State(data["from"]), State(data["to"]),
                          Cause(data["cause"]), data["value"], data["ts_ms"], data["user"])


@dataclass(frozen=True, slots=True)
class AlarmView:
    """What other ecosystems (Sparkplug) see of an alarm's state."""

    name: str
    active: bool
    acked: bool
    state: str
    ts_ms: int


def json_value(value: Any) -> Any:
    """JSON has no NaN or infinity: those become null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


# (state, cause) -> the next state, for the states the condition drives
_NEXT: dict[tuple[State, Cause], State] = {
    (State.NORMAL, Cause.RAISE): State.ACTIVE_UNACKED,
    (State.ACTIVE_UNACKED, Cause.ACK): State.ACTIVE_ACKED,
    (State.ACTIVE_UNACKED, Cause.CLEAR): State.CLEARED_UNACKED,
    (State.ACTIVE_ACKED, Cause.CLEAR): State.NORMAL,
    (State.CLEARED_UNACKED, Cause.ACK): State.NORMAL,
    (State.CLEARED_UNACKED, Cause.RAISE): State.ACTIVE_UNACKED,
}


def step(alarm: AlarmState, cause: Cause, ts_ms: int, value: Any = None,
         user: str | None = None, shelve_until_ms: int | None = None
         ) -> tuple[AlarmState, Transition | None]:
    """Apply one event; the new state and its transition (None: nothing changed, though the
    condition a shelved alarm follows may have)."""
    active = {Cause.RAISE: True, Cause.CLEAR: False}.get(cause, alarm.active)
    if cause is Cause.SHELVE:
        if shelve_until_ms is None:
            raise ValueError("shelve needs the time it ends (shelve_until_ms)")
        if alarm.state is State.SHELVED:  # shelved again: only the end moves
            return dataclasses.replace(alarm, shelved_until_ms=shelve_until_ms), None
        target = State.SHELVED
    elif cause is Cause.UNSHELVE:
        if alarm.state is not State.SHELVED:
            return alarm, None
        target = State.ACTIVE_UNACKED if alarm.active else State.NORMAL
    elif alarm.state is State.SHELVED:  # followed, not announced
        return dataclasses.replace(alarm, active=active), None
    else:
        found = _NEXT.get((alarm.state, cause))
        if found is None:
            return dataclasses.replace(alarm, active=active), None
        target = found
    transition = Transition(alarm.name, alarm.number + 1, alarm.state, target, cause, value,
                            ts_ms, user)
    raised = alarm.raised_ms
    if target is State.ACTIVE_UNACKED and alarm.state is not State.ACTIVE_UNACKED:
        raised = ts_ms  # a new occurrence
    elif target is State.NORMAL:
        raised = None
    return AlarmState(alarm.name, target, active, transition.number, value, ts_ms, raised,
                      shelve_until_ms if target is State.SHELVED else None), transition


def expire(alarm: AlarmState, now_ms: int) -> tuple[AlarmState, Transition | None]:
    """Unshelve an alarm whose shelving time is over."""
    until = alarm.shelved_until_ms
    if alarm.state is State.SHELVED and until is not None and now_ms >= until:
        return step(alarm, Cause.UNSHELVE, now_ms, alarm.value)
    return alarm, None
