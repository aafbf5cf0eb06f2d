"""The broker core: packets and `now` in, bytes to sinks and hook events out.

How this works: the I/O layer creates a `Connection` per socket (or in-process link), passes
every decoded packet to `Broker.handle` together with the current monotonic time, reports lost
connections with `connection_lost`, and calls `tick` about once a second. The broker owns every
session, the subscription table and the retained store. Packet handling is one method per
incoming packet type (`_on_connect`, `_on_publish`, ...); routing and the delivery window live
in `gateway.delivery`, periodic duties (keepalive, connect timeout, will delay, session expiry,
`$SYS`) in `tick`. A protocol violation goes through one place, `protocol_error`, which sends a
v5 DISCONNECT with the reason code (3.1.x: just closes) and publishes the will.

Pure and synchronous: no awaits, no clock reads, no sockets.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, replace

from gateway.codec import encode
from gateway.codec.errors import MQTTProtocolError
from gateway.codec.packets import (
    MQTT_3_1,
    MQTT_5,
    NO_PROPERTIES,
    Auth,
    ConnAck,
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
    SubAck,
    Subscribe,
    UnsubAck,
    Unsubscribe,
    Will,
)
from gateway.codec.reason_codes import (
    ALLOWED_REASON_CODES,
    SUBACK_FAILURE_V3,
    ReasonCode,
    v3_connack_code,
)
from gateway.config import Config
from gateway.delivery import Dispatcher
from gateway.hooks import Access, BrokerHooks, RestoredState, SessionRecord
from gateway.inflight import Outbound
from gateway.message import V3_VERSIONS, Message
from gateway.retained import RetainedStore
from gateway.router import SubOptions, SubscriptionTable
from gateway.session import NEVER_EXPIRES, ClientInfo, Connection, Session, Sink
from gateway.sys_topics import SysPublisher
from gateway.topics import parse_shared

log = logging.getLogger("outpost.broker")
_CONNACK_CODES = ALLOWED_REASON_CODES["CONNACK"]


@dataclass(slots=True)
class _PendingWill:
    due: float
    will: Will
    info: ClientInfo


class Broker:
    """All broker state and the handlers of every incoming packet."""

    def __init__(self, config: Config, hooks: BrokerHooks | None = None, now: float = 0.0) -> None:
        self.config = config
        self.limits = config.limits
        self.hooks = hooks or BrokerHooks()
        self.sessions: dict[str, Session] = {}
        self.connections: set[Connection] = set()
        self.table = SubscriptionTable()
        self.retained = RetainedStore()
        self.dispatch = Dispatcher(self.sessions, self.table, self.hooks, self.limits)
        self.counters = self.dispatch.counters
        self.pending_wills: dict[str, _PendingWill] = {}
        self.sys = SysPublisher(config.sys.interval, now)
        self.started_at = now
        self.clients_connected = 0
        self.clients_maximum = 0
        self.gated_acks = self.hooks.durable

    def restore(self, state: RestoredState, now: float) -> None:
        """Rebuild sessions, queues, in-flight state and retained messages from a store."""
        for restored in state.sessions:
            record = restored.record
            session = Session(
                record.client_id, record.protocol_level, self._new_outbound(),
                record.expiry_interval, dict(record.subscriptions),
                awaiting_release=set(restored.awaiting_release),
                disconnected_at=now if record.disconnected_at is None else record.disconnected_at,
            )
            for topic_filter, options in record.subscriptions.items():
                group, actual = parse_shared(topic_filter)
                self.table.subscribe(record.client_id, actual, options, group)
            outbound = session.outbound
            for delivery in restored.deliveries:
                if delivery.packet_id:
                    delivery.sent = True  # resent with DUP on reconnect
                    outbound.inflight[delivery.packet_id] = delivery
                else:
                    outbound.queue.append(delivery)
                    outbound.queued_bytes += delivery.message.size
                outbound.last_seq = max(outbound.last_seq, delivery.store_seq)
            outbound.spilled = restored.spilled
            outbound.spilled_bytes = restored.spilled_bytes
            self.sessions[record.client_id] = session
            if record.will is not None:
                # The connection ended with the old process, without a DISCONNECT.
                info = ClientInfo(record.client_id, None, "restored", "restored")
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

    def _new_outbound(self) -> Outbound:
        limits = self.limits
        return Outbound(
            limits.max_queued_messages, limits.max_queued_bytes,
            limits.queue_overflow == "drop-oldest", self.config.storage.queue_page,
        )

    # -- connections -------------------------------------------------------------------

    def open_connection(
        self, sink: Sink, listener: str, peer: str, anonymous_allowed: bool, now: float
    ) -> Connection:
        """Register a new transport; the CONNECT is still to come."""
        conn = Connection(sink, listener, peer, anonymous_allowed, now, now)
        self.connections.add(conn)
        return conn

    def handle(self, conn: Connection, packet: Packet, now: float, raw: bytes = b"") -> None:
        """Process one decoded packet from `conn`. `raw` is its wire bytes (PUBLISH only)."""
        if conn.closed:
            return
        conn.last_seen = now
        if conn.version == 0 or conn.session is None:
            if isinstance(packet, Connect):
                self._on_connect(conn, packet, now)
            else:
                self.protocol_error(conn, ReasonCode.PROTOCOL_ERROR, "first packet must be CONNECT")
            return
        if isinstance(packet, Publish):
            self._on_publish(conn, packet, now, raw)
        elif isinstance(packet, PubAck):
            self._on_puback(conn, packet, now)
        elif isinstance(packet, PubRec):
            self._on_pubrec(conn, packet)
        elif isinstance(packet, PubRel):
            self._on_pubrel(conn, packet)
        elif isinstance(packet, PubComp):
            self._on_pubcomp(conn, packet, now)
        elif isinstance(packet, Subscribe):
            self._on_subscribe(conn, packet, now)
        elif isinstance(packet, Unsubscribe):
            self._on_unsubscribe(conn, packet)
        elif isinstance(packet, PingReq):
            conn.sink.write(encode(PingResp(), conn.version))
        elif isinstance(packet, Disconnect):
            self._on_disconnect(conn, packet)
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
        log.info(
            "closing %s (%s): %s (reason 0x%02X)", conn.client_id or conn.peer, conn.peer,
            message, reason,
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
        if conn.session is None and error.protocol_level == MQTT_5 and not conn.closed:
            # A v5 CONNECT that does not parse: a CONNACK carrying the reason, then close.
            log.info("bad CONNECT from %s: %s", conn.peer, error.reason)
            conn.version = MQTT_5
            code = error.reason_code
            self._refuse(conn, code if code in _CONNACK_CODES else ReasonCode.MALFORMED_PACKET)
            return
        self.protocol_error(conn, error.reason_code, error.reason)

    def connection_lost(self, conn: Connection, now: float) -> None:
        """The transport is gone: publish or schedule the will, keep or end the session."""
        self.connections.discard(conn)
        conn.closed = True
        session = conn.session
        if session is None or session.connection is not conn:
            return
        self.clients_connected -= 1
        session.connection = None
        session.disconnected_at = now
        if session.will is not None and not conn.will_suppressed:
            self._schedule_will(session, conn, now)
        session.will = None
        if session.expiry_interval == 0:
            self._end_session(session, now)
        else:
            self.hooks.session_saved(self._record(session))

    # -- CONNECT -----------------------------------------------------------------------

    def _on_connect(self, conn: Connection, packet: Connect, now: float) -> None:
        conn.version = packet.protocol_level
        props = packet.properties
        v5 = conn.is_v5
        client_id = packet.client_id
        assigned: str | None = None
        refuse: int | None = None
        if not client_id:
            if packet.protocol_level == MQTT_3_1 or (not v5 and not packet.clean_start):
                refuse = ReasonCode.CLIENT_IDENTIFIER_NOT_VALID
            else:
                client_id = assigned = "auto-" + uuid.uuid4().hex
        elif len(client_id) > self.limits.max_client_id_length:
            refuse = ReasonCode.CLIENT_IDENTIFIER_NOT_VALID
        conn.client_id = client_id
        conn.username = packet.username
        conn.info = ClientInfo(client_id, packet.username, conn.listener, conn.peer,
                               conn.anonymous_allowed)
        if refuse is None and props.authentication_method is not None:
            refuse = ReasonCode.BAD_AUTHENTICATION_METHOD
        if refuse is None and self.clients_connected >= self.limits.max_connections:
            refuse = ReasonCode.SERVER_BUSY
        keep_alive = packet.keep_alive
        server_keep_alive: int | None = None
        max_keepalive = self.limits.max_keepalive
        if max_keepalive and (keep_alive == 0 or keep_alive > max_keepalive):
            if v5:
                keep_alive = server_keep_alive = max_keepalive
            elif refuse is None:
                refuse = ReasonCode.CLIENT_IDENTIFIER_NOT_VALID
        if refuse is None:
            refuse = self.hooks.authenticate(conn.info, packet.password)
            if refuse == ReasonCode.SUCCESS:
                refuse = None
        if refuse is not None:
            self._refuse(conn, refuse)
            return
        conn.keep_alive = keep_alive
        if v5:
            conn.client_receive_maximum = props.receive_maximum or 65535
            conn.client_max_packet_size = props.maximum_packet_size or 268_435_460
            conn.client_topic_alias_maximum = props.topic_alias_maximum or 0
            conn.request_problem_information = props.request_problem_information != 0
            expiry = min(props.session_expiry_interval or 0, self.limits.max_session_expiry)
        else:
            expiry = 0 if packet.clean_start else NEVER_EXPIRES
        session, present = self._take_session(conn, client_id, packet, expiry, now)
        session.will = packet.will
        conn.session = session
        self.clients_connected += 1
        self.clients_maximum = max(self.clients_maximum, self.clients_connected)
        connack_props = NO_PROPERTIES
        if v5:
            requested_expiry = props.session_expiry_interval or 0
            connack_props = Properties(
                session_expiry_interval=expiry if expiry != requested_expiry else None,
                assigned_client_identifier=assigned,
                server_keep_alive=server_keep_alive,
                receive_maximum=self.limits.receive_maximum,
                topic_alias_maximum=self.limits.topic_alias_maximum or None,
                maximum_packet_size=self.limits.max_packet_size,
            )
        conn.sink.write(encode(ConnAck(present, ReasonCode.SUCCESS, connack_props), conn.version))
        if session.persistent:
            self.hooks.session_saved(self._record(session))
        self.dispatch.resend_inflight(session, now)
        self.dispatch.pump(session, now)

    def _refuse(self, conn: Connection, reason: int) -> None:
        log.info("refused %s from %s: reason 0x%02X", conn.client_id, conn.peer, reason)
        code = reason if conn.is_v5 else v3_connack_code(reason)
        conn.sink.write(encode(ConnAck(False, code), conn.version))
        conn.sink.close()
        conn.closed = True

    def _take_session(
        self, conn: Connection, client_id: str, packet: Connect, expiry: int, now: float
    ) -> tuple[Session, bool]:
        session = self.sessions.get(client_id)
        if session is not None and session.connection is not None:
            old = session.connection
            self.protocol_error(old, ReasonCode.SESSION_TAKEN_OVER, "session taken over")
            self.connection_lost(old, now)
            session = self.sessions.get(client_id)
        self.pending_wills.pop(client_id, None)  # a new connection cancels a delayed will
        if session is not None and packet.clean_start:
            self._end_session(session, now)
            session = None
        present = session is not None
        if session is None:
            session = Session(client_id, packet.protocol_level, self._new_outbound())
            self.sessions[client_id] = session
        session.protocol_level = packet.protocol_level
        session.expiry_interval = expiry
        session.connection = conn
        session.disconnected_at = None
        return session, present

    def _end_session(self, session: Session, now: float) -> None:
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

    def _record(self, session: Session) -> SessionRecord:
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
        assert will is not None and conn.info is not None
        delay = will.properties.will_delay_interval or 0
        if delay == 0 or session.expiry_interval == 0:
            self._publish_will(will, conn.info, now)
        else:
            self.pending_wills[session.client_id] = _PendingWill(
                now + min(delay, session.expiry_interval), will, conn.info
            )

    def _publish_will(self, will: Will, info: ClientInfo, now: float) -> None:
        if not self.hooks.check_acl(info, will.topic, Access.WRITE):
            self.counters.denied += 1
            return
        props = replace(will.properties, will_delay_interval=None)
        expiry = props.message_expiry_interval
        message = Message(
            will.topic, will.payload, will.qos, will.retain, props,
            None if expiry is None else now + expiry, info.client_id,
        )
        self.publish(message, now, info)

    # -- PUBLISH -----------------------------------------------------------------------

    def _on_publish(self, conn: Connection, packet: Publish, now: float, raw: bytes) -> None:
        session = conn.session
        assert session is not None and conn.info is not None
        props = packet.properties
        topic = packet.topic
        if conn.is_v5 and props is not NO_PROPERTIES:
            if props.subscription_identifiers:
                # [MQTT-3.3.4-6]: only the server puts subscription identifiers in PUBLISH.
                self.protocol_error(
                    conn, ReasonCode.PROTOCOL_ERROR, "subscription identifier in PUBLISH"
                )
                return
            alias = props.topic_alias
            if alias is not None:
                if alias > self.limits.topic_alias_maximum:
                    self.protocol_error(conn, ReasonCode.TOPIC_ALIAS_INVALID, "topic alias too big")
                    return
                if topic:
                    conn.aliases_in[alias] = topic
                else:
                    known = conn.aliases_in.get(alias)
                    if known is None:
                        self.protocol_error(conn, ReasonCode.PROTOCOL_ERROR, "unknown topic alias")
                        return
                    topic = known
                raw = b""  # the alias is per connection: never forward these bytes
            if props.payload_format_indicator == 1:
                try:
                    packet.payload.decode("utf-8")
                except UnicodeDecodeError:
                    self._refuse_publish(conn, packet, ReasonCode.PAYLOAD_FORMAT_INVALID)
                    return
        qos = packet.qos
        if qos == 2:
            if packet.packet_id in session.awaiting_release:
                conn.sink.write(encode(PubRec(packet.packet_id or 0), conn.version))
                return
            # Receive Maximum is a 5.0 promise; a 3.1.x client was never told of a limit
            # (its packet ids bound the set at 65535).
            if conn.is_v5 and len(session.awaiting_release) >= self.limits.receive_maximum:
                self.protocol_error(
                    conn, ReasonCode.RECEIVE_MAXIMUM_EXCEEDED, "receive maximum exceeded"
                )
                return
        if topic.startswith("$SYS") or not self.hooks.check_acl(conn.info, topic, Access.WRITE):
            # $SYS belongs to the broker and its in-process producers, never to clients.
            self.counters.denied += 1
            self._refuse_publish(conn, packet, ReasonCode.NOT_AUTHORIZED)
            return
        if props is not NO_PROPERTIES and (props.topic_alias is not None):
            props = replace(props, topic_alias=None)
        expiry = props.message_expiry_interval
        message = Message(
            topic, packet.payload, qos, packet.retain, props,
            None if expiry is None else now + expiry, conn.client_id,
        )
        if qos == 0 and raw:
            message.seed_raw(raw, V3_VERSIONS if not conn.is_v5 else (MQTT_5,))
        elif qos and self.gated_acks and not self.hooks.accepting():
            self._store_full(conn, packet)
            return
        self.publish(message, now, conn.info)
        if not qos:
            return
        pid = packet.packet_id or 0
        if self.dispatch.rejected and conn.is_v5 and self.limits.queue_overflow == "reject":
            self._refuse_publish(conn, packet, ReasonCode.QUOTA_EXCEEDED)
        elif qos == 1:
            conn.sink.write(encode(PubAck(pid), conn.version), self.gated_acks)
        else:
            session.awaiting_release.add(pid)
            if session.persistent:
                self.hooks.qos2_received(session.client_id, pid)
            conn.sink.write(encode(PubRec(pid), conn.version), self.gated_acks)

    def _store_full(self, conn: Connection, packet: Publish) -> None:
        """The durable store cannot take more: never acknowledge what was not stored."""
        self.counters.store_full += 1
        if self.counters.store_full == 1 or self.counters.store_full % 1000 == 0:
            log.error(
                "store full (size cap or disk headroom): refused %d QoS 1/2 message(s) so far",
                self.counters.store_full,
            )
        if conn.is_v5:
            self._refuse_publish(conn, packet, ReasonCode.QUOTA_EXCEEDED)
        else:
            # 3.1.x has no way to say "not stored": close unacknowledged; the client resends.
            conn.sink.close()
            conn.closed = True

    def _refuse_publish(self, conn: Connection, packet: Publish, reason: int) -> None:
        """Answer a PUBLISH that is not accepted (v5 reason code; 3.1.x: acked and dropped)."""
        pid = packet.packet_id or 0
        code = reason if conn.is_v5 else 0
        if packet.qos == 1:
            conn.sink.write(encode(PubAck(pid, code), conn.version))
        elif packet.qos == 2:
            if conn.is_v5:
                conn.sink.write(encode(PubRec(pid, code), conn.version))
            else:
                assert conn.session is not None
                conn.session.awaiting_release.add(pid)
                conn.sink.write(encode(PubRec(pid), conn.version))
        elif reason == ReasonCode.PAYLOAD_FORMAT_INVALID:
            self.protocol_error(conn, reason, "payload is not valid UTF-8")

    def publish(self, message: Message, now: float, origin: ClientInfo | None = None) -> int:
        """Accept a message from any producer (client, will, link, $SYS) and route it."""
        self.counters.received += 1
        if message.retain and self.retained.set(message):
            self.hooks.retained_changed(message.topic, message if message.payload else None)
        self.hooks.published(origin, message)
        return self.dispatch.route(message, now)

    # -- acknowledgements --------------------------------------------------------------

    def _on_puback(self, conn: Connection, packet: PubAck, now: float) -> None:
        session = conn.session
        assert session is not None
        delivery = session.outbound.acknowledge(packet.packet_id, 1)
        if delivery is not None:
            if session.persistent:
                self.hooks.qos_completed(session.client_id, delivery)
            self.dispatch.pump(session, now)

    def _on_pubrec(self, conn: Connection, packet: PubRec) -> None:
        session = conn.session
        assert session is not None
        if packet.reason_code >= 0x80:
            delivery = session.outbound.drop_inflight(packet.packet_id)
            if delivery is not None and session.persistent:
                self.hooks.qos_completed(session.client_id, delivery)
            return
        delivery = session.outbound.received(packet.packet_id)
        if delivery is None:
            code = ReasonCode.PACKET_IDENTIFIER_NOT_FOUND if conn.is_v5 else 0
            conn.sink.write(encode(PubRel(packet.packet_id, code), conn.version))
            return
        if session.persistent:
            self.hooks.qos_updated(session.client_id, delivery)
        conn.sink.write(encode(PubRel(packet.packet_id), conn.version))

    def _on_pubrel(self, conn: Connection, packet: PubRel) -> None:
        session = conn.session
        assert session is not None
        code = 0
        if packet.packet_id in session.awaiting_release:
            session.awaiting_release.discard(packet.packet_id)
            if session.persistent:
                self.hooks.qos2_released(session.client_id, packet.packet_id)
        elif conn.is_v5:
            code = ReasonCode.PACKET_IDENTIFIER_NOT_FOUND
        conn.sink.write(encode(PubComp(packet.packet_id, code), conn.version))

    def _on_pubcomp(self, conn: Connection, packet: PubComp, now: float) -> None:
        session = conn.session
        assert session is not None
        delivery = session.outbound.acknowledge(packet.packet_id, 2)
        if delivery is not None:
            if session.persistent:
                self.hooks.qos_completed(session.client_id, delivery)
            self.dispatch.pump(session, now)

    # -- SUBSCRIBE / UNSUBSCRIBE -------------------------------------------------------

    def _on_subscribe(self, conn: Connection, packet: Subscribe, now: float) -> None:
        session = conn.session
        assert session is not None and conn.info is not None
        sub_id = packet.properties.subscription_identifiers
        subscription_id = sub_id[0] if sub_id else None
        codes: list[int] = []
        retained_work: list[tuple[str, int, SubOptions]] = []
        for sub in packet.subscriptions:
            if not self.hooks.check_acl(conn.info, sub.topic_filter, Access.SUBSCRIBE):
                self.counters.denied += 1
                codes.append(ReasonCode.NOT_AUTHORIZED if conn.is_v5 else SUBACK_FAILURE_V3)
                continue
            group, actual = parse_shared(sub.topic_filter)
            options = SubOptions(
                sub.qos, sub.no_local, sub.retain_as_published, sub.retain_handling,
                subscription_id,
            )
            existed = self.table.subscribe(session.client_id, actual, options, group)
            session.subscriptions[sub.topic_filter] = options
            codes.append(sub.qos)
            if group is None and (
                sub.retain_handling == 0 or (sub.retain_handling == 1 and not existed)
            ):
                retained_work.append((actual, sub.qos, options))
        conn.sink.write(encode(SubAck(packet.packet_id, codes), conn.version))
        if session.persistent:
            self.hooks.session_saved(self._record(session))
        for actual, granted, options in retained_work:
            self._send_retained(session, actual, granted, options, now)

    def _send_retained(
        self, session: Session, topic_filter: str, granted: int, options: SubOptions, now: float
    ) -> None:
        conn = session.connection
        assert conn is not None and conn.info is not None
        sub_ids = (options.subscription_id,) if options.subscription_id else ()
        for message in self.retained.match(topic_filter, now):
            if self.dispatch.check_read and not self.hooks.check_acl(
                conn.info, message.topic, Access.READ
            ):
                continue
            self.dispatch.deliver(
                session, message, min(granted, message.qos), True, sub_ids, now, unbounded=True
            )

    def _on_unsubscribe(self, conn: Connection, packet: Unsubscribe) -> None:
        session = conn.session
        assert session is not None
        codes: list[int] = []
        for topic_filter in packet.topic_filters:
            group, actual = parse_shared(topic_filter)
            removed = self.table.unsubscribe(session.client_id, actual, group)
            session.subscriptions.pop(topic_filter, None)
            codes.append(ReasonCode.SUCCESS if removed else ReasonCode.NO_SUBSCRIPTION_EXISTED)
        conn.sink.write(encode(UnsubAck(packet.packet_id, codes), conn.version))
        if session.persistent:
            self.hooks.session_saved(self._record(session))

    # -- DISCONNECT --------------------------------------------------------------------

    def _on_disconnect(self, conn: Connection, packet: Disconnect) -> None:
        session = conn.session
        assert session is not None
        new_expiry = packet.properties.session_expiry_interval
        if new_expiry is not None:
            if session.expiry_interval == 0 and new_expiry != 0:
                self.protocol_error(
                    conn, ReasonCode.PROTOCOL_ERROR, "session expiry set after CONNECT with 0"
                )
                return
            session.expiry_interval = min(new_expiry, self.limits.max_session_expiry)
        conn.will_suppressed = packet.reason_code != ReasonCode.DISCONNECT_WITH_WILL
        conn.sink.close()
        conn.closed = True

    # -- periodic duties ---------------------------------------------------------------

    def tick(self, now: float) -> None:
        """Keepalive and connect timeouts, delayed wills, session expiry, `$SYS`."""
        timeout = self.limits.connect_timeout
        for conn in list(self.connections):
            if conn.closed:
                continue
            if conn.session is None:
                if now - conn.opened_at > timeout:
                    log.info("no CONNECT from %s within %.0f s: closing", conn.peer, timeout)
                    conn.sink.close()
                    conn.closed = True
            elif conn.keep_alive and now - conn.last_seen > conn.keep_alive * 1.5:
                self.protocol_error(conn, ReasonCode.KEEP_ALIVE_TIMEOUT, "keep alive timeout")
        for client_id, pending in list(self.pending_wills.items()):
            if now >= pending.due:
                del self.pending_wills[client_id]
                self._publish_will(pending.will, pending.info, now)
        for session in list(self.sessions.values()):
            expires = session.expires_at()
            if expires is not None and now >= expires and not session.online:
                self._end_session(session, now)
        for message in self.sys.due(self, now):
            self.publish(message, now)

    def online_sessions(self) -> Iterable[Session]:
        """Sessions with a live connection."""
        return (s for s in self.sessions.values() if s.online)
