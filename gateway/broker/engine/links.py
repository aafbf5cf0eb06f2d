"""In-process links: how the device bridge, the uplink and other producers talk to the broker.

How this works: a `Link` is a client session without a socket. It is registered with the broker
like a network connection (a session, subscriptions, ACL identity), publishes through the same
`Broker.publish` path as a client's PUBLISH, and receives routed `Message` objects directly —
nothing is encoded or decoded, nothing goes over loopback TCP. Its clock is the event loop's.
"""

from __future__ import annotations

from collections.abc import Callable

from gateway.broker.codec.packets import (
    MQTT_5,
    NO_PROPERTIES,
    Connect,
    Properties,
    Subscribe,
    Subscription,
    Unsubscribe,
)
from gateway.broker.core.message import Message
from gateway.broker.core.session import Connection
from gateway.broker.engine.broker import Broker

MessageHandler = Callable[[Message, int, bool], None]


class _NullSink:
    """Links never receive bytes: CONNACK and SUBACK are dropped here."""

    def write(self, data: bytes, gated: bool = False) -> None:
        pass

    def close(self) -> None:
        pass

    def backlog(self) -> int:
        return 0

    def pause_reading(self) -> None:
        pass  # a link's publishes are function calls: nothing to pause

    def resume_reading(self) -> None:
        pass


class Link:
    """An in-process MQTT client of the broker."""

    def __init__(
        self,
        broker: Broker,
        client_id: str,
        clock: Callable[[], float],
        on_message: MessageHandler | None = None,
        session_expiry: int = 0,
    ) -> None:
        self.broker = broker
        self.clock = clock
        self.client_id = client_id
        self.on_message = on_message
        now = clock()
        self.conn: Connection = broker.open_connection(_NullSink(), "link", "in-process", True, now)
        self.conn.receiver = self
        props = Properties(session_expiry_interval=session_expiry or None)
        broker.handle(self.conn, Connect(client_id, MQTT_5, session_expiry == 0, 0,
                                         properties=props), now)
        if self.conn.closed:
            raise RuntimeError(f"the broker refused link {client_id!r}")
        self._packet_id = 0

    def receive(self, message: Message, qos: int, retain: bool) -> None:
        """Called by the broker for every message matching this link's subscriptions."""
        if self.on_message is not None:
            self.on_message(message, qos, retain)

    def publish(
        self,
        topic: str,
        payload: bytes,
        qos: int = 0,
        retain: bool = False,
        properties: Properties = NO_PROPERTIES,
    ) -> int:
        """Publish like a client would; returns how many sessions it was routed to."""
        now = self.clock()
        expiry = properties.message_expiry_interval
        message = Message(
            topic, payload, qos, retain, properties,
            None if expiry is None else now + expiry, self.client_id,
        )
        return self.broker.publish(message, now, self.conn)

    def subscribe(self, topic_filter: str, qos: int = 1, no_local: bool = True) -> None:
        """Subscribe (no_local by default: a link rarely wants its own messages back)."""
        self.broker.handle(
            self.conn,
            Subscribe(self._next_id(), [Subscription(topic_filter, qos, no_local)]),
            self.clock(),
        )

    def unsubscribe(self, topic_filter: str) -> None:
        """Remove a subscription."""
        self.broker.handle(self.conn, Unsubscribe(self._next_id(), [topic_filter]),
                           self.clock())

    def close(self) -> None:
        """Detach from the broker (the session ends unless it has an expiry)."""
        self.conn.closed = True
        self.broker.connection_lost(self.conn, self.clock())

    def _next_id(self) -> int:
        self._packet_id = self._packet_id % 65535 + 1
        return self._packet_id
