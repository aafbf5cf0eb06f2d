"""The login throttle: how long a login attempt waits, per source address and per user name.

How this works: every key (an address, a user name) has a count of failures and the earliest
time its next attempt may be checked. An attempt is counted as a failure *when it arrives*,
before its password is hashed, and reserves its turn: it waits until every one of its keys is
free, and the key's next turn is then `base * 2**(failures - 1)` (at most `maximum`) after
this one. So attempts sent at once queue behind each other instead of all waiting the same
delay in parallel: one guess per `maximum` seconds per address and per user, however many
are in flight. An attempt that would have to wait longer than `maximum` is refused at once
(`None`), before any hash: the queue, and the worker threads it would occupy, stay bounded.

A right password takes back its own count (`succeeded`): a user who types it right is not
slowed by their own login, but an address or a user name with recent failures still is, so
a verdict is never learnt sooner by timing. A key is forgotten `forget` seconds after its
last attempt; at most `max_keys` are kept (the oldest go first).

Pure bookkeeping: the caller passes the clock's `now` and does the waiting.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(slots=True)
class _Key:
    failures: int
    next_at: float  # when the key's next attempt may be checked
    last: float  # the key's latest attempt


class LoginGate:
    """Failures and turns per key (see the module's docstring)."""

    def __init__(self, base: float, maximum: float, forget: float,
                 max_keys: int = 4096) -> None:
        self.base = base
        self.maximum = maximum
        self.forget = forget
        self.max_keys = max_keys
        self._keys: OrderedDict[str, _Key] = OrderedDict()

    def _get(self, key: str, now: float) -> _Key | None:
        record = self._keys.get(key)
        if record is not None and now - record.last > self.forget:
            del self._keys[key]
            return None
        return record

    def gap(self, failures: int) -> float:
        """The time between two attempts of a key with `failures`."""
        if failures <= 0:
            return 0.0
        return float(min(self.base * 2 ** min(failures - 1, 32), self.maximum))

    def failures(self, key: str, now: float) -> int:
        record = self._get(key, now)
        return 0 if record is None else record.failures

    def admit(self, keys: Iterable[str], now: float) -> float | None:
        """Count an arriving attempt against `keys` and reserve its turn: the seconds it waits
        before its check, or None (refused, nothing counted) when that would exceed
        `maximum`."""
        keys = list(keys)
        records = [self._get(key, now) for key in keys]
        start = max([now, *(r.next_at for r in records if r is not None)])
        if start - now > self.maximum:
            return None
        for key, record in zip(keys, records, strict=True):
            failures = (0 if record is None else record.failures) + 1
            self._keys[key] = _Key(failures, start + self.gap(failures), now)
            self._keys.move_to_end(key)
        while len(self._keys) > self.max_keys:
            self._keys.popitem(last=False)
        return start - now

    def succeeded(self, keys: Iterable[str], now: float) -> None:
        """The attempt admitted for `keys` had the right password: take its count back."""
        for key in keys:
            record = self._get(key, now)
            if record is None:
                continue
            record.failures -= 1
            if record.failures <= 0:
                del self._keys[key]
            else:  # the next turn as if this attempt had not been counted
                record.next_at = min(record.next_at, now + self.gap(record.failures))
