"""An application message as the router sees it, with its shared outgoing encodings.

How this works: a PUBLISH is turned into one `Message` when it arrives and routed once. Each
subscriber needs the message in some *shape* (protocol version, QoS > 0 or not, subscription
identifiers, remaining expiry). The first subscriber of a shape pays for `encode`; the bytes are
cached on the message and every later subscriber of the same shape reuses them, patching only
the first byte (DUP / QoS / RETAIN flags) and the two packet-identifier bytes. A QoS 0 message
from a 3.1.x publisher is seeded with the publisher's own bytes, so forwarding it to 3.1.x
subscribers encodes nothing at all (not a retained one: it stays in the retained store, where
that copy would only add to the memory every retained topic costs).

Memory: a message often waits long (a retained message, a queue for an offline client), so the
commonest shape, QoS 0 for 3.1.x subscribers (the same bytes for 3.1 and 3.1.1), has a slot of
its own, and the dict of the other shapes only exists once one of them has been encoded.

Times are the broker's monotonic clock; `expires_at` is None for messages that never expire.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from gateway.broker.codec import encode
from gateway.broker.codec.packets import (
    MQTT_3_1,
    MQTT_3_1_1,
    MQTT_5,
    NO_PROPERTIES,
    Properties,
    Publish,
)
from gateway.broker.codec.publish import encode_publish_shape

# Shape key: (protocol version, qos > 0, subscription ids, remaining expiry seconds)
_ShapeKey = tuple[int, bool, tuple[int, ...], int | None]
# Memory one queued delivery costs beyond its topic and payload: the `Delivery` and `Message`
# objects, the str / bytes headers, the (still empty) shape cache and the queue's slot. Measured
# with bench/queue_memory.py on CPython 3.11, 64-bit: 1,504 bytes of RSS per queued message of
# 1,030 counted bytes, so about 470; `max_queued_bytes` counts it so the cap is what RAM sees.
QUEUED_OVERHEAD = 480


@dataclass(slots=True, eq=False)
class Message:
    """One routed application message."""

    topic: str
    payload: bytes
    qos: int
    retain: bool
    properties: Properties = NO_PROPERTIES
    expires_at: float | None = None
    origin: str | None = None
    store_id: int = 0  # set by a durable store: the stored body shared by its deliveries
    _v3_qos0: bytes | None = field(default=None, repr=False)  # flags cleared
    _shapes: dict[_ShapeKey, tuple[bytes, int]] | None = field(default=None, repr=False)

    @property
    def size(self) -> int:
        """Bytes of topic + payload (what a store writes and counts)."""
        return len(self.topic) + len(self.payload)

    @property
    def queued_cost(self) -> int:
        """Memory one queued delivery of this message costs (what `max_queued_bytes` counts)."""
        return len(self.topic) + len(self.payload) + QUEUED_OVERHEAD

    def expired(self, now: float) -> bool:
        """True once the message expiry interval has run out."""
        return self.expires_at is not None and now >= self.expires_at

    def seed_raw(self, raw: bytes, versions: tuple[int, ...]) -> None:
        """Reuse the publisher's exact bytes as the QoS 0 encoding for `versions`."""
        first = raw[0] & 0xF0  # QoS 0, no DUP, no RETAIN: rewritten per delivery anyway
        data = bytes((first,)) + raw[1:] if first != raw[0] else raw
        for version in versions:
            if version == MQTT_5:
                self._shape_cache()[(MQTT_5, False, (), self.remaining_expiry(None))] = (data, 0)
            else:
                self._v3_qos0 = data

    def _shape_cache(self) -> dict[_ShapeKey, tuple[bytes, int]]:
        if self._shapes is None:
            self._shapes = {}
        return self._shapes

    def remaining_expiry(self, now: float | None) -> int | None:
        """Whole seconds of message expiry left (the value forwarded to subscribers)."""
        if self.expires_at is None:
            return None
        interval = self.properties.message_expiry_interval
        if now is None:
            return interval
        return max(0, int(self.expires_at - now + 0.999))

    def encode_for(
        self,
        version: int,
        qos: int,
        retain: bool,
        packet_id: int | None,
        now: float,
        subscription_ids: tuple[int, ...] = (),
        dup: bool = False,
    ) -> bytes:
        """The PUBLISH bytes for one subscriber, sharing the encoding per shape."""
        first = 0x30 | (qos << 1) | (0x08 if dup else 0) | (0x01 if retain else 0)
        if version != MQTT_5:
            if qos == 0:
                data = self._v3_qos0
                if data is None:
                    data = self._v3_qos0 = self._encode_shape(version, False, (), None)[0]
                return data if data[0] == first else bytes((first,)) + data[1:]
            subscription_ids = ()
            remaining = None
        else:
            remaining = self.remaining_expiry(now)
        key = (version, qos > 0, subscription_ids, remaining)
        shapes = self._shape_cache()
        shape = shapes.get(key)
        if shape is None:
            shape = self._encode_shape(version, qos > 0, subscription_ids, remaining)
            shapes[key] = shape
        data, pid_offset = shape
        if qos == 0:
            if data[0] == first:
                return data
            return bytes((first,)) + data[1:]
        out = bytearray(data)
        out[0] = first
        assert packet_id is not None
        out[pid_offset] = packet_id >> 8
        out[pid_offset + 1] = packet_id & 0xFF
        return bytes(out)

    def v5_properties(
        self, subscription_ids: tuple[int, ...], remaining: int | None,
        topic_alias: int | None = None,
    ) -> Properties:
        """The properties of one outgoing 5.0 copy: the subscriber's subscription ids, the
        expiry left, and the connection's topic alias (none of which the publisher sent)."""
        props = self.properties
        if subscription_ids or remaining != props.message_expiry_interval or topic_alias:
            props = replace(props, subscription_identifiers=subscription_ids,
                            message_expiry_interval=remaining, topic_alias=topic_alias)
        return props

    def _encode_shape(
        self, version: int, with_id: bool, subscription_ids: tuple[int, ...], remaining: int | None
    ) -> tuple[bytes, int]:
        properties = (self.v5_properties(subscription_ids, remaining) if version == MQTT_5
                      else NO_PROPERTIES)
        if properties is NO_PROPERTIES:  # the common case, built without a Publish
            return encode_publish_shape(self.topic, self.payload, with_id, version == MQTT_5)
        packet = Publish(
            topic=self.topic,
            payload=self.payload,
            qos=1 if with_id else 0,
            packet_id=1 if with_id else None,
            properties=properties,
        )
        data = encode(packet, version)
        header = 2
        while data[header - 1] & 0x80:
            header += 1
        pid_offset = header + 2 + len(self.topic.encode()) if with_id else 0
        return data, pid_offset


V3_VERSIONS = (MQTT_3_1, MQTT_3_1_1)
