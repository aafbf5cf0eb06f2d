"""CONNECT and DISCONNECT: refusals, client identifiers, session takeover and resumption.

How this works: `on_connect` validates what the client asks for (identifier, keep alive, v5
limits, authentication through the hooks), takes over or resumes the session, answers CONNACK
with the limits we impose, then resends what was in flight and pumps the queue. Functions take
the `Broker` whose state they change; like the broker they are pure and synchronous.
"""

from __future__ import annotations

import logging
import uuid
from typing import TYPE_CHECKING

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
from gateway.broker.core.session import NEVER_EXPIRES, ClientInfo, Connection, Session

if TYPE_CHECKING:
    from gateway.broker.engine.broker import Broker

log = logging.getLogger("outpost.broker")


def on_connect(broker: Broker, conn: Connection, packet: Connect, now: float) -> None:
    """Handle CONNECT: refuse, or take over / resume the session and answer CONNACK."""
    conn.version = packet.protocol_level
    props = packet.properties
    v5 = conn.is_v5
    client_id = packet.client_id
    assigned: str | None = None
    refusal: int | None = None
    if not client_id:
        if packet.protocol_level == MQTT_3_1 or (not v5 and not packet.clean_start):
            refusal = ReasonCode.CLIENT_IDENTIFIER_NOT_VALID
        else:
            client_id = assigned = "auto-" + uuid.uuid4().hex
    elif len(client_id) > broker.limits.max_client_id_length:
        refusal = ReasonCode.CLIENT_IDENTIFIER_NOT_VALID
    conn.client_id = client_id
    conn.username = packet.username
    conn.info = ClientInfo(client_id, packet.username, conn.listener, conn.peer,
                           conn.anonymous_allowed)
    if refusal is None and props.authentication_method is not None:
        refusal = ReasonCode.BAD_AUTHENTICATION_METHOD
    # In-process links (bridge, uplink) are part of the gateway, not clients: they neither
    # count towards nor are refused by max_connections.
    internal = conn.listener in INTERNAL_LISTENERS
    if (refusal is None and not internal
            and broker.clients_connected - broker.links_connected >= broker.limits.max_connections):
        refusal = ReasonCode.SERVER_BUSY
        broker.counters.refused_busy += 1
        count = broker.counters.refused_busy
        if worth_logging(count, every=100):
            log.warning(
                "refused %s from %s: %d clients connected (limits.max_connections; %d refused "
                "so far)", clip(client_id), conn.peer, broker.limits.max_connections, count,
            )
    keep_alive = packet.keep_alive
    server_keep_alive: int | None = None
    max_keepalive = broker.limits.max_keepalive
    if max_keepalive and (keep_alive == 0 or keep_alive > max_keepalive):
        if v5:
            keep_alive = server_keep_alive = max_keepalive
        elif refusal is None:
            refusal = ReasonCode.CLIENT_IDENTIFIER_NOT_VALID
    if refusal is None:
        refusal = broker.hooks.authenticate(conn.info, packet.password)
        if refusal == ReasonCode.SUCCESS:
            refusal = None
    if refusal is None and packet.will is not None and broker.topic_over_limits(
        packet.will.topic, conn.info, "will"
    ):
        refusal = ReasonCode.TOPIC_NAME_INVALID
    if refusal is None and packet.will is not None and not broker.hooks.check_acl(
        conn.info, packet.will.topic, Access.WRITE
    ):
        # A will the client may not publish refuses the connection: the client learns it now,
        # and the will is never stored (nor published after a restart as "restored").
        broker.counters.denied += 1
        refusal = ReasonCode.NOT_AUTHORIZED
    if refusal is not None:
        refuse(broker, conn, refusal)
        return
    conn.keep_alive = keep_alive
    if v5:
        conn.client_receive_maximum = props.receive_maximum or 65535
        conn.client_max_packet_size = props.maximum_packet_size or 268_435_460
        conn.client_topic_alias_maximum = props.topic_alias_maximum or 0
        conn.request_problem_information = props.request_problem_information != 0
        expiry = min(props.session_expiry_interval or 0, broker.limits.max_session_expiry)
    else:
        expiry = 0 if packet.clean_start else NEVER_EXPIRES
    if (expiry and broker.gated_acks and client_id not in broker.sessions
            and not broker.hooks.accepting()):
        # A new persistent session the full store cannot take: say so (0x97; 3.1.1: 3)
        # rather than leave the client without a CONNACK. Existing sessions still resume,
        # so their queues can drain.
        refuse(broker, conn, ReasonCode.QUOTA_EXCEEDED)
        return
    session, present = take_session(broker, conn, client_id, packet, expiry, now)
    session.will = packet.will
    conn.session = session
    broker.clients_connected += 1
    broker.links_connected += internal
    broker.clients_maximum = max(broker.clients_maximum, broker.clients_connected)
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


def refuse(broker: Broker, conn: Connection, reason: int, why: str = "") -> None:
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


def take_session(
    broker: Broker, conn: Connection, client_id: str, packet: Connect, expiry: int, now: float
) -> tuple[Session, bool]:
    """Find, take over, discard (clean start) or create the session for `client_id`."""
    session = broker.sessions.get(client_id)
    if session is not None and session.connection is not None:
        old = session.connection
        broker.protocol_error(old, ReasonCode.SESSION_TAKEN_OVER, "session taken over")
        broker.connection_lost(old, now)
        session = broker.sessions.get(client_id)
    broker.pending_wills.pop(client_id, None)  # a new connection cancels a delayed will
    if session is not None and packet.clean_start:
        broker.end_session(session, now)
        session = None
    present = session is not None
    if session is None:
        session = Session(client_id, packet.protocol_level, broker.new_outbound())
        broker.sessions[client_id] = session
    session.protocol_level = packet.protocol_level
    session.expiry_interval = expiry
    session.connection = conn
    session.disconnected_at = None
    return session, present


def on_disconnect(broker: Broker, conn: Connection, packet: Disconnect) -> None:
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
