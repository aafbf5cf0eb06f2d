"""Admission: who may connect, and when a CONNECT goes on to the broker.

How this works: one `Admission` per `Server` (the I/O half of access control):

- at accept: `ConnectionLimiter` (gateway/broker/contracts/auth.py) refuses a socket from an
  address that opens connections too fast or holds too many, and Admission refuses one from an
  address that already holds `max_pending_per_source` connections before CONNECT; a refused
  socket is closed at once (nothing was read), counted and logged.
- the pending table: every admitted socket gets a `PendingConnection` until its CONNECT leaves
  admission (or it closes). When the table is full (`max_pending_connections`) a newcomer is
  not refused: the oldest pending connection of the address holding the most is closed to make
  room. So a few addresses that open sockets and send half a CONNECT cannot shut out a client
  from anywhere else; they only push out each other. Bytes buffered before the CONNECT is
  complete are capped (`max_pending_bytes`, checked by the connection).
- at CONNECT: the login throttle's delay for the source address (exponential in its recent
  failed logins) and the password hash (PBKDF2, run in a one-thread executor: hashlib releases
  the GIL) happen while the CONNECT is parked — reading paused, the loop free; then the verdict
  is recorded (failures counted per source) and the CONNECT goes to the broker, whose
  `Security.authenticate` finds the verdict cached. A client certificate's CN replaces the
  username here on `use_identity_as_username` listeners.

`ClientConnection` is the connection protocol as admission and the listeners' wrappers see
it (gateway/broker/net/listeners.py binds the sockets).
"""

from __future__ import annotations

import abc
import asyncio
import logging
import math
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Protocol

from gateway.broker.codec.packets import Connect
from gateway.broker.codec.reason_codes import ReasonCode
from gateway.broker.contracts.auth import (
    ConnectionLimiter,
    LoginThrottle,
    Security,
    source_of,
)
from gateway.broker.contracts.config import ListenerConfig
from gateway.broker.core.log_sampling import clip, worth_logging
from gateway.broker.core.session import ClientIdentity, Connection
from gateway.broker.engine.broker import Broker

log = logging.getLogger("outpost.listeners")

UNIX_SOURCE = "unix"
_LOG_EVERY = 100  # refusals of one kind: the first ten logged, then every hundredth
# Password checks (PBKDF2 in one worker thread) waiting at once, in total and per address: a
# flood of guesses cannot queue minutes of hashing in front of everyone else's login. Clients
# whose verdict is cached (reconnects) need no check at all.
MAX_HASHING = 16
MAX_HASHING_PER_SOURCE = 4


class ClientConnection(asyncio.Protocol, abc.ABC):
    """The protocol every listener ends in, as admission and the TLS and WebSocket wrappers
    use it. `MQTTConnection` (gateway/broker/net/server.py) implements it, so neither this
    module nor the listeners import the server."""

    # Slotted (no per-instance __dict__): there is one per client.
    __slots__ = (
        "closing", "conn", "label", "listener", "pending", "source", "transport",
    )

    listener: ListenerConfig
    label: str  # ClientInfo.listener
    source: str | None  # counted by Admission (None: not counted), released when it closes
    pending: PendingConnection | None  # its admission entry until its CONNECT is judged
    closing: bool
    transport: asyncio.Transport | None
    conn: Connection
    buffer: bytearray | None  # read but not yet decoded (capped before CONNECT)

    @abc.abstractmethod
    def adopt(self, admitted: PendingConnection) -> None:
        """Admission counted this connection (`admitted.source`)."""

    @abc.abstractmethod
    def discard(self) -> None:
        """Refused before it started: nothing to release, no broker connection."""

    @abc.abstractmethod
    def close(self) -> None:
        """Close after what was written."""

    @abc.abstractmethod
    def resume_connect(self, packet: Connect) -> None:
        """Admission is done with the parked CONNECT: hand it to the broker, read again."""


class AdmissionHost(Protocol):
    """What admission needs of the `Server` (gateway/broker/net/server.py)."""

    broker: Broker
    loop: asyncio.AbstractEventLoop


def peer_common_name(transport: asyncio.BaseTransport | None) -> str | None:
    """The CN of the verified client certificate, if any."""
    if transport is None:
        return None
    ssl_object = transport.get_extra_info("ssl_object")
    if ssl_object is None:
        return None
    cert = ssl_object.getpeercert()
    if not cert:
        return None
    for rdn in cert.get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                return str(value)
    return None


def peer_source(peer: object) -> str:
    """Source address of a `peername` (unix sockets: "unix")."""
    if isinstance(peer, tuple) and peer:
        # interned: every connection from one address shares the string (kept per client)
        return sys.intern(str(peer[0]))
    return UNIX_SOURCE


@dataclass(eq=False, slots=True)
class PendingConnection:
    """An admitted socket whose CONNECT has not left admission yet."""

    source: str
    abort: Callable[[], None]  # closes the socket at once (its connection_lost releases it)


class Admission:
    """Per-source accept limits, the pending table, the login throttle and password hashing."""

    def __init__(self, server: AdmissionHost, security: Security | None) -> None:
        limits = server.broker.limits
        self.server = server
        self.security = security
        self.limiter = ConnectionLimiter(
            limits.connection_rate, limits.connection_burst, limits.max_connections_per_source,
            limits.max_pending_connections, [*limits.exempt_sources, UNIX_SOURCE],
        )
        self.throttle = LoginThrottle(limits.login_delay, limits.login_max_delay,
                                      limits.login_forget)
        self.tasks: set[asyncio.Task[None]] = set()
        self.hashing: dict[str, int] = {}  # password checks waiting or running, per address
        self._executor: ThreadPoolExecutor | None = None
        self._refused: dict[str, int] = {}
        self.max_pending_per_source = limits.max_pending_per_source
        # per source, in arrival order (dicts keep it): the connections before CONNECT
        self.pending: dict[str, dict[PendingConnection, None]] = {}

    # -- accept ------------------------------------------------------------------------

    def accept(self, source: str, abort: Callable[[], None]) -> PendingConnection | None:
        """Count a new socket from `source`, or refuse it (None: the caller closes it)."""
        waiting = self.pending.get(source)
        if (waiting is not None and len(waiting) >= self.max_pending_per_source
                and source not in self.limiter.exempt):
            reason: str | None = "pending_source"
        else:
            reason = self.limiter.admit(source, self.server.loop.time(), self._make_room)
        if reason is None:
            entry = PendingConnection(source, abort)
            self.pending.setdefault(source, {})[entry] = None
            return entry
        broker = self.server.broker
        if reason == "pending_source":
            broker.count_refused_pending()
            text = "has too many connections before CONNECT (limits.max_pending_per_source)"
        elif reason == "rate":
            broker.count_refused_rate()
            text = "connects too fast (limits.connection_rate)"
        elif reason == "source":
            broker.count_refused_source()
            text = "has too many connections (limits.max_connections_per_source)"
        else:
            broker.count_refused_pending()
            text = ("too many connections before CONNECT from all sources "
                    "(limits.max_pending_connections)")
        count = self._refused[reason] = self._refused.get(reason, 0) + 1
        if worth_logging(count, _LOG_EVERY):
            log.warning("refused a connection from %s: %s (%d refused so far)",
                        source, text, count)
        return None

    def _make_room(self) -> bool:
        """The pending table is full: close the oldest connection of the busiest address."""
        if not self.pending:
            return False
        busiest = max(self.pending, key=lambda source: len(self.pending[source]))
        victim = next(iter(self.pending[busiest]))
        self.settled(victim)
        victim.abort()
        count = self.server.broker.count_evicted_pending()
        if worth_logging(count, _LOG_EVERY):
            log.warning("closed a connection from %s before its CONNECT to make room for a new "
                        "one (limits.max_pending_connections; %d closed so far)", busiest, count)
        return True

    def settled(self, entry: PendingConnection) -> None:
        """The connection's CONNECT left admission (or it closed): it is no longer pending."""
        waiting = self.pending.get(entry.source)
        if waiting is None or entry not in waiting:
            return
        del waiting[entry]
        if not waiting:
            del self.pending[entry.source]
        self.limiter.connected()

    def overflowed(self, protocol: ClientConnection) -> None:
        """More than `max_pending_bytes` arrived before a complete CONNECT: close the socket."""
        self.server.broker.count_refused_pending()
        count = self._refused["bytes"] = self._refused.get("bytes", 0) + 1
        if worth_logging(count, _LOG_EVERY):
            log.warning("closed a connection from %s: %d bytes before a complete CONNECT "
                        "(limits.max_pending_bytes; %d closed so far)", protocol.source,
                        len(protocol.buffer or b""), count)
        if protocol.buffer is not None:
            protocol.buffer.clear()
        protocol.closing = True
        if protocol.transport is not None:
            protocol.transport.abort()

    def release(self, source: str, entry: PendingConnection | None) -> None:
        """A socket counted for `source` closed (`entry`: its CONNECT was not judged yet)."""
        if entry is not None:
            self.settled(entry)
        self.limiter.release(source)

    # -- CONNECT -----------------------------------------------------------------------

    def on_connect(self, protocol: ClientConnection, packet: Connect) -> Connect | None:
        """The CONNECT to hand to the broker now, or None when it was parked."""
        loop = self.server.loop
        now = loop.time()
        if protocol.listener.use_identity_as_username:
            packet = replace(packet, username=peer_common_name(protocol.transport),
                             password=None)
        source = protocol.source or source_of(protocol.conn.peer)
        delay = self.throttle.delay(source, now)
        security = self.security
        job = None
        if security is not None:
            job = security.hash_job(protocol.label, packet.username, packet.password)
        if delay <= 0 and job is None:
            self._judge(protocol, packet, source, now)
            return packet
        if delay > 0:
            self.server.broker.count_auth_delayed()
            log.info("CONNECT from %s waits %.1f s (%d recent failed login(s) from there)",
                     source, delay, self.throttle.failures(source, now))
        protocol.conn.opened_at = math.inf  # the CONNECT came in time: the wait is ours
        task = loop.create_task(self._admit_later(protocol, packet, source, now + delay))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return None

    async def _admit_later(self, protocol: ClientConnection, packet: Connect, source: str,
                           due: float) -> None:
        """Wait out the throttle delay, then hash the password in the worker thread."""
        loop = self.server.loop
        wait = due - loop.time()
        if wait > 0:
            await asyncio.sleep(wait)
        security = self.security
        job = None
        if security is not None and not protocol.closing:
            # asked again now: the verdict may be cached by now, or the files reloaded
            job = security.hash_job(protocol.label, packet.username, packet.password)
        if job is not None:
            assert security is not None and packet.username is not None
            if not self._may_hash(source):
                protocol.close()
                return
            self.hashing[source] = self.hashing.get(source, 0) + 1
            try:
                if self._executor is None:
                    self._executor = ThreadPoolExecutor(1, thread_name_prefix="outpost-passwd")
                ok = await loop.run_in_executor(self._executor, job)
            finally:
                count = self.hashing.pop(source) - 1
                if count:
                    self.hashing[source] = count
            security.remember(protocol.label, packet.username, packet.password or b"", ok)
        if protocol.closing:
            return  # gone meanwhile (its connection_lost released it)
        now = loop.time()
        protocol.conn.opened_at = now
        self._judge(protocol, packet, source, now)
        protocol.resume_connect(packet)

    def _may_hash(self, source: str) -> bool:
        """Bound the password checks waiting for the worker, in total and per address."""
        waiting = sum(self.hashing.values())
        if waiting < MAX_HASHING and self.hashing.get(source, 0) < MAX_HASHING_PER_SOURCE:
            return True
        self.server.broker.count_refused_pending()
        count = self._refused["hashing"] = self._refused.get("hashing", 0) + 1
        if worth_logging(count, _LOG_EVERY):
            log.warning("closed a CONNECT from %s: %d password checks are already waiting "
                        "(%d from there); %d closed so far", source, waiting,
                        self.hashing.get(source, 0), count)
        return False

    def _judge(self, protocol: ClientConnection, packet: Connect, source: str, now: float) -> None:
        """The CONNECT leaves admission: record a failed login against its source."""
        if protocol.pending is not None:
            self.settled(protocol.pending)
            protocol.pending = None
        security = self.security
        if security is None:
            return
        conn = protocol.conn
        info = ClientIdentity(packet.client_id, packet.username, protocol.label, conn.peer,
                              conn.anonymous_allowed)
        if security.authenticate(info, packet.password) == ReasonCode.SUCCESS:
            return
        failures = self.throttle.failed(source, now)
        self.server.broker.count_auth_failed()
        if worth_logging(failures, _LOG_EVERY):
            log.warning(
                "failed login from %s on %s (user %s, client %s): %d failure(s) from there; "
                "its next CONNECT waits %.1f s", source, protocol.label, clip(packet.username),
                clip(packet.client_id), failures, self.throttle.delay(source, now),
            )

    def close(self) -> None:
        for task in list(self.tasks):
            task.cancel()
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)


# -- TLS and WebSocket protocols -------------------------------------------------------------
