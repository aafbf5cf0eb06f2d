"""PUBLISH from clients and the four QoS acknowledgements in both directions.

How this works: `on_publish` resolves the topic alias and asks `publish_refusal`
(gateway/broker/engine/refusals.py, pure) whether the packet is refused (properties, payload
format, receive maximum, topic limits, `$SYS`); a protocol error closes, another refusal is
answered per QoS; then the ACL hook decides write access. `accept` refuses what the durable
store cannot take (and, from v5 publishers, retained messages over the retained limits),
builds the `Message` (seeding it with the raw bytes the server kept for a QoS 0 message that
is not retained), answers PUBACK / PUBREC — gated on the store flush when the hooks are
durable — routes it through the broker and pauses the publisher when flow control says so
(engine/flow_control.py). The ack handlers move deliveries through the session window and
report stored state changes to the hooks. Pure and synchronous.
"""

from __future__ import annotations

from dataclasses import replace

from gateway.broker.codec import encode
from gateway.broker.codec.acks import PUBACK_FIRST, short_ack
from gateway.broker.codec.packets import (
    MQTT_5,
    NO_PROPERTIES,
    PubAck,
    PubComp,
    Publish,
    PubRec,
    PubRel,
)
from gateway.broker.codec.reason_codes import ReasonCode
from gateway.broker.contracts.hooks import INTERNAL_LISTENERS, Access
from gateway.broker.core.message import V3_VERSIONS, Message
from gateway.broker.core.session import Connection, TopicAliases
from gateway.broker.engine.broker_api import BrokerApi
from gateway.broker.engine.refusals import publish_refusal, publish_topic


def on_publish(broker: BrokerApi, conn: Connection, packet: Publish, now: float, raw: bytes
               ) -> None:
    """Handle a PUBLISH from a client: refuse it, answer a resend, or accept it."""
    session = conn.session
    assert session is not None
    aliases = conn.aliases
    props = packet.properties
    if props is NO_PROPERTIES:  # no topic alias: the topic is the packet's (once per publish)
        topic: str | None = packet.topic
    else:
        topic = publish_topic(packet, aliases.incoming if aliases is not None else None)
    refusal = publish_refusal(packet, topic, conn.version == MQTT_5, session.awaiting_release,
                              conn.incoming_inflight, broker.limits,
                              conn.listener in INTERNAL_LISTENERS)
    if refusal is not None and refusal.disconnect:
        broker.protocol_error(conn, refusal.reason, refusal.why)
        return
    alias = props.topic_alias
    if alias is not None:
        if packet.topic:
            if aliases is None:
                aliases = conn.aliases = TopicAliases()
            aliases.incoming[alias] = packet.topic
        raw = b""  # the alias is per connection: never forward these bytes
    assert topic is not None
    if refusal is not None:
        if refusal.reason == ReasonCode.TOPIC_NAME_INVALID:
            broker.topic_refused(topic, conn, "PUBLISH")
        elif refusal.reason == ReasonCode.NOT_AUTHORIZED:
            broker.count_denied()
        refuse_publish(broker, conn, packet, refusal.reason)
        return
    if packet.qos == 2 and packet.packet_id in session.awaiting_release:
        # A resend of a QoS 2 message not yet released: answered again, not delivered again.
        conn.sink.write(encode(PubRec(packet.packet_id or 0), conn.version))
        return
    if not broker.hooks.check_acl(conn, topic, Access.WRITE):
        broker.count_denied()
        refuse_publish(broker, conn, packet, ReasonCode.NOT_AUTHORIZED)
        return
    accept(broker, conn, packet, topic, now, raw)


def accept(broker: BrokerApi, conn: Connection, packet: Publish, topic: str, now: float,
           raw: bytes) -> None:
    """Route an accepted PUBLISH and acknowledge it (once stored, when the hooks are durable)."""
    session = conn.session
    assert session is not None
    props = packet.properties
    qos = packet.qos
    v5 = conn.version == MQTT_5
    if qos == 1:  # in flight until its PUBACK leaves the process (receive maximum)
        conn.incoming_inflight += 1
    if props is NO_PROPERTIES:
        expires_at = None
    else:
        if props.topic_alias is not None:
            props = replace(props, topic_alias=None)
        expiry = props.message_expiry_interval
        expires_at = None if expiry is None else now + expiry
    message = Message(topic, packet.payload, qos, packet.retain, props, expires_at,
                      conn.client_id)
    if qos == 0 and raw:
        message.seed_raw(raw, V3_VERSIONS if not v5 else (MQTT_5,))
    elif qos and broker.gated_acks and not broker.hooks.accepting():
        store_full(broker, conn, packet)
        return
    if qos and v5 and packet.retain and not broker.retained.has_room(message):
        # v5 can say "not accepted"; other publishers' messages are delivered, not retained.
        broker.retained_full(message)
        refuse_publish(broker, conn, packet, ReasonCode.QUOTA_EXCEEDED)
        return
    # The answer is written before the message is routed: a publisher subscribed to its own
    # topic then gets our PUBACK no later than its own copy (docs/storage.md), even when the
    # PUBACK waits for a commit. Only a v5 publisher under queue_overflow = "reject" is
    # answered after routing, which may refuse its message (0x97).
    answer_after_routing = v5 and broker.limits.queue_overflow == "reject"
    if qos == 1 and not answer_after_routing:
        # acknowledge()'s QoS 1 case, inline: this runs once per QoS 1 message
        conn.sink.write(short_ack(PUBACK_FIRST, packet.packet_id or 0), broker.gated_acks)
    elif qos and not answer_after_routing:
        acknowledge(broker, conn, packet)
    broker.publish(message, now, conn)
    flow = broker.dispatch.flow
    if flow.congested:
        flow.pause(conn, now)
    if qos and answer_after_routing:
        if broker.dispatch.rejected:
            refuse_publish(broker, conn, packet, ReasonCode.QUOTA_EXCEEDED)
        else:
            acknowledge(broker, conn, packet)


def acknowledge(broker: BrokerApi, conn: Connection, packet: Publish) -> None:
    """PUBACK / PUBREC an accepted QoS 1 / 2 PUBLISH (gated on the store's flush when the
    hooks are durable)."""
    session = conn.session
    assert session is not None
    pid = packet.packet_id or 0
    if packet.qos == 1:
        conn.sink.write(short_ack(PUBACK_FIRST, pid), broker.gated_acks)
    else:
        session.await_release(pid)
        if session.persistent:
            broker.hooks.qos2_received(session.client_id, pid)
        conn.sink.write(encode(PubRec(pid), conn.version), broker.gated_acks)


def store_full(broker: BrokerApi, conn: Connection, packet: Publish) -> None:
    """The durable store cannot take more: never acknowledge what was not stored."""
    broker.count_store_full()
    if conn.is_v5:
        refuse_publish(broker, conn, packet, ReasonCode.QUOTA_EXCEEDED)
    else:
        # 3.1.x has no way to say "not stored": close unacknowledged; the client resends.
        conn.sink.close()
        conn.closed = True


def refuse_publish(broker: BrokerApi, conn: Connection, packet: Publish, reason: int) -> None:
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
            conn.session.await_release(pid)
            conn.sink.write(encode(PubRec(pid), conn.version))
    elif reason == ReasonCode.PAYLOAD_FORMAT_INVALID:
        broker.protocol_error(conn, reason, "payload is not valid UTF-8")


def on_puback(broker: BrokerApi, conn: Connection, packet: PubAck, now: float) -> None:
    """PUBACK from a subscriber: the QoS 1 delivery is done."""
    _delivery_done(broker, conn, packet.packet_id, 1, now)


def _delivery_done(broker: BrokerApi, conn: Connection, packet_id: int, qos: int,
                   now: float) -> None:
    """The subscriber's last acknowledgement of a QoS `qos` delivery: forget it, send more."""
    session = conn.session
    assert session is not None
    delivery = session.outbound.acknowledge(packet_id, qos)
    if delivery is not None:
        if session.persistent:
            broker.hooks.qos_completed(session.client_id, delivery)
        broker.dispatch.pump(session, now)


def on_pubrec(broker: BrokerApi, conn: Connection, packet: PubRec) -> None:
    """PUBREC from a subscriber: answer PUBREL (or drop the delivery on a failure code)."""
    session = conn.session
    assert session is not None
    if packet.reason_code >= 0x80:
        delivery = session.outbound.drop_inflight(packet.packet_id)
        if delivery is not None and session.persistent:
            broker.hooks.qos_completed(session.client_id, delivery)
        return
    delivery = session.outbound.received(packet.packet_id)
    if delivery is None:
        code = ReasonCode.PACKET_IDENTIFIER_NOT_FOUND if conn.is_v5 else 0
        conn.sink.write(encode(PubRel(packet.packet_id, code), conn.version))
        return
    if session.persistent:
        broker.hooks.qos_updated(session.client_id, delivery)
    # Once PUBREL is out the subscriber may forget the id: after a crash the broker must
    # resend PUBREL, not the PUBLISH, so "PUBREC received" is stored first.
    conn.sink.write(
        encode(PubRel(packet.packet_id), conn.version), broker.gated_acks and session.persistent
    )


def on_pubrel(broker: BrokerApi, conn: Connection, packet: PubRel) -> None:
    """PUBREL from a publisher: forget its QoS 2 packet id and answer PUBCOMP."""
    session = conn.session
    assert session is not None
    code = 0
    if session.release(packet.packet_id):
        if session.persistent:
            broker.hooks.qos2_released(session.client_id, packet.packet_id)
    elif conn.is_v5:
        code = ReasonCode.PACKET_IDENTIFIER_NOT_FOUND
    # After PUBCOMP the publisher may reuse the id for a new message: the release is stored
    # first, or a restarted broker would drop that message as a duplicate.
    conn.sink.write(
        encode(PubComp(packet.packet_id, code), conn.version),
        broker.gated_acks and session.persistent,
    )


def on_pubcomp(broker: BrokerApi, conn: Connection, packet: PubComp, now: float) -> None:
    """PUBCOMP from a subscriber: the QoS 2 delivery is done."""
    _delivery_done(broker, conn, packet.packet_id, 2, now)
