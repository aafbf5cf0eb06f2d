"""Listeners: TCP, TLS, WebSocket, secure WebSocket and unix socket.

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

Admission (who may connect, the pending table, the login throttle, password hashing) is in
gateway/broker/net/admission.py.

Password files, ACL files and certificates are read in gateway/broker/net/security_files.py.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import socket
import ssl
import stat
from asyncio import sslproto
from pathlib import Path
from typing import Any, Protocol, cast

from gateway.base.hostport import is_loopback
from gateway.broker.contracts.auth import Security
from gateway.broker.contracts.config import ListenerConfig
from gateway.broker.net import websocket
from gateway.broker.net.admission import (
    Admission,
    AdmissionHost,
    ClientConnection,
    PendingConnection,
    peer_source,
)
from gateway.broker.net.security_files import SecurityFiles, load_certificates

log = logging.getLogger("outpost.listeners")

# Sockets the kernel may hold completed but not yet accepted (capped by net.core.somaxconn):
# under a connection flood a full accept queue drops SYNs, and a legitimate client then waits
# for its SYN to be sent again (1 s, then 3 s) before admission even sees it.
ACCEPT_BACKLOG = 4096


# -- what the listeners need of the server ---------------------------------------------------


class ListenerHost(AdmissionHost, Protocol):
    """What the listeners need of the `Server` (gateway/broker/net/server.py)."""

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
        self.server.admission.release(self.admitted.source, self.admitted)
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
