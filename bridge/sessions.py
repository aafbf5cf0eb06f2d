"""Devices that hold a session with their peer: the reconnect loop and what an outage publishes.

How this works: a family whose device talks to one peer over a connection of its own (OPC UA,
S7, EtherNet/IP) subclasses `SessionDevice` and gives it three coroutines: `connect()` opens
a session (raising on failure, nothing left open), `serve(session)` reads and publishes until
the session is lost (it raises the reason), `disconnect(session)` closes it quietly. `run`
loops over sessions until cancelled:

- a failed connection attempt or an ended session makes the device `offline` at once and
  publishes every point once as null / bad (nothing stays "good" while it is stale);
- the next attempt comes after a backoff: `reconnect_initial` doubling up to `reconnect_max`
  while attempts fail, `reconnect_initial` again after a session that ran;
- a new session reads every point afresh (the family's `serve`), and calls `connected` once it
  serves: online again.

The journal gets one line per change, not one per attempt: a WARNING when the peer goes away
(with the reason), an INFO when a session is back (with how long it was away), an ERROR when
the peer refuses the device (`refused`: an untrusted certificate, say) and again only when the
reason changes; each failed attempt in between is a DEBUG line. An exception outside the
family's `expected` ones still ends the session like a lost connection (a peer torn down
halfway may make a library raise nearly anything), with its traceback at DEBUG level.

Counters: `timeouts` counts lost sessions and failed connection attempts.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Generic, Protocol, TypeVar

from bridge.driver import Counters, DeviceContext
from bridge.point import BAD
from bridge.report import Reporter

SessionT = TypeVar("SessionT")


def reason_of(exc: BaseException) -> str:
    """A short reason for a failure, with the exception's type when it says nothing."""
    return str(exc) or type(exc).__name__


class PointWithReporter(Protocol):
    """What a family keeps per point: at least the point's reporter."""

    @property
    def reporter(self) -> Reporter: ...


class SessionDevice(Generic[SessionT]):
    """The outage behaviour shared by the session families (see the module's comment)."""

    log: logging.Logger
    points: Mapping[str, PointWithReporter]  # the family's state of each point, by name
    # What ends a session or an attempt quietly (anything else: with its traceback at DEBUG)
    expected: tuple[type[BaseException], ...] = (OSError,)
    # What a session may end with without crashing the device's task
    caught: tuple[type[BaseException], ...] = (Exception,)

    def __init__(self, name: str, peer: str, context: DeviceContext,
                 reconnect_initial: float, reconnect_max: float) -> None:
        self.device_name = name
        self.peer = peer  # "host:port" or the endpoint, for the log lines
        self.context = context
        self.reconnect_initial = reconnect_initial
        self.reconnect_max = reconnect_max
        self.online: bool | None = None  # None: nothing published since start
        self.counters = Counters()
        self.last_error: str | None = None
        self.sessions = 0  # sessions served so far (1 after the first connect)
        self.offline_since: float | None = None  # loop time the peer went away
        self._refusal: str | None = None  # the refusal last logged as an error

    # -- what a family gives ----------------------------------------------------------------

    @property
    def name(self) -> str:
        return self.device_name

    def reporters(self) -> list[Reporter]:
        """The reporters of the device's points."""
        return [state.reporter for state in self.points.values()]

    def adopt(self, previous: object) -> None:
        """A restarted device starts afresh: its status is published at its first session."""

    def close(self) -> None:
        """Nothing to release: the run task closed its session when it was cancelled."""

    async def connect(self) -> SessionT:
        """A new session; raises on failure (nothing left open)."""
        raise NotImplementedError

    async def serve(self, session: SessionT) -> None:
        """Read and publish until the session is lost (raise its reason)."""
        raise NotImplementedError

    async def disconnect(self, session: SessionT) -> None:
        """Close a session; a dead peer does not make this wait long."""
        raise NotImplementedError

    def failure(self, exc: BaseException) -> tuple[str, bool]:
        """The reason a connection attempt failed, and whether the peer refused the device
        (logged as an error, once per reason) rather than being away."""
        return reason_of(exc), False

    # -- the loop ---------------------------------------------------------------------------

    async def run(self) -> None:
        """Open sessions one after the other until cancelled."""
        backoff = self.reconnect_initial
        while True:
            try:
                session = await self.connect()
            except self.caught as exc:
                self._unexpected(exc, "connection failed")
                reason, refused = self.failure(exc)
                self.lost(reason, refused)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, self.reconnect_max)
                continue
            reason = "connection lost"
            try:
                await self.serve(session)
            except self.caught as exc:
                self._unexpected(exc, "session failed")
                reason = self.failure(exc)[0]
            finally:
                await self.disconnect(session)
            self.lost(reason)
            backoff = self.reconnect_initial
            await asyncio.sleep(backoff)

    def _unexpected(self, exc: BaseException, what: str) -> None:
        if not isinstance(exc, self.expected):
            self.log.debug("%s: %s", self.device_name, what, exc_info=exc)

    # -- status -----------------------------------------------------------------------------

    def connected(self, detail: str) -> None:
        """A session serves: online, and one INFO line (`detail`: what it serves)."""
        self.sessions += 1
        self.last_error = self._refusal = None
        self.set_online(True)
        extra = {"device": self.device_name}
        if self.offline_since is None:
            self.log.info("%s: connected to %s (%s)", self.device_name, self.peer, detail,
                          extra=extra)
        else:
            away = asyncio.get_running_loop().time() - self.offline_since
            self.log.info("%s: %s back after %.1f s (session %d, %s)", self.device_name,
                          self.peer, away, self.sessions, detail, extra=extra)
            self.offline_since = None

    def lost(self, reason: str, refused: bool = False) -> None:
        """A session ended or could not be opened: offline, every point bad once."""
        self.counters.timeouts += 1
        self.last_error = reason
        extra = {"device": self.device_name}
        if refused and reason != self._refusal:
            self._refusal = reason
            self.log.error("%s: %s refused: %s", self.device_name, self.peer, reason,
                           extra=extra)
        elif self.online is not False and not refused:
            self.log.warning("%s: %s unreachable: %s", self.device_name, self.peer, reason,
                             extra=extra)
        else:
            self.log.debug("%s: still unreachable: %s", self.device_name, reason)
        if self.offline_since is None:
            self.offline_since = asyncio.get_running_loop().time()
        self.set_online(False)
        for reporter in self.reporters():
            self.publish_bad(reporter)

    def publish_bad(self, reporter: Reporter) -> None:
        """Publish a point once as null / bad (not again while it stays bad)."""
        if reporter.quality == BAD:
            return
        payload = reporter.offer(None, BAD, asyncio.get_running_loop().time(),
                                 int(self.context.wallclock() * 1000), force=True)
        if payload is not None:
            self.context.publish(reporter.topic, payload)

    def set_online(self, online: bool) -> None:
        """Say online / offline when it changes."""
        if self.online is not online:
            self.online = online
            self.context.status(self.device_name, online)
