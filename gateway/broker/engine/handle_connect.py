"""CONNECT and DISCONNECT: refusals, client identifiers, session takeover and resumption.

How this works: `on_connect` asks `connect_refusal` (gateway/broker/engine/refusals.py, pure)
whether the packet itself is refused (identifier, authentication method, too many clients,
3.1.x keep alive), then the hooks (credentials, the will's topic and write access). `accept`
grants the keep alive and v5 limits, takes over or resumes the session through the broker,
answers CONNACK with the limits we impose, then resends what was in flight and pumps the
queue. Functions take the broker as `BrokerApi`; like the broker they are pure and synchronous.
"""

from __future__ import annotations

import logging
import uuid

from gateway.broker.codec import encode
from gateway.broker.codec.packets import (
    MQTT_3_1,
    NO_PROPERTIES,
    ConnAck,
    Connect,
    Disconnect,
    Properties,
)
from gateway.broker.codec.reason_codes import ReasonCode, v3_connack_code
from gateway.broker.contracts.auth import source_of
from gateway.broker.contracts.hooks import INTERNAL_LISTENERS, Access
from gateway.broker.core.log_sampling import clip, worth_logging
from gateway.broker.core.session import NEVER_EXPIRES, Connection, TopicAliases
from gateway.broker.engine.broker_api import BrokerApi
from gateway.broker.engine.refusals import connect_refusal, keep_alive_over_limit

log = logging.getLogger("outpost.broker")


def on_connect(broker: BrokerApi, conn: Connection, packet: Connect, now: float) -> None:
    """Handle CONNECT: refuse, or take over / resume the session and answer CONNACK."""
    conn.version = packet.protocol_level
    # connected since the CONNECT (was: since the socket opened; the connect timeout is over):
    # the same float object as `last_seen`, so an idle client keeps one time, not two
    conn.opened_at = now
    client_id = packet.client_id
    assigned: str | None = None
    if not client_id and packet.protocol_level != MQTT_3_1 and (conn.is_v5 or packet.clean_start):
        client_id = assigned = "auto-" + uuid.uuid4().hex
    conn.client_id = client_id
    conn.username = packet.username
    holder = broker.sessions.get(client_id)
    held_by_link = (holder is not None and holder.connection is not None
                    and holder.connection.listener in INTERNAL_LISTENERS)
    refusal = connect_refusal(packet, broker.limits, broker.network_clients,
                              conn.listener in INTERNAL_LISTENERS, held_by_link)
    if refusal is not None:
        if refusal.reason == ReasonCode.SERVER_BUSY:
            broker.count_refused_busy(conn)
        refuse(broker, conn, refusal.reason)
        return
    reason = _hooks_refusal(broker, conn, packet)
    if reason is not None:
        refuse(broker, conn, reason)
        return
    accept(broker, conn, packet, assigned, now)


def _hooks_refusal(broker: BrokerApi, conn: Connection, packet: Connect) -> int | None:
    """What the hooks refuse a CONNECT for: its credentials, or a will it may not publish."""
    reason = broker.hooks.authenticate(conn, packet.password)
    if reason != ReasonCode.SUCCESS:
        return reason
    will = packet.will
    if will is None:
        return None
    if broker.topic_over_limits(will.topic, conn, "will"):
        return ReasonCode.TOPIC_NAME_INVALID
    if not broker.hooks.check_acl(conn, will.topic, Access.WRITE):
        # A will the client may not publish refuses the connection: the client learns it now,
        # and the will is never stored (nor published after a restart as "restored").
        broker.count_denied()
        return ReasonCode.NOT_AUTHORIZED
    return None


def accept(
    broker: BrokerApi, conn: Connection, packet: Connect, assigned: str | None, now: float
) -> None:
    """Take over or resume the session, answer CONNACK, resend what was in flight."""
    props = packet.properties
    v5 = conn.is_v5
    keep_alive = packet.keep_alive
    server_keep_alive: int | None = None
    if v5 and keep_alive_over_limit(keep_alive, broker.limits):
        keep_alive = server_keep_alive = broker.limits.max_keepalive
    conn.keep_alive = keep_alive
    if v5:
        conn.client_receive_maximum = props.receive_maximum or 65535
        conn.client_max_packet_size = props.maximum_packet_size or 268_435_460
        if props.topic_alias_maximum:
            conn.aliases = TopicAliases(props.topic_alias_maximum)
        conn.request_problem_information = props.request_problem_information != 0
        expiry = min(props.session_expiry_interval or 0, broker.limits.max_session_expiry)
    else:
        expiry = 0 if packet.clean_start else NEVER_EXPIRES
    if (expiry and broker.gated_acks and conn.client_id not in broker.sessions
            and not broker.hooks.accepting()):
        # A new persistent session the full store cannot take: say so (0x97; 3.1.1: 3)
        # rather than leave the client without a CONNACK. Existing sessions still resume,
        # so their queues can drain.
        refuse(broker, conn, ReasonCode.QUOTA_EXCEEDED)
        return
    session, present = broker.take_session(conn, packet, expiry, now)
    session.will = packet.will
    conn.session = session
    broker.client_connected(conn)
    connack_props = NO_PROPERTIES
    if v5:
        requested_expiry = props.session_expiry_interval or 0
        connack_props = Properties(
            session_expiry_interval=expiry if expiry != requested_expiry else None,
            assigned_client_identifier=assigned,
            server_keep_alive=server_keep_alive,
            receive_maximum=broker.limits.receive_maximum,
            topic_alias_maximum=broker.limits.topic_alias_maximum or None,
            maximum_packet_size=broker.limits.max_packet_size,
        )
    if session.persistent:
        broker.hooks.session_saved(broker.record(session))
    # A persistent session is promised by CONNACK: the store must have it first.
    conn.sink.write(
        encode(ConnAck(present, ReasonCode.SUCCESS, connack_props), conn.version),
        broker.gated_acks and session.persistent,
    )
    broker.dispatch.resend_inflight(session, now)
    broker.dispatch.pump(session, now)


def refuse(broker: BrokerApi, conn: Connection, reason: int, why: str = "") -> None:
    """Answer CONNECT with a refusal and close (`why`: more words for the log line)."""
    count = broker.refusals_by_source.add(source_of(conn.peer))
    if worth_logging(count, every=100):
        log.info("refused %s from %s: reason 0x%02X%s (%d from there so far)",
                 clip(conn.client_id), conn.peer, reason, f", {clip(why, 200)}" if why else "",
                 count)
    code = reason if conn.is_v5 else v3_connack_code(reason)
    conn.sink.write(encode(ConnAck(False, code), conn.version))
    conn.sink.close()
    conn.closed = True


def on_disconnect(broker: BrokerApi, conn: Connection, packet: Disconnect) -> None:
    """Handle DISCONNECT: maybe a new session expiry; the will is kept only for 0x04."""
    session = conn.session
    assert session is not None
    new_expiry = packet.properties.session_expiry_interval
    if new_expiry is not None:
        if session.expiry_interval == 0 and new_expiry != 0:
            broker.protocol_error(
                conn, ReasonCode.PROTOCOL_ERROR, "session expiry set after CONNECT with 0"
            )
            return
        session.expiry_interval = min(new_expiry, broker.limits.max_session_expiry)
    conn.will_suppressed = packet.reason_code != ReasonCode.DISCONNECT_WITH_WILL
    conn.sink.close()
    conn.closed = True
