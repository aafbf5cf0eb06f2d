"""Whether an alarm's condition holds: limits with deadband, delays, rate, stale, offline,
fault (pure: the monotonic time `now` is passed in).

How this works: `Condition` is fed what the bridge publishes about the alarm's point
(`value(v, now)`) or device (`status(online, now)`), and `evaluate(now)` says whether the
condition is *active* after its delays, and when it should be looked at again (`next_check`)
even if nothing new arrives (an on/off delay running out, a value going stale, a rate window
moving on). The raw condition of a limit kind uses the debounced state for its hysteresis: a
high alarm becomes active above `limit` and ends only at or below `limit - deadband`. A value
that is not a number (null, a bad-quality read) leaves a value kind's raw condition as it was.

An offline alarm ignores `offline` until its device was seen `online` once, or `grace`
seconds passed: the bridge publishes every device `offline` at start, before its first poll.
"""

from __future__ import annotations

import math
from collections import deque

from bridge.alarms.config import AlarmDefinition


class Condition:
    """The debounced condition of one alarm."""

    def __init__(self, definition: AlarmDefinition, now: float, active: bool = False,
                 grace: float = 30.0) -> None:
        self.definition = definition
        self._grace_until: float | None = now + grace  # offline: None once seen online
        self._online: bool | None = None
        self.active = active  # debounced
        self.raw = active
        self._pending_since: float | None = None  # raw != active since then
        self.last_value: object = None
        self._last_change = now  # stale: when the value last changed (or we started)
        self._samples: deque[tuple[float, float]] = deque()  # rate: (now, value) in window

    def value(self, value: object, now: float) -> None:
        """A new value of the point."""
        definition = self.definition
        kind = definition.kind
        if value != self.last_value:
            self._last_change = now
        self.last_value = value
        number = _number(value)
        if kind == "fault":
            if isinstance(value, bool) or number is not None:
                self._set_raw(bool(value), now)
        elif kind == "rate":
            if number is not None:
                self._samples.append((now, number))
                self._rate_raw(now)
        elif kind not in ("stale", "offline") and number is not None:
            self._set_raw(self._beyond(number), now)

    def status(self, online: bool, now: float) -> None:
        """The device's status changed."""
        if self.definition.kind == "offline":
            self._online = online
            if online:
                self._grace_until = None
            if self._grace_until is None:
                self._set_raw(not online, now)

    def evaluate(self, now: float) -> tuple[bool, float | None]:
        """(active after delays, the monotonic time to evaluate again or None)."""
        kind = self.definition.kind
        if kind == "stale":
            assert self.definition.stale_after is not None
            stale_at = self._last_change + self.definition.stale_after
            self._set_raw(now >= stale_at, now)
        elif kind == "rate":
            self._rate_raw(now)
        elif kind == "offline" and self._grace_until is not None:
            if now < self._grace_until:
                return self.active, self._grace_until
            self._grace_until = None
            if self._online is False:
                self._set_raw(True, now)
        if self.raw != self.active:
            delay = self.definition.on_delay if self.raw else self.definition.off_delay
            since = self._pending_since if self._pending_since is not None else now
            if now >= since + delay:
                self.active = self.raw
                self._pending_since = None
            else:
                return self.active, since + delay
        nexts = []
        if kind == "stale" and not self.raw:
            nexts.append(self._last_change + (self.definition.stale_after or 0.0))
        if kind == "rate" and len(self._samples) > 1:
            nexts.append(self._samples[0][0] + self.definition.window)
        return self.active, min(nexts) if nexts else None

    def _set_raw(self, raw: bool, now: float) -> None:
        if raw == self.raw:
            return
        self.raw = raw
        self._pending_since = now if raw != self.active else None

    def _beyond(self, number: float) -> bool:
        """The raw condition of a limit kind, with the deadband on the way back."""
        definition = self.definition
        limit = definition.limit
        assert limit is not None
        if definition.kind in ("high", "high-high"):
            return number > limit - definition.deadband if self.active else number > limit
        return number < limit + definition.deadband if self.active else number < limit

    def _rate_raw(self, now: float) -> None:
        """|change| per second between the oldest and newest value of the window."""
        window = self.definition.window
        samples = self._samples
        while len(samples) > 1 and samples[0][0] < now - window:
            samples.popleft()
        if len(samples) < 2:
            self._set_raw(False, now)
            return
        (t0, v0), (t1, v1) = samples[0], samples[-1]
        limit = self.definition.limit
        assert limit is not None
        rate = abs(v1 - v0) / (t1 - t0) if t1 > t0 else 0.0
        self._set_raw(rate > limit, now)

    @property
    def pending(self) -> bool:
        return self._pending_since is not None


def _number(value: object) -> float | None:
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, int | float) and math.isfinite(value):
        return float(value)
    return None
