"""Rows to objects and back: messages, deliveries, sessions, subscriptions, wills, retained.

Theory of operation: the broker hands the store live objects (`Message`, `Delivery`,
`SessionRecord`) whose times are on its monotonic clock. `Clock` converts those to wall-clock
integer milliseconds for the database (the offset is taken once, when the store opens) and
back when rows are read in a later process. Properties are kept as the MQTT 5 property block
the codec writes (`encode_properties`), so a stored message carries exactly what was received;
the common "no properties" case is stored as NULL and costs no bytes. Integers 0 and 1 are
free in SQLite's record format, which is why flags are plain integers.

Tuples, not dicts, because the hot path builds one per stored delivery.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from gateway.broker.codec.packets import NO_PROPERTIES, Properties, Will
from gateway.broker.codec.properties import decode_properties, encode_properties
from gateway.broker.contracts.hooks import SessionRecord
from gateway.broker.core.inflight import Delivery
from gateway.broker.core.message import Message
from gateway.broker.core.router import SubOptions

# [id, topic, payload, qos, retain, properties, expires_ms, stored_ms, refs]: a list, because
# the batch counts references in place (refs is the last item)
BodyRow = list[Any]
# (sid, seq, message_id, qos, retain, subscription_ids, packet_id, released, size)
DeliveryRow = tuple[int, int, int, int, int, str | None, int, int, int]
# (sid, client_id, protocol_level, expiry_interval, disconnected_ms,
#  will_topic, will_payload, will_qos, will_retain, will_properties, will_delay)
SessionRow = tuple[
    int, str, int, int, int | None, str | None, bytes | None, int | None, int | None,
    bytes | None, int,
]
# (sid, topic_filter, qos, no_local, retain_as_published, retain_handling, subscription_id)
SubscriptionRow = tuple[int, str, int, int, int, int, int | None]
# (topic, payload, qos, properties, expires_ms)
RetainedRow = tuple[str, bytes, int, bytes | None, int | None]


class Clock:
    """Converts the broker's monotonic times to wall-clock milliseconds and back."""

    def __init__(
        self, monotonic: Callable[[], float] | None = None, wall: Callable[[], float] | None = None
    ) -> None:
        mono = monotonic or time.monotonic
        self.monotonic = mono
        self.wall = wall or time.time
        self.offset = self.wall() - mono()

    def to_wall_ms(self, mono: float | None) -> int | None:
        if mono is None:
            return None
        return round((mono + self.offset) * 1000)

    def to_mono(self, wall_ms: int | None) -> float | None:
        if wall_ms is None:
            return None
        return wall_ms / 1000 - self.offset

    def now_ms(self) -> int:
        return round(self.wall() * 1000)


def props_blob(props: Properties, packet: str = "PUBLISH") -> bytes | None:
    """The property block of `props`, or None when there are none."""
    if props is NO_PROPERTIES or props == NO_PROPERTIES:
        return None
    return encode_properties(props, packet)


def props_from(blob: bytes | None, packet: str = "PUBLISH") -> Properties:
    if not blob:
        return NO_PROPERTIES
    props, _ = decode_properties(blob, 0, len(blob), packet)
    return props


def body_row(message: Message, clock: Clock, refs: int = 1) -> BodyRow:
    props = message.properties
    expires = message.expires_at
    return [
        message.store_id, message.topic, message.payload, message.qos, message.retain,
        None if props is NO_PROPERTIES else props_blob(props),
        None if expires is None else round((expires + clock.offset) * 1000),
        round(clock.wall() * 1000), refs,
    ]


def sub_ids_from(text: str | None) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split(",")) if text else ()


def delivery_row(sid: int, delivery: Delivery) -> DeliveryRow:
    message = delivery.message
    ids = delivery.subscription_ids
    return (
        sid, delivery.store_seq, message.store_id, delivery.qos, int(delivery.retain),
        ",".join(map(str, ids)) if ids else None, delivery.packet_id, int(delivery.released),
        len(message.topic) + len(message.payload),
    )


def message_from(row: tuple[Any, ...], clock: Clock) -> Message:
    """A Message from (id, topic, payload, qos, retain, properties, expires_ms)."""
    mid, topic, payload, qos, retain, props, expires_ms = row
    return Message(
        topic, bytes(payload), qos, bool(retain), props_from(props),
        clock.to_mono(expires_ms), None, mid,
    )


def delivery_from(row: tuple[Any, ...], message: Message) -> Delivery:
    """A Delivery from (seq, qos, retain, subscription_ids, packet_id, released)."""
    seq, qos, retain, sub_ids, packet_id, released = row
    return Delivery(
        message, qos, bool(retain), sub_ids_from(sub_ids), packet_id, bool(released),
        sent=bool(packet_id), store_seq=seq,
    )


def session_row(sid: int, record: SessionRecord, clock: Clock) -> SessionRow:
    will = record.will
    return (
        sid, record.client_id, record.protocol_level, record.expiry_interval,
        clock.to_wall_ms(record.disconnected_at),
        will.topic if will else None,
        will.payload if will else None,
        will.qos if will else None,
        int(will.retain) if will else None,
        props_blob(will.properties, "WILL") if will else None,
        record.will_delay,
    )


def subscription_rows(sid: int, subscriptions: dict[str, SubOptions]) -> list[SubscriptionRow]:
    return [
        (sid, topic_filter, o.qos, int(o.no_local), int(o.retain_as_published),
         o.retain_handling, o.subscription_id)
        for topic_filter, o in subscriptions.items()
    ]


def options_from(row: tuple[Any, ...]) -> SubOptions:
    """SubOptions from (qos, no_local, retain_as_published, retain_handling, subscription_id)."""
    qos, no_local, rap, handling, sub_id = row
    return SubOptions(qos, bool(no_local), bool(rap), handling, sub_id)


def record_from(
    row: tuple[Any, ...], subscriptions: dict[str, SubOptions], clock: Clock,
    disconnected_ms: int | None,
) -> SessionRecord:
    """A SessionRecord from a sessions row without its sid and disconnected_ms."""
    (client_id, level, expiry, w_topic, w_payload, w_qos, w_retain, w_props, w_delay) = row
    will = None
    if w_topic is not None:
        will = Will(w_topic, bytes(w_payload or b""), w_qos or 0, bool(w_retain),
                    props_from(w_props, "WILL"))
    return SessionRecord(
        client_id, level, expiry, subscriptions, will, w_delay, clock.to_mono(disconnected_ms)
    )


def retained_row(message: Message, clock: Clock) -> RetainedRow:
    return (
        message.topic, message.payload, message.qos, props_blob(message.properties),
        clock.to_wall_ms(message.expires_at),
    )


def retained_from(row: tuple[Any, ...], clock: Clock) -> Message:
    """A retained Message from (topic, payload, qos, properties, expires_ms)."""
    topic, payload, qos, props, expires_ms = row
    return Message(topic, bytes(payload), qos, True, props_from(props), clock.to_mono(expires_ms))
