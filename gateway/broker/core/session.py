"""Session state (kept across connections) and connection state (one network connection).

How this works: a `Session` is what MQTT promises to remember for a client id — subscriptions,
outgoing messages in flight and queued, incoming QoS 2 packet ids awaiting PUBREL, the will and
the expiry interval. A `Connection` is one live transport: protocol version, negotiated limits,
topic aliases in both directions, keepalive, and the `Sink` the core writes bytes to. A session
has at most one connection; when it has none it is offline and queues.

The core never does I/O itself: it calls `Sink.write` (which the server buffers and coalesces
per loop iteration) and `Sink.close`. `write(data, gated=True)` marks bytes that must wait for
the durable store's next flush (a PUBACK for a message that was stored).

Pure and synchronous.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from gateway.broker.codec.packets import MQTT_5, Will
from gateway.broker.core.inflight import Outbound
from gateway.broker.core.message import Message
from gateway.broker.core.router import SubOptions

NEVER_EXPIRES = 0xFFFFFFFF

#: the subscriptions of every session that has none: shared and never written (an empty dict
#: costs 64 bytes per idle client); `Session.subscribe` gives a session its own
_NO_SUBSCRIPTIONS: dict[str, SubOptions] = {}


class ClientInfo(Protocol):
    """Who is asking: what hooks see of a client. A live client is its `Connection` (no copy
    per connection: idle clients are the broker's largest population); `ClientIdentity` stands
    for one that has no connection (an in-process link, a will outliving its connection)."""

    @property
    def client_id(self) -> str: ...

    @property
    def username(self) -> str | None: ...

    @property
    def listener(self) -> str:
        """The listener's label (`internal` labels: see `hooks.INTERNAL_LISTENERS`)."""

    @property
    def peer(self) -> str:
        """``host:port`` of the client (or a word for in-process clients)."""

    @property
    def anonymous_allowed(self) -> bool: ...


@dataclass(frozen=True, slots=True)
class ClientIdentity:
    """A `ClientInfo` that is a value: kept after the connection is gone, or made without one."""

    client_id: str
    username: str | None
    listener: str
    peer: str
    anonymous_allowed: bool = True

    @classmethod
    def of(cls, client: ClientInfo) -> ClientIdentity:
        """A copy that does not keep the connection (and its transport) alive."""
        return cls(client.client_id, client.username, client.listener, client.peer,
                   client.anonymous_allowed)


class Sink(Protocol):
    """Where a connection's outgoing bytes go (implemented by the I/O layer and links)."""

    def write(self, data: bytes, gated: bool = False) -> None:
        """Queue bytes for the peer; `gated` bytes wait for the durable store's flush."""

    def close(self) -> None:
        """Close after the bytes already written have been sent."""

    def backlog(self) -> int:
        """Bytes written but not yet accepted by the operating system."""

    def pause_reading(self) -> None:
        """Stop taking packets from the peer (flow control); later packets stay unread."""

    def resume_reading(self) -> None:
        """Take packets from the peer again, starting with any left unread."""


class MessageReceiver(Protocol):
    """An in-process consumer: takes routed messages without any encoding."""

    def receive(self, message: Message, qos: int, retain: bool) -> None:
        """One message matched a subscription of the link."""


@dataclass(slots=True, eq=False)
class TopicAliases:
    """The topic aliases of one v5 connection (most clients use none: they have no object)."""

    maximum: int = 0  # aliases the client takes from us (its Topic Alias Maximum)
    incoming: dict[int, str] = field(default_factory=dict)  # the client's, by alias
    outgoing: dict[str, int] = field(default_factory=dict)  # ours, by topic


@dataclass(slots=True, eq=False)
class Connection:
    """One live network (or in-process) connection; after its CONNECT, also the `ClientInfo`
    hooks are given (`client_id`, `username`, `listener`, `peer`, `anonymous_allowed`)."""

    sink: Sink
    listener: str
    peer: str
    anonymous_allowed: bool
    opened_at: float  # the socket opened (connect timeout); from its CONNECT on, that time
    last_seen: float
    version: int = 0  # 0 until CONNECT
    client_id: str = ""
    username: str | None = None
    keep_alive: int = 0
    session: Session | None = None
    # limits the client announced (v5 CONNECT properties)
    client_receive_maximum: int = 65535
    client_max_packet_size: int = 268_435_460
    request_problem_information: bool = True
    # topic aliases (v5): None while the client neither takes nor sends any
    aliases: TopicAliases | None = None
    # incoming QoS 1 publishes whose PUBACK has not left the process yet (receive-maximum
    # enforcement; the I/O layer resets it when it hands the acknowledgements to the socket)
    incoming_inflight: int = 0
    # flow control (gateway/broker/engine/flow_control.py): reading this client is paused
    # until the queues it feeds drain, since `paused_since`
    paused: bool = False
    paused_since: float = 0.0
    closed: bool = False
    receiver: MessageReceiver | None = None  # in-process links get messages, not bytes
    will_suppressed: bool = False  # normal DISCONNECT (reason 0x00)
    sent_disconnect: bool = False

    @property
    def is_v5(self) -> bool:
        return self.version == MQTT_5


@dataclass(slots=True, eq=False)
class Session:
    """What the broker remembers about one client id."""

    client_id: str
    protocol_level: int
    outbound: Outbound
    expiry_interval: int = 0
    # read freely; add only through `subscribe` (the empty one is shared)
    subscriptions: dict[str, SubOptions] = field(default_factory=lambda: _NO_SUBSCRIPTIONS)
    # incoming QoS 2 ids; the shared empty frozenset until the first (an empty set costs 216 B)
    awaiting_release: set[int] | frozenset[int] = frozenset()
    will: Will | None = None
    connection: Connection | None = None
    disconnected_at: float | None = None
    dropped: int = 0  # messages dropped by the queue overflow policy
    # flow control (gateway/broker/engine/flow_control.py): the queue passed the high-water
    # mark and has not yet drained below the low-water mark; `slow`: it kept publishers
    # waiting too long, so it pauses nobody until drained
    congested: bool = False
    slow: bool = False

    @property
    def online(self) -> bool:
        return self.connection is not None and not self.connection.closed

    @property
    def persistent(self) -> bool:
        """Outlives its connection (v5 expiry > 0 or a 3.1.x clean-session=0 session)."""
        return self.expiry_interval > 0

    def subscribe(self, topic_filter: str, options: SubOptions) -> None:
        """Remember a subscription (replacing one with the same filter)."""
        if self.subscriptions is _NO_SUBSCRIPTIONS:
            self.subscriptions = {}
        self.subscriptions[topic_filter] = options

    def await_release(self, packet_id: int) -> None:
        """An incoming QoS 2 publish was taken: its packet id waits for PUBREL."""
        if isinstance(self.awaiting_release, frozenset):
            self.awaiting_release = set()
        self.awaiting_release.add(packet_id)

    def release(self, packet_id: int) -> bool:
        """PUBREL: forget an incoming QoS 2 packet id; False if it was not waiting."""
        if packet_id not in self.awaiting_release:
            return False
        assert isinstance(self.awaiting_release, set)  # not empty, so no longer the frozenset
        self.awaiting_release.discard(packet_id)
        return True

    def expires_at(self) -> float | None:
        """When an offline session is discarded (None: never, or online)."""
        if self.disconnected_at is None or self.expiry_interval == NEVER_EXPIRES:
            return None
        return self.disconnected_at + self.expiry_interval
