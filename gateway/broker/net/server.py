"""The one I/O module of the broker: TCP listeners and the bytes of each connection.

How this works: every accepted socket gets an `MQTTConnection` (an asyncio Protocol). Incoming
bytes are decoded in place, packet by packet, and each packet goes to `Broker.handle` with the
loop's monotonic time. Outgoing bytes are never written one by one: `write` appends to the
connection's list and marks it dirty, and one callback per loop iteration joins each dirty
connection's list into a single `transport.write` (write coalescing). Two things go out
sooner, because the client waits for them: what a client's own read produced for it (its
PUBACKs, the deliveries its PUBACKs let into its window) at the end of that read, and QoS 1/2
PUBLISHes in chunks of `WINDOW_CHUNK`, so that a subscriber's in-flight window keeps moving
(docs/flow-control.md).

Durable acknowledgements: when the hooks are durable, `write(..., gated=True)` (a PUBACK or
PUBREC for a stored message) holds that connection's output, from that point on, until a
`hooks.flush()` that started after the write has completed. One flush serves every connection
that was waiting (group commit), and each connection's output stays in order. A slow
publisher that keeps several messages in flight has its acknowledgements held a little longer,
so that its messages share one commit (gateway/broker/net/ack_hold.py: flash wear).

Back-pressure towards a subscriber: when a transport's buffer passes the high-water mark asyncio
calls `pause_writing`; the broker then queues that client's messages in its bounded session
queue. `resume_writing` pumps the queue again.

Back-pressure towards a publisher (gateway/broker/engine/flow_control.py): when the core calls
`pause_reading` (the queues this client's messages go into are full), the read loop stops after
the packet at hand, keeps the rest of the bytes in `buffer` and pauses the transport, so TCP
pushes back on the client. `resume_reading` continues with the kept bytes on the next loop
iteration (never inside another connection's packet handling).

A v5 client's Receive Maximum, used up by QoS 1 publishes whose PUBACKs we still owe (MQTT.js
sends without counting): before the next QoS 1/2 PUBLISH is handed to the broker, the PUBACKs
waiting in `out` are written at once, which frees the window. PUBACKs held for the store's
commit cannot be: the read loop keeps that PUBLISH unread (`windowed`) until `release` sends
them, and a windowed connection is never kept waiting by the ack hold. A window full of QoS 2
ids awaiting PUBREL is the client's to free: the broker answers DISCONNECT 0x93.

Closing: after the last bytes (a DISCONNECT with its reason code, say) our side of a TCP
connection is shut down with `write_eof`, and whatever the client still sends is read and
discarded until it closes or `LINGER_SECONDS` pass (lingering close). Closing a socket with
unread input makes the kernel send a reset, and a client still writing would then see a broken
pipe instead of the reason code. TLS and WebSocket transports cannot half-close: they close.

Listeners (gateway/broker/net/listeners.py) and admission (gateway/broker/net/admission.py):
`start` binds every configured listener (tcp, tls, ws, wss, unix) through
`listeners.start_listener`; each ends in an `MQTTConnection`.
A new socket is counted per source address by `Admission.accept` (refused: closed at once), and
the first CONNECT passes `Admission.on_connect`, which may park it (login throttle delay,
password hash in a worker thread): reading pauses until `resume_connect`.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import cast

from gateway.base.wakeable import WakeableSleep
from gateway.broker.codec import NEED_DATA, decode
from gateway.broker.codec.errors import MQTTProtocolError, UnsupportedProtocolVersion
from gateway.broker.codec.packets import MQTT_5, Connect, PacketType, Publish
from gateway.broker.contracts.auth import Security
from gateway.broker.contracts.config import ListenerConfig, listener_labels
from gateway.broker.core.session import Connection
from gateway.broker.engine.broker import Broker
from gateway.broker.engine.delivery import HIGH_WATER
from gateway.broker.net import admission, listeners
from gateway.broker.net.ack_hold import AckPace, hold_until

log = logging.getLogger("outpost.server")

TICK_SECONDS = 0.5
# Output is written at the end of the loop iteration, or at once when this much is waiting.
FLUSH_BYTES = 64 * 1024
# QoS 1/2 PUBLISHes to one client go out in writes of at most this many packets. A subscriber
# may hold only its in-flight window (20 by default) unacknowledged; one write for the whole
# window's refill makes the window stop-and-wait (docs/flow-control.md, "Towards a
# subscriber"): the subscriber gets the whole window in one read, acknowledges it in one
# write, and nothing moves while either side wakes up. Smaller writes keep acknowledgements
# coming back while the rest of the window is still being written.
WINDOW_CHUNK = 8
# libuv may hand a busy socket's data over in many reads per iteration; after this many bytes
# reading pauses until the next iteration so output, timers and other clients get their turn.
READ_BURST = 256 * 1024
# How long a closed connection keeps reading (and discarding) until the client closes too.
LINGER_SECONDS = 2.0
_UNSUPPORTED_VERSION_CONNACK = b"\x20\x02\x00\x01"  # 3.1.1 CONNACK, return code 1
# A CONNACK the store could not commit (the session is not stored) is replaced by a refusal,
# so the client hears why instead of nothing: 0x88 server unavailable, 3.1.1 return code 3.
_UNSTORED_CONNACK_V5 = b"\x20\x03\x00\x88\x00"
_UNSTORED_CONNACK_V3 = b"\x20\x02\x00\x03"
# Packet types whose durable acknowledgement may be held (ack_hold).
_HOLDABLE = frozenset((PacketType.PUBACK, PacketType.PUBREC))
_PUBLISH = int(PacketType.PUBLISH)


class MQTTConnection(admission.ClientConnection):
    """One client socket."""

    # One per client, so no per-instance __dict__ (memory per idle client); the rest of the
    # attributes are slots of ClientConnection.
    __slots__ = (
        "buffer", "forgotten", "held", "in_commit", "linger", "out", "out_bytes", "pace",
        "parked", "paused", "read_bytes", "refused", "server", "throttled", "windowed",
    )

    def __init__(self, server: Server, listener: ListenerConfig, label: str | None = None
                 ) -> None:
        self.server = server
        self.listener = listener
        self.label = label or listener.bind  # ClientInfo.listener
        self.source: str | None = None  # counted by Admission (None: not counted)
        self.pending: admission.PendingConnection | None = None  # set until CONNECT is judged
        self.parked = False  # the CONNECT waits in Admission; reading is paused
        self.refused = False
        self.transport: asyncio.Transport | None = None
        # The three are None while empty, which is most of an idle client's life (an empty
        # bytearray or list costs 56 bytes each, per client).
        self.buffer: bytearray | None = None
        self.out: list[bytes] | None = None
        self.out_bytes = 0
        self.held: list[bytes] | None = None
        self.in_commit: list[bytes] | None = None
        self.pace: AckPace | None = None  # from its first durable acknowledgement on
        self.closing = False
        self.paused = False
        self.throttled = False  # flow control: the broker paused reading this client
        self.windowed = False  # its Receive Maximum is full of PUBACKs held for a commit
        self.linger: asyncio.TimerHandle | None = None
        self.forgotten = False  # connection_lost reported to the broker
        self.read_bytes = 0
        self.conn: Connection

    # -- asyncio callbacks -------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        peer = transport.get_extra_info("peername")
        if self.source is None:  # not admitted by a TLS acceptor: count it here
            source = admission.peer_source(peer)
            admitted = self.server.admission.accept(source, self.transport.abort)
            if admitted is None:
                self.discard()
                self.transport.abort()
                return
            self.adopt(admitted)
        self.transport.set_write_buffer_limits(HIGH_WATER, HIGH_WATER // 4)
        peer_text = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else (
            str(peer) or admission.UNIX_SOURCE)
        self.conn = self.server.broker.open_connection(
            self, self.label, peer_text, self.server.anonymous_allowed(self.listener),
            self.server.loop.time(),
        )

    def adopt(self, admitted: admission.PendingConnection) -> None:
        """This connection was counted by Admission (released in `connection_lost`)."""
        self.source = admitted.source
        self.pending = admitted

    def discard(self) -> None:
        """Refused before it started: nothing to release, no broker connection."""
        self.refused = self.closing = True

    def data_received(self, data: bytes) -> None:
        server = self.server
        previous, server.reading = server.reading, self
        try:
            self._read(data)
        finally:
            server.reading = previous
            if self.out is not None:
                # What this client's own packets produced for it (PUBACKs, the next
                # deliveries of its window) goes out now, not after every other client's
                # input of this loop iteration: the client's next packets depend on it.
                self.flush()

    def _read(self, data: bytes) -> None:
        server = self.server
        server.broker.count_bytes_received(len(data))
        if self.closing:
            return
        if self.parked or self.throttled or self.windowed:
            self.keep(data)
            return
        self.read_bytes += len(data)
        if self.read_bytes >= READ_BURST and self.transport is not None:
            self.read_bytes = 0
            self.transport.pause_reading()
            server.loop.call_soon(self._resume_reading)
        if self.buffer:
            self.buffer += data
            data = bytes(self.buffer)
            self.buffer = None
        broker = server.broker
        conn = self.conn
        now = server.loop.time()
        max_size = broker.limits.max_packet_size
        receive_maximum = broker.limits.receive_maximum
        offset = 0
        end = len(data)
        try:
            while offset < end and not conn.closed:
                result = decode(data, conn.version, max_size, offset)
                if result is NEED_DATA:
                    break
                packet, used = result
                raw = b""
                if type(packet) is Publish and packet.qos == 0 and not packet.retain:
                    # Forwarded as they came; a retained message is kept, and its own bytes
                    # would only add to what every retained topic costs in memory.
                    raw = data[offset:offset + used] if offset or used != end else data
                elif (type(packet) is Publish and packet.qos and conn.version == MQTT_5
                      and conn.incoming_inflight and self.outstanding() >= receive_maximum
                      and not self._make_room()):
                    self.keep(data[offset:] if offset else data)  # this PUBLISH waits too
                    return
                elif conn.version == 0 and type(packet) is Connect:
                    admitted = server.admission.on_connect(self, packet)
                    if admitted is None:  # parked: resume_connect() continues
                        self._park(data, offset + used, end)
                        return
                    packet = admitted
                broker.handle(conn, packet, now, raw)
                offset += used
                if conn.paused:  # flow control: the rest waits for resume_reading()
                    if offset < end:
                        self.keep(data[offset:])
                    return
        except UnsupportedProtocolVersion as exc:
            log.info("%s: %s", conn.peer, exc.reason)
            self.write(_UNSUPPORTED_VERSION_CONNACK)
            self.close()
            return
        except MQTTProtocolError as exc:
            broker.decode_error(conn, exc)
            return
        if offset < end:
            kept = self.keep(data[offset:] if offset else data)
            if self.pending is not None and kept > broker.limits.max_pending_bytes:
                self.server.admission.overflowed(self)

    def keep(self, data: bytes) -> int:
        """Keep bytes that are not decoded yet; returns how many are kept in all."""
        if self.buffer is None:
            self.buffer = bytearray(data)
        else:
            self.buffer += data
        return len(self.buffer)

    def _park(self, data: bytes, offset: int, end: int) -> None:
        self.parked = True
        if offset < end:
            self.keep(data[offset:])
        if self.transport is not None:
            self.transport.pause_reading()

    def resume_connect(self, packet: Connect) -> None:
        """Admission is done with the parked CONNECT: handle it, then what came after it."""
        self.parked = False
        if self.closing or self.conn.closed:
            return
        self.server.broker.handle(self.conn, packet, self.server.loop.time())
        if self.transport is not None and not self.transport.is_closing():
            self.transport.resume_reading()
        if self.buffer and not self.conn.closed:
            self.data_received(b"")

    def _make_room(self) -> bool:
        """The client's Receive Maximum is used up and another QoS 1/2 PUBLISH is at hand:
        send the PUBACKs we owe. False: they wait for a commit, and so does reading."""
        self.flush()  # the PUBACKs not held: on their way now (resets incoming_inflight)
        if not self.conn.incoming_inflight or (self.held is None and self.in_commit is None):
            return True  # what is left is the client's to free (QoS 2): the broker judges
        self.windowed = True
        if self.transport is not None:
            self.transport.pause_reading()
        if self.held:
            self.server.request_commit(self)  # re-judges the hold: a full window is not held
        return False

    def _resume_reading(self) -> None:
        if self.throttled or self.parked or self.windowed:
            return
        if self.transport is not None and not self.transport.is_closing():
            self.transport.resume_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closing = True
        if self.linger is not None:
            self.linger.cancel()
            self.linger = None
        self._forget()

    def _forget(self) -> None:
        """The client is gone for the broker and admission (once; a lingering socket may
        still be open)."""
        if self.refused or self.forgotten:
            return
        self.forgotten = True
        if self.source is not None:
            self.server.admission.release(self.source, self.pending)
            self.pending = None
        self.server.broker.connection_lost(self.conn, self.server.loop.time())

    def pause_writing(self) -> None:
        self.paused = True  # backlog() is above HIGH_WATER: the broker queues meanwhile

    def resume_writing(self) -> None:
        self.paused = False
        self._pump()

    def _pump(self) -> None:
        session = self.conn.session
        if session is not None and (session.outbound.queue or session.outbound.spilled):
            self.server.broker.dispatch.pump(session, self.server.loop.time())

    # -- Sink (called by the broker core) ---------------------------------------------

    def write(self, data: bytes, gated: bool = False) -> None:
        """Queue bytes; flushed once per loop iteration (gated: after the store's flush)."""
        if self.closing:
            return
        if gated or self.held or self.in_commit is not None:
            pace = self.pace
            if gated and data[0] >> 4 in _HOLDABLE:
                if pace is None:
                    pace = self.pace = AckPace()
                pace.acknowledged(self.server.loop.time())
                if self.out is not None:
                    # Output written before it and not sent yet (a delivery of this very
                    # message, say): the client may act on that, so it must not wait.
                    pace.other = True
            elif pace is not None:
                pace.other = True  # output other than acknowledgements is never held back
            if self.held is None:
                self.held = [data]
            else:
                self.held.append(data)
            self.server.request_commit(self)
            return
        self.out_bytes += len(data)
        out = self.out
        if out is None:
            self.out = [data]
            if self.out_bytes < FLUSH_BYTES:
                if self.server.reading is not self:  # else the end of the read flushes it
                    self.server.mark_dirty(self)
                return
        else:
            out.append(data)
            if len(out) >= WINDOW_CHUNK and data[0] >> 4 == _PUBLISH and data[0] & 0x06:
                self.flush()  # a chunk of the client's in-flight window (WINDOW_CHUNK)
                return
        if self.out_bytes >= FLUSH_BYTES:
            self.flush()

    def pause_reading(self) -> None:
        """Flow control: read no further packets until `resume_reading`."""
        if self.throttled or self.closing:
            return
        self.throttled = True
        if self.transport is not None:
            self.transport.pause_reading()

    def resume_reading(self) -> None:
        """Flow control: read again, starting on the next iteration with the kept bytes."""
        if not self.throttled:
            return
        self.throttled = False
        self.server.loop.call_soon(self._continue_reading)

    def _continue_reading(self) -> None:
        if self.throttled or self.parked or self.windowed or self.closing:
            return
        if self.transport is not None and not self.transport.is_closing():
            self.transport.resume_reading()
        if self.buffer and not self.conn.closed:
            self.data_received(b"")

    def close(self) -> None:
        """Close once everything already written has been flushed."""
        if self.closing:
            return
        self.closing = True
        if self.held or self.in_commit is not None:
            return  # closed by release() once the commit completes
        self.flush()
        self._shut_down()

    def _shut_down(self) -> None:
        """Lingering close: send EOF after the output, then discard input until the peer
        closes or LINGER_SECONDS pass (see the module docstring)."""
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        try:
            half_close = transport.can_write_eof()
        except NotImplementedError:  # a WebSocket transport
            half_close = False
        if not half_close:
            transport.close()
            return
        try:
            transport.write_eof()
        except OSError:  # the peer reset the connection meanwhile: nothing to linger for
            transport.abort()
            return
        self.buffer = None
        self.throttled = self.parked = self.windowed = False
        transport.resume_reading()
        self.linger = self.server.loop.call_later(LINGER_SECONDS, transport.abort)
        # The client's slot (max_connections, per-address counts) is free now, not after the
        # linger; soon rather than at once, as the broker may be in the middle of a packet.
        self.server.loop.call_soon(self._forget)

    def backlog(self) -> int:
        # Only a paused transport (buffer above HIGH_WATER) makes the broker queue, because
        # only then is a resume_writing() -> pump guaranteed to follow; our own list never
        # reaches HIGH_WATER since it is written through at FLUSH_BYTES.
        if self.paused and self.transport is not None:
            return self.transport.get_write_buffer_size() + self.out_bytes
        return self.out_bytes

    # -- output ------------------------------------------------------------------------

    def outstanding(self) -> int:
        """The client's QoS 1 and 2 publishes still waiting for our PUBACK / PUBCOMP."""
        session = self.conn.session
        return self.conn.incoming_inflight + (len(session.awaiting_release) if session else 0)

    def flush(self) -> None:
        """Write the queued bytes with one system call."""
        out = self.out
        self.out = None
        self.out_bytes = 0
        if not out or self.transport is None or self.transport.is_closing():
            return
        data = out[0] if len(out) == 1 else b"".join(out)
        # Every PUBACK written so far is on its way, but those behind a commit.
        self.conn.incoming_inflight = (
            0 if self.held is None and self.in_commit is None else self._pubacks_in_commit())
        self.server.broker.count_bytes_sent(len(data))
        self.transport.write(data)

    def _pubacks_in_commit(self) -> int:
        """The PUBACKs still waiting for a commit (each write is one packet)."""
        return sum(1 for waiting in (self.in_commit, self.held) if waiting
                   for data in waiting if data[0] >> 4 == PacketType.PUBACK)

    def abort(self) -> None:
        """Drop held output and close: the store could not commit what it acknowledges.

        When that output starts with the CONNACK (nothing precedes it), the client is told
        that the server is unavailable instead.
        """
        held = self.in_commit or self.held or []
        unstored_connack = bool(held) and held[0][:1] == b"\x20"
        self.in_commit = None
        self.held = self.out = None
        self.out_bytes = 0
        self.closing = True
        if self.transport is None:
            return
        if unstored_connack:
            self.transport.write(_UNSTORED_CONNACK_V5 if self.conn.is_v5 else
                                 _UNSTORED_CONNACK_V3)
            self.transport.close()  # after the refusal is written
        else:
            self.transport.abort()

    def release(self) -> None:
        """A store flush covering `in_commit` completed: send it."""
        released = self.in_commit or []
        self.in_commit = None
        if released:
            self.out = (self.out or []) + released
            self.out_bytes += sum(map(len, released))
        self.flush()
        if self.closing and not self.held:
            self._shut_down()
        elif self.windowed:  # the PUBACKs that filled the client's window are on their way
            self.windowed = False
            self.server.loop.call_soon(self._continue_reading)


class Server:
    """Listeners, the per-iteration flush, the store commit loop and the broker's clock."""

    def __init__(self, broker: Broker, security: Security | None = None,
                 ack_hold: float = 0.0) -> None:
        """`ack_hold`: the most seconds a pipelining publisher's acknowledgements may wait
        to share a commit (gateway/broker/net/ack_hold.py; 0: never held)."""
        self.broker = broker
        self.ack_hold = ack_hold
        self.loop = asyncio.get_running_loop()
        self.servers: list[asyncio.AbstractServer] = []
        self.addresses: list[tuple[str, int]] = []
        self.bound: list[str] = []  # "HOST:PORT", "HOST:PORT (tls)", "unix:PATH"
        self.unix_paths: list[Path] = []
        self.admission = admission.Admission(self, security)
        self._dirty: list[MQTTConnection] = []
        self.reading: MQTTConnection | None = None  # whose data_received is running
        self._waiting: set[MQTTConnection] = set()
        self._commit_task: asyncio.Task[None] | None = None
        self._hold = WakeableSleep()
        self._stopping = False
        self._tick_handle: asyncio.TimerHandle | None = None
        self._anonymous: dict[int, tuple[ListenerConfig, bool]] = {}  # by id(listener)

    def anonymous_allowed(self, listener: ListenerConfig) -> bool:
        """`listener.anonymous_allowed`, worked out once per listener: it parses the bind
        address, which is too slow to repeat for every accepted connection."""
        cached = self._anonymous.get(id(listener))
        if cached is None or cached[0] is not listener:
            cached = self._anonymous[id(listener)] = (listener, listener.anonymous_allowed)
        return cached[1]

    def connections(self) -> list[MQTTConnection]:
        """The open client connections (the broker is the only register: a set here would
        cost every idle client another entry)."""
        return [conn.sink for conn in self.broker.connections()
                if isinstance(conn.sink, MQTTConnection)]

    def new_protocol(self, listener: ListenerConfig, label: str) -> MQTTConnection:
        """A connection protocol for `listener` (used by the listener factories)."""
        return MQTTConnection(self, listener, label)

    async def start(self, configured: list[ListenerConfig]) -> list[tuple[str, int]]:
        """Bind every listener; returns the bound (host, port) pairs (`bound` has them all)."""
        for listener, label in zip(configured, listener_labels(configured), strict=True):
            server, addresses = await listeners.start_listener(self, listener, label)
            self.servers.append(server)
            self.addresses.extend(addresses)
        self._tick_handle = self.loop.call_later(TICK_SECONDS, self._tick)
        return self.addresses

    def _tick(self) -> None:
        self.broker.tick(self.loop.time())
        self._tick_handle = self.loop.call_later(TICK_SECONDS, self._tick)

    def mark_dirty(self, connection: MQTTConnection) -> None:
        if not self._dirty:
            self.loop.call_soon(self._flush_dirty)
        self._dirty.append(connection)

    def _flush_dirty(self) -> None:
        dirty, self._dirty = self._dirty, []
        for connection in dirty:
            connection.flush()

    def request_commit(self, connection: MQTTConnection) -> None:
        self._waiting.add(connection)
        if self._commit_task is None:
            self._commit_task = self.loop.create_task(self._commit_loop(), name="store-commit")
        else:
            self._hold.wake()  # the hold's verdict may change

    @property
    def holding(self) -> bool:
        """A commit is waiting for more acknowledgements to answer (ack_hold)."""
        return self._hold.sleeping

    async def _hold_acks(self) -> None:
        """Wait while the acknowledgements the next commit answers may gather company."""
        loop = self.loop
        while not self._stopping:
            until = hold_until(
                ((None if c.closing or c.windowed else c.pace, c.outstanding())
                 for c in self._waiting if c.in_commit is None),
                self.ack_hold, self.broker.limits.receive_maximum, loop.time())
            if until is None:
                return
            self.broker.hooks.flush_coming(until)
            await self._hold.until(loop, until)

    async def _commit_loop(self) -> None:
        try:
            while self._waiting:
                if self.ack_hold > 0:
                    await self._hold_acks()
                batch = [c for c in self._waiting if c.in_commit is None]
                self._waiting.difference_update(batch)
                for connection in batch:
                    connection.in_commit, connection.held = connection.held or [], None
                    if connection.pace is not None:
                        connection.pace.committing()
                try:
                    await self.broker.hooks.flush()
                except Exception:
                    # Nothing of this batch is stored: its acknowledgements must never be
                    # sent. Closing makes the publishers send again after reconnecting.
                    log.exception("store commit failed: closing %d connection(s)", len(batch))
                    for connection in batch:
                        connection.abort()
                    continue
                for connection in batch:
                    connection.release()
                    if connection.held:
                        self._waiting.add(connection)
        finally:
            self._commit_task = None

    async def stop(self) -> None:
        """Stop accepting, say goodbye to every client, flush the store."""
        self._stopping = True
        self._hold.wake()
        if self._tick_handle is not None:
            self._tick_handle.cancel()
        for server in self.servers:
            server.close()
        self.admission.close()
        now = self.loop.time()
        for connection in self.connections():
            self.broker.shutdown_connection(connection.conn)
            connection.close()
        for connection in self.connections():
            self.broker.connection_lost(connection.conn, now)
        if self._commit_task is not None:
            await self._commit_task
        for server in self.servers:
            await server.wait_closed()
        for path in self.unix_paths:
            path.unlink(missing_ok=True)
        await self.broker.hooks.close()
