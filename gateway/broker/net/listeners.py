"""Listeners (TCP, TLS, WebSocket, secure WebSocket, unix socket) and admission control.

How this works: `start_listener` binds one configured listener. Every kind ends in the same
`MQTTConnection` (gateway/broker/net/server.py), whose data path is untouched:

- tcp / unix: the socket's protocol *is* the `MQTTConnection`.
- tls: a `TLSAcceptor` owns the raw socket first, applies the per-source limits *before* the
  (CPU-costly) handshake, runs `loop.start_tls`, then hands the TLS transport to the
  `MQTTConnection`.
- ws: a `WebSocketConnection` feeds socket bytes to `MQTTWebSocket`
  (gateway/broker/net/websocket.py: wsproto, sans-I/O) and does what it returns: MQTT bytes go
  to an `MQTTConnection` whose transport is `_WSTransport`, a thin adapter that wraps every
  write in one binary frame.
- wss: `TLSAcceptor` then `WebSocketConnection`.

`Admission` is the I/O half of access control, one per `Server`:

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

Password files, ACL files and certificates are read in gateway/broker/net/security_files.py.
"""

from __future__ import annotations

import abc
import asyncio
import logging
import math
import os
import socket
import ssl
import stat
from asyncio import sslproto
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol, cast

from gateway.base.hostport import is_loopback
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
from gateway.broker.core.session import ClientInfo, Connection
from gateway.broker.engine.broker import Broker
from gateway.broker.net import websocket
from gateway.broker.net.security_files import SecurityFiles, load_certificates

log = logging.getLogger("outpost.listeners")

UNIX_SOURCE = "unix"
_LOG_EVERY = 100  # refusals of one kind: the first ten logged, then every hundredth
# Password checks (PBKDF2 in one worker thread) waiting at once, in total and per address: a
# flood of guesses cannot queue minutes of hashing in front of everyone else's login. Clients
# whose verdict is cached (reconnects) need no check at all.
MAX_HASHING = 16
MAX_HASHING_PER_SOURCE = 4
# Sockets the kernel may hold completed but not yet accepted (capped by net.core.somaxconn):
# under a connection flood a full accept queue drops SYNs, and a legitimate client then waits
# for its SYN to be sent again (1 s, then 3 s) before admission even sees it.
ACCEPT_BACKLOG = 4096


# -- what the listeners need of the server ---------------------------------------------------


class ClientConnection(asyncio.Protocol, abc.ABC):
    """The protocol every listener ends in, as admission and the TLS and WebSocket wrappers
    use it. `MQTTConnection` (gateway/broker/net/server.py, which imports this module)
    implements it, so this module never imports the server."""

    # Slotted (no per-instance __dict__): there is one per client.
    __slots__ = (
        "admitted", "closing", "conn", "label", "listener", "pending", "source", "transport",
    )

    listener: ListenerConfig
    label: str  # ClientInfo.listener
    source: str | None  # counted by Admission (None: not counted)
    admitted: PendingConnection | None  # its admission entry, released when it closes
    pending: PendingConnection | None  # the same until its CONNECT is judged
    closing: bool
    transport: asyncio.Transport | None
    conn: Connection
    buffer: bytearray  # read but not yet decoded (capped before CONNECT)

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


class ListenerHost(Protocol):
    """What listeners and admission need of the `Server` (gateway/broker/net/server.py)."""

    broker: Broker
    loop: asyncio.AbstractEventLoop
    admission: Admission
    bound: list[str]
    unix_paths: list[Path]

    def new_protocol(self, listener: ListenerConfig, label: str) -> ClientConnection:
        """A connection protocol for `listener`."""


# -- TLS -----------------------------------------------------------------------------------


def tls_context(listener: ListenerConfig) -> ssl.SSLContext:
    """The server context of a tls/wss listener (TLS 1.2+, client certificates if asked)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = (
        ssl.TLSVersion.TLSv1_3 if listener.tls_min_version == "1.3" else ssl.TLSVersion.TLSv1_2
    )
    context.options |= ssl.OP_NO_COMPRESSION | ssl.OP_CIPHER_SERVER_PREFERENCE
    load_certificates(context, listener)
    if listener.require_certificate:
        context.verify_mode = ssl.CERT_REQUIRED
    elif listener.cafile is not None:
        context.verify_mode = ssl.CERT_OPTIONAL
    return context


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


# -- admission -------------------------------------------------------------------------------


def peer_source(peer: object) -> str:
    """Source address of a `peername` (unix sockets: "unix")."""
    if isinstance(peer, tuple) and peer:
        return str(peer[0])
    return UNIX_SOURCE


@dataclass(eq=False, slots=True)
class PendingConnection:
    """An admitted socket whose CONNECT has not left admission yet."""

    source: str
    abort: Callable[[], None]  # closes the socket at once (its connection_lost releases it)


class Admission:
    """Per-source accept limits, the pending table, the login throttle and password hashing."""

    def __init__(self, server: ListenerHost, security: Security | None) -> None:
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
                        len(protocol.buffer), count)
        protocol.buffer.clear()
        protocol.closing = True
        if protocol.transport is not None:
            protocol.transport.abort()

    def release(self, entry: PendingConnection) -> None:
        """A counted socket closed."""
        self.settled(entry)
        self.limiter.release(entry.source)

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
        info = ClientInfo(packet.client_id, packet.username, protocol.label, conn.peer,
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


class TLSAcceptor(asyncio.Protocol):
    """Admits a TCP connection, then puts TLS (asyncio's `SSLProtocol`) in front of `inner`.

    The per-source limits run before the handshake, so a flood costs no key exchanges. The
    `SSLProtocol` is installed by hand (what `loop.start_tls` does internally) because
    uvloop's `start_tls` does not hand a server socket over reliably; `inner.connection_made`
    is called once the handshake has completed.
    """

    def __init__(self, server: ListenerHost, listener: ListenerConfig, context: ssl.SSLContext,
                 inner: ClientConnection | WebSocketConnection) -> None:
        self.server = server
        self.listener = listener
        self.context = context
        self.inner = inner
        self.admitted: PendingConnection | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        raw = cast(asyncio.Transport, transport)
        source = peer_source(raw.get_extra_info("peername"))
        admitted = self.server.admission.accept(source, raw.abort)
        if admitted is None:
            self.inner.discard()
            raw.abort()
            return
        self.admitted = admitted
        self.inner.adopt(admitted)
        loop = self.server.loop
        waiter: asyncio.Future[None] = loop.create_future()
        waiter.add_done_callback(self._handshake_done)
        tls = sslproto.SSLProtocol(
            loop, self.inner, self.context, waiter, server_side=True,
            call_connection_made=True,
            ssl_handshake_timeout=math.ceil(self.server.broker.limits.connect_timeout),
        )
        raw.set_protocol(tls)
        tls.connection_made(raw)

    def _handshake_done(self, waiter: asyncio.Future[None]) -> None:
        exc = None if waiter.cancelled() else waiter.exception()
        if exc is None and not waiter.cancelled():
            return
        self.server.broker.count_tls_failed()
        assert self.admitted is not None
        log.info("TLS handshake with %s failed: %s", self.admitted.source, exc or "cancelled")
        self.server.admission.release(self.admitted)
        self.inner.discard()

    def data_received(self, data: bytes) -> None:  # pragma: no cover - replaced at once
        raise AssertionError("TLSAcceptor hands the socket to TLS in connection_made")


class _WSTransport(asyncio.Transport):
    """What an `MQTTConnection` writes to on a WebSocket: one binary frame per write."""

    def __init__(self, owner: WebSocketConnection, transport: asyncio.Transport) -> None:
        super().__init__()
        self._owner = owner
        self._transport = transport
        self._closing = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not self._closing:
            frame = self._owner.ws.send(bytes(data))
            if frame:
                self._transport.write(frame)

    def close(self) -> None:
        if self._closing:
            return
        self._closing = True
        data = self._owner.ws.close()
        if data:
            self._transport.write(data)
        self._transport.close()

    def abort(self) -> None:
        self._closing = True
        self._transport.abort()

    def is_closing(self) -> bool:
        return self._closing or self._transport.is_closing()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._transport.get_extra_info(name, default)

    def pause_reading(self) -> None:
        self._transport.pause_reading()

    def resume_reading(self) -> None:
        if not self._transport.is_closing():
            self._transport.resume_reading()

    def is_reading(self) -> bool:
        return self._transport.is_reading()

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self._transport.set_write_buffer_limits(high, low)

    def get_write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size()


class WebSocketConnection(asyncio.Protocol):
    """MQTT over WebSocket: the upgrade and the framing around one `MQTTConnection`."""

    def __init__(self, server: ListenerHost, listener: ListenerConfig, label: str) -> None:
        self.server = server
        self.ws = websocket.MQTTWebSocket(listener.ws_path, listener.origins,
                                          server.broker.limits.max_packet_size)
        self.inner = server.new_protocol(listener, label)
        self.transport: asyncio.Transport | None = None

    def adopt(self, admitted: PendingConnection) -> None:
        self.inner.adopt(admitted)

    def discard(self) -> None:
        self.inner.discard()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        # The MQTT connection exists from the start, so its CONNECT timeout also bounds a
        # client that never finishes the upgrade.
        self.inner.connection_made(_WSTransport(self, self.transport))

    def data_received(self, data: bytes) -> None:
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        for event in self.ws.receive(data):
            if isinstance(event, websocket.Payload):
                self.inner.data_received(event.data)
            elif isinstance(event, websocket.Reply):
                transport.write(event.data)
            elif isinstance(event, websocket.Refused):
                self.server.broker.count_ws_refused()
                log.info("WebSocket upgrade from %s refused: %d %s", self.inner.conn.peer,
                         event.status, event.reason)
                transport.write(event.data)
                transport.close()
            else:
                if not event.by_peer:
                    log.info("WebSocket from %s: %s: closing (%d)", self.inner.conn.peer,
                             event.reason, event.code)
                transport.write(event.data)
                transport.close()
            if transport.is_closing():
                return

    def connection_lost(self, exc: Exception | None) -> None:
        self.inner.connection_lost(exc)

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()


# -- start-up --------------------------------------------------------------------------------


def describe_auth(listener: ListenerConfig, security: Security | None, label: str
                  ) -> tuple[int, str]:
    """(log level, plain words) about who may connect to a listener."""
    level = logging.INFO
    policy = security.policies.get(label) if security is not None else None
    local = listener.type == "unix" or is_loopback(listener.host)
    if listener.use_identity_as_username:
        who = "client certificate required, its CN is the username"
    elif listener.anonymous_allowed:
        if local:
            who = "anonymous clients allowed (local listener)"
        else:
            who = "anonymous clients ALLOWED on a non-loopback listener (allow_anonymous = true)"
            level = logging.WARNING
    else:
        why = "allow_anonymous = false" if listener.allow_anonymous is False else (
            "not loopback; allow_anonymous = true would allow them")
        who = f"anonymous clients REFUSED ({why})"
    parts = [who]
    if policy is not None and policy.passwords is not None:
        parts.append(f"{len(policy.passwords)} user(s) from {listener.password_file}")
        if listener.type in ("tcp", "ws") and not local:
            parts.append("passwords cross the network in clear text: prefer tls/wss")
            level = logging.WARNING
    elif not listener.use_identity_as_username:
        parts.append("no password file (usernames are not verified)")
    if policy is not None and policy.acl is not None:
        parts.append(f"ACL {listener.acl_file} ({policy.acl.rule_count} rules)")
    else:
        parts.append("no ACL (every topic)")
    return level, "; ".join(parts)


async def start_listener(server: ListenerHost, listener: ListenerConfig, label: str
                         ) -> tuple[asyncio.AbstractServer, list[tuple[str, int]]]:
    """Bind one listener; returns its asyncio server and the bound (host, port) pairs."""
    loop = server.loop
    kind = listener.type
    context = tls_context(listener) if kind in ("tls", "wss") else None
    if context is not None:
        security = server.admission.security
        loader = security.loader if security is not None else None
        if isinstance(loader, SecurityFiles):
            loader.contexts[label] = (context, listener)

    def factory() -> asyncio.Protocol:
        inner: ClientConnection | WebSocketConnection
        if kind in ("ws", "wss"):
            inner = WebSocketConnection(server, listener, label)
        else:
            inner = server.new_protocol(listener, label)
        if context is not None:
            return TLSAcceptor(server, listener, context, inner)
        return inner

    aio_server: asyncio.AbstractServer
    addresses: list[tuple[str, int]] = []
    if kind == "unix":
        path = Path(listener.bind)
        _remove_stale_socket(path)
        aio_server = await loop.create_unix_server(factory, str(path),
                                                  backlog=ACCEPT_BACKLOG)
        os.chmod(path, 0o660 if listener.socket_mode is None else listener.socket_mode)
        server.unix_paths.append(path)
        bound = [f"unix:{path}"]
    else:
        aio_server = await loop.create_server(
            factory, listener.host, listener.port, reuse_address=True, backlog=ACCEPT_BACKLOG
        )
        bound = []
        for sock in aio_server.sockets:
            host, port = sock.getsockname()[:2]
            addresses.append((host, port))
            bound.append(f"{host}:{port}" if kind == "tcp" else f"{host}:{port} ({kind})")
    level, words = describe_auth(listener, server.admission.security, label)
    for address in bound:
        server.bound.append(address)
        extra = f" path {listener.ws_path}" if kind in ("ws", "wss") else ""
        log.log(level, "listening on %s [%s%s]: %s", address, label, extra, words)
    return aio_server, addresses


def _remove_stale_socket(path: Path) -> None:
    try:
        mode = path.lstat().st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(mode):
        raise OSError(f"{path} exists and is not a socket: refusing to replace it")
    # A socket someone still accepts on belongs to a running broker: never steal it.
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.settimeout(1.0)
        probe.connect(str(path))
    except OSError:
        path.unlink()  # nobody listens: left behind by a process that died
    else:
        raise OSError(f"{path} is in use by another process: refusing to replace it")
    finally:
        probe.close()
