"""Alarms at run time: a bridge observer that evaluates every alarm, publishes its state and
its transitions, and takes acknowledgements and shelving.

How this works: `AlarmService` sees every point value and device status the bridge publishes
(`BridgeObserver`), feeds each alarm's `Condition` (bridge/alarms/condition.py) and turns what
it says into events of the state machine (bridge/alarms/machine.py). One timer, set for the
earliest time any alarm must be looked at again (a delay running out, a value going stale, a
shelving ending), evaluates them without a new value. Each transition is, in this order:

1. written to the journal, fsynced (bridge/alarms/journal.py);
2. published through the service's own link: the alarm's state, retained, on
   `alarms/<name>/state` and the transition at QoS 1 on `alarms/<name>/event` (the uplink's
   built-in rule forwards events to the cloud through the outbox, with ids);
3. once the broker's hooks flushed (the outbox and the retained store committed), marked
   published in the journal.

A kill between 1 and 3 leaves the transition unpublished in the journal: at the next start it
is published again (the cloud deduplicates on (gateway, alarm, transition number)). States are
restored from the journal, so an alarm active when the gateway died is still active; its first
value after the restart clears it (with that value's time) if the value came back normal.

Commands: `alarms/<name>/ack` (payload empty or `{"user": ...}`) and `alarms/<name>/shelve`
(`{"seconds": N}`; 0 unshelves), or `acknowledge` / `shelve` from the console.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bridge.alarms.condition import Condition
from bridge.alarms.config import ALARMS_ROOT, AlarmDefinition, AlarmsConfig
from bridge.alarms.journal import MemoryJournal
from bridge.alarms.machine import (
    AlarmState,
    AlarmView,
    Cause,
    State,
    Transition,
    expire,
    json_value,
    step,
)
from gateway.broker.core.message import Message
from gateway.broker.engine.broker import Broker
from gateway.broker.engine.links import Link

log = logging.getLogger("outpost.alarms")
CLIENT_ID = "outpost-alarms"
MAX_SHELVE_S = 7 * 86_400


@dataclass
class _Alarm:
    definition: AlarmDefinition
    condition: Condition
    state: AlarmState
    next_check: float | None = None  # monotonic time to evaluate again without a value


def state_topic(name: str) -> str:
    return f"{ALARMS_ROOT}/{name}/state"


def event_topic(name: str) -> str:
    return f"{ALARMS_ROOT}/{name}/event"


class AlarmService:
    """Every configured alarm, attached to the broker (start after the store is restored)."""

    def __init__(self, config: AlarmsConfig, prefix: str, broker: Broker,
                 journal: MemoryJournal, wallclock: Callable[[], float] = time.time,
                 offline_grace: float = 30.0) -> None:
        self.broker = broker
        self.journal = journal
        self.wallclock = wallclock
        self.offline_grace = offline_grace
        self.link: Link | None = None
        self.alarms: dict[str, _Alarm] = {}
        self._by_point: dict[str, list[_Alarm]] = {}  # "<device>/<point>" or "<device>"
        self._timer: asyncio.TimerHandle | None = None
        self._flushes: set[asyncio.Task[None]] = set()
        self.transitions = 0
        # see every alarm's state when it is published (the Sparkplug edge node)
        self.state_observers: list[Callable[[AlarmView], None]] = []
        self._config = config
        self.prefix = prefix

    # -- life ------------------------------------------------------------------------------

    def start(self) -> None:
        """Restore the states, publish them, publish again what was not known published."""
        loop = asyncio.get_running_loop()
        self.link = Link(self.broker, CLIENT_ID, loop.time, self._on_message)
        states, unpublished = self.journal.load()
        self._build(self._config, states)
        gone = set(states) - set(self.alarms)
        if gone:
            self.journal.forget(gone)
        for alarm in self.alarms.values():
            self._publish_state(alarm)
        for transition in unpublished:
            owner = self.alarms.get(transition.alarm)
            if owner is not None:
                self._publish_event(owner, transition)
        if unpublished:
            log.info("alarms: %d transition(s) not known published were published again",
                     len(unpublished))
            self._confirm(unpublished)
        self.link.subscribe(f"{ALARMS_ROOT}/+/ack", qos=1)
        self.link.subscribe(f"{ALARMS_ROOT}/+/shelve", qos=1)
        self._evaluate_all()
        log.info("alarms: %d defined, %d active", len(self.alarms),
                 sum(a.state.active for a in self.alarms.values()))

    async def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        await asyncio.gather(*self._flushes, return_exceptions=True)
        if self.link is not None:
            self.link.close()
            self.link = None
        self.journal.close()

    def _build(self, config: AlarmsConfig, states: dict[str, AlarmState]) -> None:
        now = asyncio.get_running_loop().time()
        self._config = config
        self.alarms = {}
        self._by_point = {}
        for definition in config.rules:
            state = states.get(definition.name) or AlarmState(definition.name)
            condition = Condition(definition, now, state.active, self.offline_grace)
            alarm = _Alarm(definition, condition, state)
            self.alarms[definition.name] = alarm
            self._by_point.setdefault(definition.point, []).append(alarm)
            if definition.kind == "offline" and not definition.device_only:
                self._by_point.setdefault(definition.device, []).append(alarm)

    def reload(self, config: AlarmsConfig) -> None:
        """A changed `[alarms]`: an unchanged alarm keeps its condition and state, a changed
        one keeps its state (and transition numbers), a removed one is forgotten."""
        if config == self._config:
            return
        old = self.alarms
        self._build(config, {name: alarm.state for name, alarm in old.items()})
        for name, alarm in self.alarms.items():
            before = old.get(name)
            if before is not None and before.definition == alarm.definition:
                alarm.condition = before.condition
        gone = set(old) - set(self.alarms)
        for name in gone:
            if self.link is not None:  # its retained state goes too
                self.link.publish(state_topic(name), b"", 1, True)
        self.journal.forget(gone)
        for name, alarm in self.alarms.items():
            if name not in old:
                self._publish_state(alarm)
        self._evaluate_all()

    # -- what the bridge publishes -----------------------------------------------------------

    def point(self, topic: str, payload: bytes) -> None:
        """A point value on `<prefix>/<device>/<point>`."""
        head = self.prefix + "/"
        if not topic.startswith(head):
            return
        alarms = self._by_point.get(topic[len(head):])
        if not alarms:
            return
        try:
            value = json.loads(payload).get("value")
        except (ValueError, AttributeError):
            return
        now = asyncio.get_running_loop().time()
        for alarm in alarms:
            alarm.condition.value(value, now)
        self._evaluate(alarms, now)

    def device_status(self, device: str, online: bool) -> None:
        alarms = self._by_point.get(device)
        if not alarms:
            return
        now = asyncio.get_running_loop().time()
        for alarm in alarms:
            alarm.condition.status(online, now)
        self._evaluate(alarms, now)

    # -- operators -----------------------------------------------------------------------------

    def acknowledge(self, name: str, user: str | None = None) -> Transition | None:
        """Acknowledge an alarm (KeyError: no such alarm); None when there was nothing to."""
        alarm = self.alarms[name]
        return self._apply(alarm, Cause.ACK, alarm.condition.last_value, user)

    def shelve(self, name: str, seconds: float, user: str | None = None) -> Transition | None:
        """Shelve an alarm for `seconds` (0: unshelve it); KeyError: no such alarm, ValueError:
        a duration out of range."""
        alarm = self.alarms[name]
        if not 0 <= seconds <= MAX_SHELVE_S:
            raise ValueError(f"shelve for 0 to {MAX_SHELVE_S} s (got {seconds:g})")
        if seconds == 0:
            return self._apply(alarm, Cause.UNSHELVE, alarm.condition.last_value, user)
        until = int(self.wallclock() * 1000 + seconds * 1000)
        transition = self._apply(alarm, Cause.SHELVE, alarm.condition.last_value, user, until)
        self._evaluate_all()  # the timer for its end
        return transition

    def status(self) -> list[dict[str, Any]]:
        """Every alarm with its definition, state and last value (console, status page)."""
        rows = []
        for name, alarm in self.alarms.items():
            d, s = alarm.definition, alarm.state
            rows.append({"name": name, "point": d.point, "kind": d.kind, "limit": d.limit,
                         "severity": d.severity, "description": d.description,
                         "state": str(s.state), "active": s.active, "acked": s.acked,
                         "value": alarm.condition.last_value, "since_ms": s.since_ms,
                         "raised_ms": s.raised_ms, "shelved_until_ms": s.shelved_until_ms,
                         "transition": s.number})
        return rows

    def unacknowledged(self) -> int:
        return sum(not a.state.acked and a.state.state is not State.SHELVED
                   for a in self.alarms.values())

    # -- evaluation ------------------------------------------------------------------------

    def _evaluate_all(self) -> None:
        """Every alarm (the timer, a start, a reload): the timer is set again from scratch."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._evaluate(list(self.alarms.values()), asyncio.get_running_loop().time())

    def _evaluate(self, alarms: list[_Alarm], now: float) -> None:
        now_ms = int(self.wallclock() * 1000)
        for alarm in alarms:
            active, alarm.next_check = alarm.condition.evaluate(now)
            if active != alarm.state.active:
                self._apply(alarm, Cause.RAISE if active else Cause.CLEAR,
                            alarm.condition.last_value)
            state, transition = expire(alarm.state, now_ms)
            if transition is not None:
                self._commit(alarm, state, transition)
        self._arm(alarms, now, now_ms)

    def _arm(self, alarms: list[_Alarm], now: float, now_ms: int) -> None:
        """One timer, for the earliest time one of `alarms` must be looked at again. It is
        only ever brought forward here (a value costs the alarms of its point, not all of
        them); when it fires, `_evaluate_all` sets it again for every alarm."""
        due: list[float] = []
        for alarm in alarms:
            if alarm.next_check is not None:
                due.append(alarm.next_check)
            until = alarm.state.shelved_until_ms
            if alarm.state.state is State.SHELVED and until is not None:
                due.append(now + max(0.0, (until - now_ms) / 1000))
        if not due or self.link is None:
            return
        at = max(min(due), now + 0.01)
        if self._timer is not None:
            if self._timer.when() <= at:
                return
            self._timer.cancel()
        self._timer = asyncio.get_running_loop().call_at(at, self._evaluate_all)

    def _apply(self, alarm: _Alarm, cause: Cause, value: Any, user: str | None = None,
               until_ms: int | None = None) -> Transition | None:
        state, transition = step(alarm.state, cause, int(self.wallclock() * 1000), value,
                                 user, until_ms)
        if transition is None:
            if state != alarm.state:  # a shelved alarm's condition: kept, not announced
                alarm.state = state
                self.journal.record(state, None)
            return None
        self._commit(alarm, state, transition)
        return transition

    def _commit(self, alarm: _Alarm, state: AlarmState, transition: Transition) -> None:
        """Journal (fsynced), then publish, then mark published once the broker committed."""
        self.journal.record(state, transition)
        alarm.state = state
        self.transitions += 1
        log.info("alarm %s: %s -> %s (%s, value %r)", alarm.definition.name,
                 transition.from_state, transition.to_state, transition.cause, transition.value,
                 extra={"alarm": alarm.definition.name})
        self._publish_event(alarm, transition)
        self._publish_state(alarm)
        self._confirm([transition])

    def _publish_event(self, alarm: _Alarm, transition: Transition) -> None:
        if self.link is not None:
            d = alarm.definition
            self.link.publish(event_topic(d.name), transition.payload(d.severity, d.kind, d.point),
                              1, False)

    def _publish_state(self, alarm: _Alarm) -> None:
        if self.link is None:
            return
        d, s = alarm.definition, alarm.state
        payload = json.dumps({
            "alarm": d.name, "state": str(s.state), "active": s.active, "acked": s.acked,
            "shelved": s.state is State.SHELVED, "severity": d.severity, "kind": d.kind,
            "point": d.point, "value": json_value(s.value), "ts": s.since_ms,
            "raised_ts": s.raised_ms, "shelved_until": s.shelved_until_ms,
            "transition": s.number}, separators=(",", ":"))
        self.link.publish(state_topic(d.name), payload.encode(), 1, True)
        view = AlarmView(d.name, s.active, s.acked, str(s.state),
                         s.since_ms if s.since_ms is not None else int(self.wallclock() * 1000))
        for observer in self.state_observers:
            observer(view)

    def _confirm(self, transitions: list[Transition]) -> None:
        """Mark published once the broker's hooks committed what the publishes stored."""
        task = asyncio.get_running_loop().create_task(self._flushed(transitions))
        self._flushes.add(task)
        task.add_done_callback(self._flushes.discard)

    async def _flushed(self, transitions: list[Transition]) -> None:
        try:
            await self.broker.hooks.flush()
        except Exception as exc:  # (the store logged it) published again at the next start
            log.warning("alarms: store commit failed (%s): %d transition(s) stay unconfirmed",
                        exc, len(transitions))
            return
        self.journal.published(transitions)

    # -- commands over MQTT ------------------------------------------------------------------

    def _on_message(self, message: Message, qos: int, retain: bool) -> None:
        if retain:
            return  # a retained command is old news
        parts = message.topic.split("/")
        if len(parts) != 3:
            return
        name, command = parts[1], parts[2]
        if name not in self.alarms:
            log.warning("alarms: %s for unknown alarm %r ignored", command, name)
            return
        try:
            body = json.loads(message.payload) if message.payload.strip() else {}
        except (ValueError, UnicodeDecodeError):
            body = None
        if not isinstance(body, dict):
            log.warning("alarms: %s of %r ignored: payload is not a JSON object", command, name)
            return
        user = body.get("user")
        user = user if isinstance(user, str) else None
        if command == "ack":
            self.acknowledge(name, user)
        elif command == "shelve":
            seconds = body.get("seconds")
            if isinstance(seconds, bool) or not isinstance(seconds, int | float):
                log.warning('alarms: shelve of %r ignored: expected {"seconds": N}', name)
                return
            try:
                self.shelve(name, float(seconds), user)
            except ValueError as exc:
                log.warning("alarms: shelve of %r ignored: %s", name, exc)


