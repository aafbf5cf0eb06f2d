"""Authentication, authorisation and abuse limits: the `Security` hook and its pure helpers.

How this works: every listener has a `ListenerPolicy` — whether anonymous clients may connect,
its password file, its ACL, whether the TLS client certificate's CN is the username. The
`Security` hook holds one policy per listener label (`ClientInfo.listener`) and answers the
broker's two questions:

- `authenticate`: in-process links (`link`) and restored wills (`restored`) are trusted. A
  listener using certificate identities accepts the username the I/O layer took from the
  verified certificate. Otherwise a client without a username is anonymous (allowed only where
  the policy says so), and a username is only believed when a password file verified it: on a
  listener without a password file a username counts as anonymous.
- `check_acl`: the listener's ACL decides (no ACL file: all allowed). A username that was not
  verified is checked as anonymous. (Topics over the `[limits]` length and depth are refused
  by the broker before it asks: `Broker.topic_over_limits`.)

Slow hashes never run in the core: the I/O layer asks `hash_job` for the work a CONNECT needs,
runs it in a worker thread, and hands the verdict back with `remember`; `authenticate` then
finds it in the bounded `VerifiedCache` (keyed by an HMAC of the password under a per-process
key, so no plaintext is kept). Without a cached verdict (core tests) it hashes inline.

`LoginThrottle` (failed logins per source address, exponential delay) and `ConnectionLimiter`
(per-source connection rate and count, connections still before CONNECT) are pure bookkeeping:
the caller passes `now`, the I/O layer owns the timers. `reload` swaps every policy at once.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from gateway.broker.codec.reason_codes import ReasonCode
from gateway.broker.contracts.acl import AccessList, Right
from gateway.broker.contracts.config import BrokerConfig
from gateway.broker.contracts.hooks import INTERNAL_LISTENERS, Access, BrokerHooks, HookChain
from gateway.broker.contracts.passwords import PasswordEntry, verify
from gateway.broker.core.session import ClientInfo

__all__ = [
    "INTERNAL_LISTENERS",
    "ConnectionLimiter",
    "ListenerPolicy",
    "LoginThrottle",
    "PasswordDB",
    "Security",
    "source_of",
]

log = logging.getLogger("outpost.auth")

_RIGHTS = {Access.READ: Right.READ, Access.WRITE: Right.WRITE, Access.SUBSCRIBE: Right.SUBSCRIBE}


def source_of(peer: str) -> str:
    """The source address of a `ClientInfo.peer` (`host:port`, `[v6]:port`; else as is)."""
    host, sep, port = peer.rpartition(":")
    if not sep or not port.isdigit():
        return peer or "unix"
    return host.strip("[]")


class VerifiedCache:
    """Recent password verdicts, keyed by username, stored hash and an HMAC of the password."""

    def __init__(self, size: int = 1024) -> None:
        self.size = size
        self._key = os.urandom(32)
        self._good: OrderedDict[tuple[str, str, bytes], bool] = OrderedDict()
        self._bad: OrderedDict[tuple[str, str, bytes], bool] = OrderedDict()

    def _id(self, entry: PasswordEntry, password: bytes) -> tuple[str, str, bytes]:
        tag = hmac.new(self._key, password, hashlib.sha256).digest()
        return (entry.username, entry.text, tag)

    def get(self, entry: PasswordEntry, password: bytes) -> bool | None:
        key = self._id(entry, password)
        if key in self._good:
            self._good.move_to_end(key)
            return True
        return False if key in self._bad else None

    def put(self, entry: PasswordEntry, password: bytes, ok: bool) -> None:
        # Failures live in their own small table so a flood of wrong guesses cannot evict
        # the verdicts of clients that reconnect with the right password.
        table, limit = (self._good, self.size) if ok else (self._bad, max(16, self.size // 4))
        table[self._id(entry, password)] = ok
        while len(table) > limit:
            table.popitem(last=False)


class PasswordDB:
    """The users of one password file and the cache of recent verdicts."""

    def __init__(self, entries: dict[str, PasswordEntry], source: str = "") -> None:
        self.entries = entries
        self.source = source
        self.cache = VerifiedCache()
        # Unknown users cost the same hash as known ones (no user enumeration by timing).
        self._dummy = next(iter(entries.values()), None)

    def __len__(self) -> int:
        return len(self.entries)

    def _lookup(self, username: str, password: bytes) -> tuple[PasswordEntry | None, bytes, bool]:
        """(entry to hash against, password as cached, whether the user exists)."""
        entry = self.entries.get(username)
        if entry is not None:
            return entry, password, True
        return self._dummy, b"\x00" + username.encode() + b"\x00" + password, False

    def verdict(self, username: str, password: bytes) -> bool | None:
        """The cached verdict, or None when the slow hash still has to run."""
        entry, key, known = self._lookup(username, password)
        if entry is None:
            return False
        cached = self.cache.get(entry, key)
        return cached if known or cached is None else False

    def job(self, username: str, password: bytes) -> Callable[[], bool]:
        """The slow check, safe to run in a worker thread."""
        entry, _, known = self._lookup(username, password)
        if entry is None:
            return lambda: False
        target = entry

        def run() -> bool:
            ok = verify(target, password)
            return ok and known

        return run

    def remember(self, username: str, password: bytes, ok: bool) -> None:
        entry, key, known = self._lookup(username, password)
        if entry is not None:
            self.cache.put(entry, key, ok and known)

    def check(self, username: str, password: bytes) -> bool:
        """Verdict from the cache, else hash inline (only outside the I/O path)."""
        cached = self.verdict(username, password)
        if cached is not None:
            return cached
        ok = self.job(username, password)()
        self.remember(username, password, ok)
        return ok


@dataclass(frozen=True, slots=True)
class ListenerPolicy:
    """How one listener authenticates and authorises."""

    label: str
    anonymous_allowed: bool
    passwords: PasswordDB | None = None
    acl: AccessList | None = None
    identity_username: bool = False  # TLS: the certificate's CN is the username

    def verified_username(self, client: ClientInfo) -> str | None:
        """The username ACLs may trust (None: treat the client as anonymous)."""
        if self.identity_username or self.passwords is not None:
            return client.username
        return None


class Security(BrokerHooks):
    """Authentication and ACL checks per listener (see the module comment)."""

    def __init__(
        self,
        policies: Iterable[ListenerPolicy],
        loader: Callable[[BrokerConfig], list[ListenerPolicy]] | None = None,
    ) -> None:
        self.policies: dict[str, ListenerPolicy] = {p.label: p for p in policies}
        # reads the files again (gateway.broker.net.security_files.SecurityFiles)
        self.loader = loader

    def replace(self, policies: Iterable[ListenerPolicy]) -> None:
        """Swap every policy at once; connected clients are judged by the new ones."""
        self.policies = {p.label: p for p in policies}

    def reload(self, config: BrokerConfig) -> None:
        """Re-read password files, ACL files and certificates (SIGHUP).

        All or nothing: if a file is unreadable or invalid the `ConfigError` propagates and
        the running policies stay.
        """
        if self.loader is not None:
            self.replace(self.loader(config))

    @property
    def restricts_reading(self) -> bool:
        """True when some listener has an ACL (the broker must check READ at delivery)."""
        return any(p.acl is not None for p in self.policies.values())

    # -- authentication ----------------------------------------------------------------

    def authenticate(self, client: ClientInfo, password: bytes | None) -> int:
        if client.listener in INTERNAL_LISTENERS:
            return ReasonCode.SUCCESS
        policy = self.policies.get(client.listener)
        if policy is None:
            return super().authenticate(client, password)
        if policy.identity_username:
            return ReasonCode.SUCCESS if client.username is not None else (
                ReasonCode.NOT_AUTHORIZED
            )
        if client.username is None or policy.passwords is None:
            # Nobody can verify a username here: the client is anonymous.
            if policy.anonymous_allowed:
                return ReasonCode.SUCCESS
            return ReasonCode.NOT_AUTHORIZED if client.username is None else (
                ReasonCode.BAD_USER_NAME_OR_PASSWORD
            )
        if password is None or not policy.passwords.check(client.username, password):
            return ReasonCode.BAD_USER_NAME_OR_PASSWORD
        return ReasonCode.SUCCESS

    def hash_job(self, listener: str, username: str | None,
                 password: bytes | None) -> Callable[[], bool] | None:
        """The slow password check this CONNECT needs, or None (cached / nothing to check)."""
        policy = self.policies.get(listener)
        if (policy is None or policy.passwords is None or policy.identity_username
                or username is None or password is None):
            return None
        if policy.passwords.verdict(username, password) is not None:
            return None
        return policy.passwords.job(username, password)

    def remember(self, listener: str, username: str, password: bytes, ok: bool) -> None:
        """Store the verdict of a `hash_job` for the `authenticate` call that follows."""
        policy = self.policies.get(listener)
        if policy is not None and policy.passwords is not None:
            policy.passwords.remember(username, password, ok)

    # -- authorisation -----------------------------------------------------------------

    def check_acl(self, client: ClientInfo, topic: str, access: Access) -> bool:
        if client.listener in INTERNAL_LISTENERS:
            return True
        policy = self.policies.get(client.listener)
        if policy is None or policy.acl is None:
            return True
        return policy.acl.allows(
            policy.verified_username(client), client.client_id, topic, _RIGHTS[access]
        )


class LoginThrottle:
    """Failed logins per source address and the delay the next CONNECT from there waits.

    The delay doubles with each failure (`base`, 2*base, 4*base, ... up to `max_delay`) and
    applies to every CONNECT from the source, whatever its outcome, so an attacker cannot
    learn a verdict earlier by timing. A source is forgotten `forget` seconds after its last
    failure. At most `max_sources` are tracked (the oldest are dropped first).
    """

    def __init__(self, base: float, max_delay: float, forget: float,
                 max_sources: int = 4096) -> None:
        self.base = base
        self.max_delay = max_delay
        self.forget = forget
        self.max_sources = max_sources
        self._failures: OrderedDict[str, tuple[int, float]] = OrderedDict()

    def failures(self, source: str, now: float) -> int:
        record = self._failures.get(source)
        if record is None:
            return 0
        if now - record[1] > self.forget:
            del self._failures[source]
            return 0
        return record[0]

    def delay(self, source: str, now: float) -> float:
        """How long a CONNECT from `source` arriving now waits before it is answered."""
        count = self.failures(source, now)
        if count == 0 or self.base <= 0:
            return 0.0
        return float(min(self.base * 2 ** min(count - 1, 32), self.max_delay))

    def failed(self, source: str, now: float) -> int:
        """Count a failed login; returns the source's failures so far."""
        count = self.failures(source, now) + 1
        self._failures[source] = (count, now)
        self._failures.move_to_end(source)
        while len(self._failures) > self.max_sources:
            self._failures.popitem(last=False)
        return count


class ConnectionLimiter:
    """Per-source connection rate (token bucket) and count, and connections before CONNECT.

    `admit` returns None (accepted, counted) or the name of the limit that refused:
    `"pending"` (too many connections that have not completed CONNECT, all sources),
    `"source"` (too many open connections from this address) or `"rate"` (new connections
    from this address arrive faster than `rate` per second, beyond a burst of `burst`).
    Sources in `exempt` are only subject to `"pending"`.
    """

    def __init__(self, rate: float, burst: int, per_source: int, max_pending: int,
                 exempt: Iterable[str] = (), max_sources: int = 4096) -> None:
        self.rate = rate
        self.burst = float(burst)
        self.per_source = per_source
        self.max_pending = max_pending
        self.exempt = frozenset(exempt)
        self.max_sources = max_sources
        self.open: dict[str, int] = {}
        self.pending = 0
        self._buckets: dict[str, tuple[float, float]] = {}  # source -> (tokens, at)

    def admit(self, source: str, now: float,
              make_room: Callable[[], bool] | None = None) -> str | None:
        """Count a new connection from `source`, or name the limit that refuses it.

        When every pending slot is taken, `make_room` (if given) may free one (by dropping
        another connection before CONNECT, which calls `connected`) and returns whether it
        did: a newcomer that passes its own address's limits is then not refused.
        """
        if source not in self.exempt:
            if self.open.get(source, 0) >= self.per_source:
                return "source"
            if self.rate > 0 and not self._take_token(source, now):
                return "rate"
        if self.pending >= self.max_pending and (make_room is None or not make_room()):
            return "pending"
        self.open[source] = self.open.get(source, 0) + 1
        self.pending += 1
        return None

    def _take_token(self, source: str, now: float) -> bool:
        tokens, at = self._buckets.get(source, (self.burst, now))
        tokens = min(self.burst, tokens + (now - at) * self.rate)
        if tokens < 1.0:
            self._buckets[source] = (tokens, now)
            return False
        self._buckets[source] = (tokens - 1.0, now)
        if len(self._buckets) > self.max_sources:
            self._prune(now)
        return True

    def _prune(self, now: float) -> None:
        full = [s for s, (tokens, at) in self._buckets.items()
                if tokens + (now - at) * self.rate >= self.burst and s not in self.open]
        for source in full:
            del self._buckets[source]
        while len(self._buckets) > self.max_sources:  # all busy: drop the oldest
            del self._buckets[next(iter(self._buckets))]

    def connected(self) -> None:
        """A counted connection completed (or gave up) its CONNECT."""
        self.pending = max(0, self.pending - 1)

    def release(self, source: str) -> None:
        """A counted connection closed."""
        count = self.open.get(source, 0) - 1
        if count > 0:
            self.open[source] = count
        else:
            self.open.pop(source, None)


def needs_read_check(hooks: BrokerHooks) -> bool:
    """Must the broker check READ access per delivery? (False saves work on the hot path.)"""
    members = hooks.hooks if isinstance(hooks, HookChain) else [hooks]
    for hook in members:
        if isinstance(hook, HookChain):
            if needs_read_check(hook):
                return True
        elif isinstance(hook, Security):
            if hook.restricts_reading:
                return True
        elif type(hook).check_acl is not BrokerHooks.check_acl:
            return True
    return False
