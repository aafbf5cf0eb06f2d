"""SUBSCRIBE and UNSUBSCRIBE, and the retained messages a subscription receives.

How this works: each filter is checked against the ACL hook, added to the subscription table and
the session, and answered in one SUBACK; retained messages then follow per retain handling
(never for shared subscriptions), through the session's queue like any other delivery, so its
queue limit and overflow policy bound what a slow subscriber makes the broker buffer. Pure and
synchronous.
"""

from __future__ import annotations

from gateway.broker.codec import encode
from gateway.broker.codec.packets import (
    SubAck,
    Subscribe,
    UnsubAck,
    Unsubscribe,
)
from gateway.broker.codec.reason_codes import SUBACK_FAILURE_V3, ReasonCode
from gateway.broker.codec.topics import parse_shared
from gateway.broker.contracts.hooks import Access
from gateway.broker.core.router import SubOptions
from gateway.broker.core.session import Connection, Session
from gateway.broker.engine.broker_api import BrokerApi


def on_subscribe(broker: BrokerApi, conn: Connection, packet: Subscribe, now: float) -> None:
    """Handle SUBSCRIBE: ACL, table, SUBACK, then retained messages."""
    session = conn.session
    assert session is not None
    sub_id = packet.properties.subscription_identifiers
    subscription_id = sub_id[0] if sub_id else None
    codes: list[int] = []
    retained_work: list[tuple[str, int, SubOptions]] = []
    for sub in packet.subscriptions:
        if broker.topic_over_limits(sub.topic_filter, conn, "SUBSCRIBE"):
            codes.append(ReasonCode.TOPIC_FILTER_INVALID if conn.is_v5 else SUBACK_FAILURE_V3)
            continue
        if not broker.hooks.check_acl(conn, sub.topic_filter, Access.SUBSCRIBE):
            broker.count_denied()
            codes.append(ReasonCode.NOT_AUTHORIZED if conn.is_v5 else SUBACK_FAILURE_V3)
            continue
        if (sub.topic_filter not in session.subscriptions
                and len(session.subscriptions) >= broker.limits.max_subscriptions_per_client):
            broker.count_subscription_limited(session, sub.topic_filter)
            codes.append(ReasonCode.QUOTA_EXCEEDED if conn.is_v5 else SUBACK_FAILURE_V3)
            continue
        group, actual = parse_shared(sub.topic_filter)
        options = SubOptions(
            sub.qos, sub.no_local, sub.retain_as_published, sub.retain_handling,
            subscription_id,
        )
        existed = broker.table.subscribe(session.client_id, actual, options, group)
        session.subscribe(sub.topic_filter, options)
        codes.append(sub.qos)
        if group is None and (
            sub.retain_handling == 0 or (sub.retain_handling == 1 and not existed)
        ):
            retained_work.append((actual, sub.qos, options))
    if session.persistent:
        broker.hooks.session_saved(broker.record(session))
    gated = broker.gated_acks and session.persistent  # SUBACK promises a stored subscription
    conn.sink.write(encode(SubAck(packet.packet_id, codes), conn.version), gated)
    for actual, granted, options in retained_work:
        send_retained(broker, session, actual, granted, options, now)


def send_retained(
    broker: BrokerApi,
    session: Session,
    topic_filter: str,
    granted: int,
    options: SubOptions,
    now: float,
) -> None:
    """Deliver the retained messages matching a new subscription."""
    conn = session.connection
    assert conn is not None
    sub_ids = (options.subscription_id,) if options.subscription_id else ()
    for message in broker.retained.match(topic_filter, now):
        if broker.dispatch.check_read and not broker.hooks.check_acl(
            conn, message.topic, Access.READ
        ):
            continue
        broker.dispatch.deliver(
            session, message, min(granted, message.qos), True, sub_ids, now
        )


def on_unsubscribe(broker: BrokerApi, conn: Connection, packet: Unsubscribe) -> None:
    """Handle UNSUBSCRIBE and answer UNSUBACK with a code per filter."""
    session = conn.session
    assert session is not None
    codes: list[int] = []
    for topic_filter in packet.topic_filters:
        group, actual = parse_shared(topic_filter)
        removed = broker.table.unsubscribe(session.client_id, actual, group)
        session.subscriptions.pop(topic_filter, None)
        codes.append(ReasonCode.SUCCESS if removed else ReasonCode.NO_SUBSCRIPTION_EXISTED)
    if session.persistent:
        broker.hooks.session_saved(broker.record(session))
    gated = broker.gated_acks and session.persistent
    conn.sink.write(encode(UnsubAck(packet.packet_id, codes), conn.version), gated)
