"""The broker core: packets and `now` in, bytes to sinks and hook events out.

How this works: the I/O layer creates a `Connection` per socket (or in-process link), passes
every decoded packet to `Broker.handle` together with the current monotonic time, reports lost
connections with `connection_lost`, and calls `tick` about once a second. The broker owns every
session, the subscription table and the retained store. Packet handling is one method per
incoming packet type (gateway/broker/engine/handle_connect.py, handle_publish.py,
handle_subscribe.py), which see the broker as `BrokerApi` and report what they count through
its methods (`client_connected`, `count_denied`, ...); routing and the delivery window live
in `gateway.broker.engine.delivery`, periodic duties (keepalive, connect timeout, will delay,
session expiry,
`$SYS`) in `tick`. A protocol violation goes through one place, `protocol_error`, which sends a
v5 DISCONNECT with the reason code (3.1.x: just closes) and publishes the will.

Pure and synchronous: no awaits, no clock reads, no sockets.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, replace

from gateway.base.memory import default_queue_budget
from gateway.broker.codec import encode
from gateway.broker.codec.errors import MQTTProtocolError, PacketTooLarge
from gateway.broker.codec.packets import (
    MQTT_5,
    NO_PROPERTIES,
    Auth,
    Connect,
    Disconnect,
    Packet,
    PingReq,
    PingResp,
    Properties,
    PubAck,
    PubComp,
    Publish,
    PubRec,
    PubRel,
    Subscribe,
    Unsubscribe,
    Will,
)
from gateway.broker.codec.reason_codes import (
    ALLOWED_REASON_CODES,
    ReasonCode,
)
from gateway.broker.codec.topics import parse_shared
from gateway.broker.contracts.auth import source_of
from gateway.broker.contracts.config import BrokerConfig
from gateway.broker.contracts.hooks import (
    INTERNAL_LISTENERS,
    Access,
    BrokerHooks,
    RestoredState,
    SessionRecord,
)
from gateway.broker.core.inflight import Outbound, QueueBudget, QueueLimits
from gateway.broker.core.log_sampling import SourceCounts, clip, worth_logging
from gateway.broker.core.message import Message
from gateway.broker.core.retained import RetainedStore
from gateway.broker.core.router import SubscriptionTable
from gateway.broker.core.session import ClientIdentity, ClientInfo, Connection, Session, Sink
from gateway.broker.engine import handle_connect, handle_publish, handle_subscribe
from gateway.broker.engine.delivery import Dispatcher
from gateway.broker.engine.refusals import topic_over_limits, topic_size
from gateway.broker.engine.sys_topics import SysPublisher

log = logging.getLogger("outpost.broker")
_CONNACK_CODES = ALLOWED_REASON_CODES["CONNACK"]

@dataclass(slots=True)
class _PendingWill:
    due: float
    will: Will
    info: ClientInfo

class Broker:
    """All broker state and the handlers of every incoming packet."""

    def __init__(self, config: BrokerConfig, hooks: BrokerHooks | None = None, now: float = 0.0,
                 queue_page: int = 1000) -> None:
        # queue_page: queued messages per offline session kept in memory ([storage] queue_page)
        self.config = config
        self.queue_page = queue_page
        self.limits = config.limits
        self.hooks = hooks or BrokerHooks()
        self.sessions: dict[str, Session] = {}
        # connections whose CONNECT is still to come (or was refused): a connected client is
        # found through its session, so it is not also in a set (an entry per idle client)
        self.connecting: set[Connection] = set()
        self.table = SubscriptionTable()
        self.retained = RetainedStore(self.limits.max_retained_messages,
                                      self.limits.max_retained_bytes)
        self.dispatch = Dispatcher(self.sessions, self.table, self.hooks, self.limits)
        self.counters = self.dispatch.counters
        self.pending_wills: dict[str, _PendingWill] = {}
        self.sys = SysPublisher(config.sys.interval, now)
        self.started_at = now
        self.clients_connected = 0
        self.links_connected = 0  # in-process links among clients_connected
        self.clients_maximum = 0
        self.gated_acks = self.hooks.durable
        # refused CONNECTs and protocol errors, per address: their log lines are sampled
        self.refusals_by_source = SourceCounts()
        self.queue_budget = QueueBudget(
            self.limits.max_queued_total_bytes or default_queue_budget())
        self.queue_limits = self._queue_limits()

    def apply_config(self, config: BrokerConfig) -> None:
        """Take a reloaded configuration's `[limits]` and `[sys]` while clients stay connected.

        Sessions created from now on get the new queue bounds; existing sessions only grow to
        a larger bound, and the memory budget of all queues together only grows, so a reload
        never drops a queued message (a lower budget waits for a restart, with a warning).
        """
        limits = config.limits
        budget = limits.max_queued_total_bytes or default_queue_budget()
        if budget >= self.queue_budget.limit:
            self.queue_budget.limit = budget
        else:
            log.warning(
                "reload: limits.max_queued_total_bytes: lowering the queues' memory budget "
                "needs a restart; keeping %d bytes (%d in use)", self.queue_budget.limit,
                self.queue_budget.used,
            )
        self.config = config
        self.limits = limits
        self.dispatch.limits = limits
        drop_oldest = limits.queue_overflow == "drop-oldest"
        grown: dict[QueueLimits, QueueLimits] = {}  # sessions share their bounds: so do these
        for session in self.sessions.values():
            outbound = session.outbound
            old = outbound.limits
            if old not in grown:
                grown[old] = old.grown_to(
                    limits.max_queued_messages, limits.max_queued_bytes, drop_oldest)
            outbound.limits = grown[old]
        self.queue_limits = self._queue_limits()
        publisher = self.sys
        if publisher.interval != config.sys.interval:
            publisher.interval = config.sys.interval
            publisher.next_at = publisher.last_at + config.sys.interval

    def access_rules_changed(self) -> None:
        """The hooks reloaded their access rules (SIGHUP): decide again whether deliveries
        check READ access, which an ACL that appeared (or went) changes."""
        self.dispatch.access_rules_changed()

    def restore(self, state: RestoredState, now: float) -> None:
        """Rebuild sessions, queues, in-flight state and retained messages from a store."""
        for restored in state.sessions:
            record = restored.record
            session = Session(
                record.client_id, record.protocol_level, self.new_outbound(),
                record.expiry_interval,
                disconnected_at=now if record.disconnected_at is None else record.disconnected_at,
            )
            for packet_id in restored.awaiting_release:
                session.await_release(packet_id)
            for topic_filter, options in record.subscriptions.items():
                group, actual = parse_shared(topic_filter)
                self.table.subscribe(record.client_id, actual, options, group)
                session.subscribe(topic_filter, options)
            outbound = session.outbound
            for delivery in restored.deliveries:
                if delivery.packet_id:
                    delivery.sent = True  # resent with DUP on reconnect
                    outbound.start(delivery)  # keeps its packet identifier
                else:
                    outbound.restore_queued(delivery)
                outbound.last_seq = max(outbound.last_seq, delivery.store_seq)
            outbound.spilled = restored.spilled
            outbound.spilled_bytes = restored.spilled_bytes
            self.sessions[record.client_id] = session
            if record.will is not None:
                # The connection ended with the old process, without a DISCONNECT.
                info = ClientIdentity(record.client_id, None, "restored", "restored")
                self.pending_wills[record.client_id] = _PendingWill(
                    now + min(record.will_delay, record.expiry_interval), record.will, info
                )
        for message in state.retained:
            self.retained.set(message)
        if state.sessions or state.retained:
            log.info(
                "restored %d session(s) and %d retained message(s)",
                len(state.sessions), len(state.retained),
            )

    def _queue_limits(self) -> QueueLimits:
        limits = self.limits
        return QueueLimits(
            limits.max_queued_messages, limits.max_queued_bytes,
            limits.queue_overflow == "drop-oldest", self.queue_page, self.queue_budget,
        )

    def new_outbound(self) -> Outbound:
        """The queue of a new session, bounded by the current configuration."""
        return Outbound(self.queue_limits)

    # -- connections -------------------------------------------------------------------

    def open_connection(
        self, sink: Sink, listener: str, peer: str, anonymous_allowed: bool, now: float
    ) -> Connection:
        """Register a new transport; the CONNECT is still to come."""
        conn = Connection(sink, listener, peer, anonymous_allowed, now, now)
        self.connecting.add(conn)
        return conn

    def connections(self) -> list[Connection]:
        """Every open connection: connected clients (and links), then those before CONNECT."""
        connected = [s.connection for s in self.sessions.values() if s.connection is not None]
        return connected + list(self.connecting)

    def handle(self, conn: Connection, packet: Packet, now: float, raw: bytes = b"") -> None:
        """Process one decoded packet from `conn`. `raw` is its wire bytes (PUBLISH only)."""
        if conn.closed:
            return
        conn.last_seen = now
        if conn.version == 0 or conn.session is None:
            if isinstance(packet, Connect):
                handle_connect.on_connect(self, conn, packet, now)
            else:
                self.protocol_error(conn, ReasonCode.PROTOCOL_ERROR, "first packet must be CONNECT")
            return
        # by exact class (the packet classes have no subclasses): the packets of every QoS 1
        # message first
        if type(packet) is Publish:
            handle_publish.on_publish(self, conn, packet, now, raw)
        elif type(packet) is PubAck:
            handle_publish.on_puback(self, conn, packet, now)
        elif isinstance(packet, PubRec):
            handle_publish.on_pubrec(self, conn, packet)
        elif isinstance(packet, PubRel):
            handle_publish.on_pubrel(self, conn, packet)
        elif isinstance(packet, PubComp):
            handle_publish.on_pubcomp(self, conn, packet, now)
        elif isinstance(packet, Subscribe):
            handle_subscribe.on_subscribe(self, conn, packet, now)
        elif isinstance(packet, Unsubscribe):
            handle_subscribe.on_unsubscribe(self, conn, packet)
        elif isinstance(packet, PingReq):
            conn.sink.write(encode(PingResp(), conn.version))
        elif isinstance(packet, Disconnect):
            handle_connect.on_disconnect(self, conn, packet)
        elif isinstance(packet, Auth):
            # No enhanced authentication method is configured, so any AUTH is unexpected.
            self.protocol_error(conn, ReasonCode.PROTOCOL_ERROR, "AUTH without an auth method")
        elif isinstance(packet, Connect):
            self.protocol_error(conn, ReasonCode.PROTOCOL_ERROR, "second CONNECT")
        else:
            self.protocol_error(
                conn, ReasonCode.PROTOCOL_ERROR, f"{type(packet).__name__} is not sent by clients"
            )

    def protocol_error(self, conn: Connection, reason: int, message: str) -> None:
        """Close `conn` because the client broke the protocol (v5: DISCONNECT with reason)."""
        if conn.closed:
            return
        count = self.refusals_by_source.add(source_of(conn.peer))
        if worth_logging(count, every=100):
            log.info(
                "closing %s (%s): %s (reason 0x%02X; %d from there so far)",
                clip(conn.client_id) if conn.client_id else conn.peer, conn.peer,
                clip(message, 200), reason, count,
            )
        if conn.is_v5 and conn.session is not None:
            props = Properties(reason_string=message) if conn.request_problem_information else (
                NO_PROPERTIES
            )
            data = encode(Disconnect(reason, props), MQTT_5)
            if len(data) > conn.client_max_packet_size:  # [MQTT-3.14.2-3]: drop the string
                data = encode(Disconnect(reason), MQTT_5)
            conn.sink.write(data)
            conn.sent_disconnect = True
        conn.sink.close()
        conn.closed = True

    def shutdown_connection(self, conn: Connection) -> None:
        """The broker is stopping: tell a v5 client why, then close."""
        if conn.closed:
            return
        if conn.is_v5 and conn.session is not None:
            conn.sink.write(encode(Disconnect(ReasonCode.SERVER_SHUTTING_DOWN), MQTT_5))
        conn.sink.close()
        conn.closed = True

    def decode_error(self, conn: Connection, error: MQTTProtocolError) -> None:
        """The codec refused bytes from `conn`."""
        if isinstance(error, PacketTooLarge):  # logged below with the sizes
            self.counters.packets_limited += 1
        if conn.session is None and error.protocol_level == MQTT_5 and not conn.closed:
            # A v5 CONNECT that does not parse: a CONNACK carrying the reason, then close.
            conn.version = MQTT_5
            code = error.reason_code
            if code not in _CONNACK_CODES:
                code = ReasonCode.MALFORMED_PACKET
            handle_connect.refuse(self, conn, code, f"bad CONNECT: {error.reason}")
            return
        self.protocol_error(conn, error.reason_code, error.reason)

    def take_session(
        self, conn: Connection, packet: Connect, expiry: int, now: float
    ) -> tuple[Session, bool]:
        """Find, take over, discard (clean start) or create the session a CONNECT asks for;
        also whether it was present."""
        client_id = conn.client_id
        session = self.sessions.get(client_id)
        if session is not None and session.connection is not None:
            old = session.connection
            self.protocol_error(old, ReasonCode.SESSION_TAKEN_OVER, "session taken over")
            self.connection_lost(old, now)
            session = self.sessions.get(client_id)
        self.pending_wills.pop(client_id, None)  # a new connection cancels a delayed will
        if session is not None and packet.clean_start:
            self.end_session(session, now)
            session = None
        present = session is not None
        if session is None:
            session = Session(client_id, packet.protocol_level, self.new_outbound())
            self.sessions[client_id] = session
        session.protocol_level = packet.protocol_level
        session.expiry_interval = expiry
        session.connection = conn
        session.disconnected_at = None
        self.connecting.discard(conn)
        return session, present

    def connection_lost(self, conn: Connection, now: float) -> None:
        """The transport is gone: publish or schedule the will, keep or end the session."""
        self.connecting.discard(conn)
        conn.closed = True
        self.dispatch.flow.forget(conn)
        session = conn.session
        if session is None or session.connection is not conn:
            return
        self.clients_connected -= 1
        self.links_connected -= conn.listener in INTERNAL_LISTENERS
        session.connection = None
        session.disconnected_at = now
        if session.will is not None and not conn.will_suppressed:
            self._schedule_will(session, conn, now)
        session.will = None
        if session.expiry_interval == 0:
            self.end_session(session, now)
        else:
            self.hooks.session_saved(self.record(session))

    def end_session(self, session: Session, now: float) -> None:
        """Forget a session for good."""
        for topic_filter in session.subscriptions:
            group, actual = parse_shared(topic_filter)
            self.table.unsubscribe(session.client_id, actual, group)
        session.subscriptions.clear()
        session.outbound.clear()
        if self.sessions.get(session.client_id) is session:
            del self.sessions[session.client_id]
        pending = self.pending_wills.pop(session.client_id, None)
        if pending is not None:
            self._publish_will(pending.will, pending.info, now)
        if session.persistent:
            self.hooks.session_deleted(session.client_id)

    def record(self, session: Session) -> SessionRecord:
        pending = self.pending_wills.get(session.client_id)
        will = session.will if pending is None else pending.will
        return SessionRecord(
            session.client_id, session.protocol_level, session.expiry_interval,
            dict(session.subscriptions), will,
            (will.properties.will_delay_interval or 0) if will else 0,
            session.disconnected_at,
        )

    # -- wills -------------------------------------------------------------------------

    def _schedule_will(self, session: Session, conn: Connection, now: float) -> None:
        will = session.will
        assert will is not None
        delay = will.properties.will_delay_interval or 0
        if delay == 0 or session.expiry_interval == 0:
            self._publish_will(will, conn, now)
        else:
            self.pending_wills[session.client_id] = _PendingWill(
                now + min(delay, session.expiry_interval), will, ClientIdentity.of(conn)
            )

    def topic_over_limits(self, topic: str, info: ClientInfo, what: str) -> bool:
        """True when a client's topic or filter is longer or deeper than `[limits]` allow.

        Counted in `topic_limited` and logged (`topic_refused`); in-process links are exempt:
        their topics come from the configuration.
        """
        if not topic_over_limits(topic, self.limits, info.listener in INTERNAL_LISTENERS):
            return False
        self.topic_refused(topic, info, what)
        return True

    def _publish_will(self, will: Will, info: ClientInfo, now: float) -> None:
        if self.topic_over_limits(will.topic, info, "will"):
            return
        if not self.hooks.check_acl(info, will.topic, Access.WRITE):
            self.count_denied()
            return
        props = replace(will.properties, will_delay_interval=None)
        expiry = props.message_expiry_interval
        message = Message(
            will.topic, will.payload, will.qos, will.retain, props,
            None if expiry is None else now + expiry, info.client_id,
        )
        self.publish(message, now, info)

    def publish(self, message: Message, now: float, origin: ClientInfo | None = None) -> int:
        """Accept a message from any producer (client, will, link, $SYS) and route it."""
        self.counters.received += 1
        if message.retain:
            if origin is not None and not self.retained.has_room(message):
                self.retained_full(message)
            elif self.retained.set(message):
                self.hooks.retained_changed(message.topic, message if message.payload else None)
        self.hooks.published(origin, message)
        return self.dispatch.route(message, now)

    # -- what the handlers and the I/O layer count ----------------------------------------

    @property
    def network_clients(self) -> int:
        """Connected clients, the in-process links not included (limits.max_connections)."""
        return self.clients_connected - self.links_connected

    def client_connected(self, conn: Connection) -> None:
        """`conn` completed its CONNECT (undone in `connection_lost`)."""
        self.clients_connected += 1
        self.links_connected += conn.listener in INTERNAL_LISTENERS
        self.clients_maximum = max(self.clients_maximum, self.clients_connected)

    def count_bytes_received(self, size: int) -> None:
        """Bytes read from a client socket (`$SYS/broker/bytes/received`)."""
        self.sys.bytes_received += size

    def count_bytes_sent(self, size: int) -> None:
        """Bytes written to a client socket (`$SYS/broker/bytes/sent`)."""
        self.sys.bytes_sent += size

    # Admission (gateway/broker/net/admission.py) refuses or delays before the broker sees a
    # CONNECT; the counts are the broker's, for `$SYS` and the status page.

    def count_refused_rate(self) -> None:
        """A socket closed: its source connects too fast (limits.connection_rate)."""
        self.counters.refused_rate += 1

    def count_refused_source(self) -> None:
        """A socket closed: too many connections from its source address."""
        self.counters.refused_source += 1

    def count_refused_pending(self) -> None:
        """A socket or CONNECT closed: too many connections or password checks are waiting."""
        self.counters.refused_pending += 1

    def count_evicted_pending(self) -> int:
        """The oldest connection of the busiest address was closed before its CONNECT to make
        room for a newcomer; returns how many so far."""
        self.counters.evicted_pending += 1
        return self.counters.evicted_pending

    def count_auth_delayed(self) -> None:
        """A CONNECT held back after recent failed logins from its source."""
        self.counters.auth_delayed += 1

    def count_auth_failed(self) -> None:
        """A CONNECT whose credentials were refused."""
        self.counters.auth_failed += 1

    def count_tls_failed(self) -> None:
        """A TLS handshake that failed."""
        self.counters.tls_failed += 1

    def count_ws_refused(self) -> None:
        """A WebSocket upgrade request refused."""
        self.counters.ws_refused += 1

    def count_denied(self) -> None:
        """An access-control hook refused a publish, subscription or will."""
        self.counters.denied += 1

    def count_refused_busy(self, conn: Connection) -> None:
        """A CONNECT refused because limits.max_connections clients are connected."""
        self.counters.refused_busy += 1
        count = self.counters.refused_busy
        if worth_logging(count, every=100):
            log.warning(
                "refused %s from %s: %d clients connected (limits.max_connections; %d refused "
                "so far)", clip(conn.client_id), conn.peer, self.limits.max_connections, count,
            )

    def count_store_full(self) -> None:
        """A QoS 1/2 PUBLISH refused because the durable store cannot take more."""
        self.counters.store_full += 1
        count = self.counters.store_full
        if worth_logging(count, every=1000, first=1):
            log.error(
                "store full (size cap or disk headroom): refused %d QoS 1/2 message(s) so far",
                count,
            )

    def count_subscription_limited(self, session: Session, topic_filter: str) -> None:
        """A filter refused because the session has limits.max_subscriptions_per_client."""
        self.counters.subscriptions_limited += 1
        count = self.counters.subscriptions_limited
        if worth_logging(count, every=1000):
            log.warning("refused subscription %r of %s: it has %d, the limit "
                        "(limits.max_subscriptions_per_client); %d refused so far",
                        clip(topic_filter), clip(session.client_id), len(session.subscriptions),
                        count)

    def topic_refused(self, topic: str, info: ClientInfo, what: str) -> None:
        """Count and log a topic refused for its length or depth (the first ten, then every
        thousandth)."""
        self.counters.topic_limited += 1
        count = self.counters.topic_limited
        if worth_logging(count, every=1000):
            size, levels = topic_size(topic)
            limits = self.limits
            log.warning(
                "refused the %s topic of %s from %s: %d bytes / %d levels is over the limit "
                "(%d bytes, %d levels; %d refused so far)", what, clip(info.client_id), info.peer,
                size, levels, limits.max_topic_length, limits.max_topic_levels, count,
            )

    def retained_full(self, message: Message) -> None:
        """Count and log a retained message the store has no room for (not retained)."""
        self.counters.retained_refused += 1
        count = self.counters.retained_refused
        if worth_logging(count, every=1000):
            log.warning(
                "retained store full (%d messages, %d bytes; limits.max_retained_messages / "
                "max_retained_bytes): not retaining %r from %s (%d refused so far)",
                self.retained.count, self.retained.bytes, message.topic, message.origin, count,
            )

    # -- SUBSCRIBE / UNSUBSCRIBE -------------------------------------------------------

    # -- periodic duties ---------------------------------------------------------------

    def tick(self, now: float) -> None:
        """Flow-control stalls, keepalive and connect timeouts, delayed wills, session expiry,
        `$SYS`."""
        self.dispatch.flow.check_stalls(now)
        timeout = self.limits.connect_timeout
        for waiting in list(self.connecting):
            if not waiting.closed and now - waiting.opened_at > timeout:
                self.counters.refused_timeout += 1
                count = self.counters.refused_timeout
                if worth_logging(count, every=100):
                    log.info("no CONNECT from %s within %g s: closing "
                             "(limits.connect_timeout; %d so far)", waiting.peer, timeout, count)
                waiting.sink.close()
                waiting.closed = True
        for client_id, pending in list(self.pending_wills.items()):
            if now >= pending.due:
                del self.pending_wills[client_id]
                self._publish_will(pending.will, pending.info, now)
        for session in list(self.sessions.values()):
            conn = session.connection
            if conn is None:
                expires = session.expires_at()
                if expires is not None and now >= expires:
                    self.end_session(session, now)
            elif (not conn.closed and conn.keep_alive
                  and now - conn.last_seen > conn.keep_alive * 1.5
                  and not conn.paused):  # a paused client's PINGREQ waits unread
                self.protocol_error(conn, ReasonCode.KEEP_ALIVE_TIMEOUT, "keep alive timeout")
        for message in self.sys.due(self, now):
            self.publish(message, now)

    def online_sessions(self) -> Iterable[Session]:
        """Sessions with a live connection."""
        return (s for s in self.sessions.values() if s.online)
