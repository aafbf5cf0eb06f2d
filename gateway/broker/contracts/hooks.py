"""The broker's hooks: authentication, access control and persistence events.

How this works: the broker core calls one `Hooks` object at fixed points. `BrokerHooks` is the
default (allow everything, keep nothing) and the base class of every implementation; a hook
overrides only the events it handles, so reading a subclass tells exactly when it touches disk.
`HookChain` combines several: authentication and ACL checks must pass every hook (the first
refusal wins); every other event reaches every hook in order.

Durability: a hook with `durable = True` promises that what it was told before `flush()`
returns is safely stored. The I/O layer holds a publisher's PUBACK / PUBREC until the flush that
covers the publish has completed, which is how "acknowledged only after committed" is kept.
Event calls themselves are synchronous and must be cheap (append to a batch); `flush` is the one
awaitable and commits the whole batch at once (group commit). If `flush` raises, nothing of the
batch may count as stored: the held acknowledgements are never sent and their connections are
closed, so publishers send again.

Times: every time a hook receives or returns (`expires_at`, `disconnected_at`) is on the broker's
monotonic clock; a store that keeps them across restarts converts to wall-clock time itself.

Queues larger than memory: a durable store may keep only the head of an offline session's queue
in memory. `restore` returns the first page of each session's deliveries and how many more are
on disk (`spilled`); while a session's queue is spilled the broker stores new QoS 1/2 deliveries
through `qos_stored` without keeping them, and pulls the rest page by page with
`load_deliveries` (in `store_seq` order) as the window drains.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from gateway.broker.codec.packets import Will
from gateway.broker.codec.reason_codes import ReasonCode
from gateway.broker.core.inflight import Delivery
from gateway.broker.core.message import Message
from gateway.broker.core.router import SubOptions
from gateway.broker.core.session import ClientInfo

# Listener labels of connections that do not come from the network (see
# gateway.broker.engine.links and
# Broker.restore): their identity was established in-process or when the will was accepted.
INTERNAL_LISTENERS = frozenset({"link", "restored"})


class Access(enum.Enum):
    """What a client wants to do with a topic."""

    READ = "read"  # receive a message on the topic
    WRITE = "write"  # publish to the topic
    SUBSCRIBE = "subscribe"  # subscribe with a filter


@dataclass(slots=True)
class SessionRecord:
    """What persistence needs to rebuild a session after a restart."""

    client_id: str
    protocol_level: int
    expiry_interval: int
    subscriptions: dict[str, SubOptions] = field(default_factory=dict)
    will: Will | None = None
    will_delay: int = 0
    disconnected_at: float | None = None  # None while connected


@dataclass(slots=True)
class RestoredSession:
    """One session as a store hands it back."""

    record: SessionRecord
    deliveries: list[Delivery] = field(default_factory=list)  # in-flight first, then queued
    spilled: int = 0  # further queued deliveries left on disk (see load_deliveries)
    spilled_bytes: int = 0
    awaiting_release: set[int] = field(default_factory=set)  # incoming QoS 2 packet ids


@dataclass(slots=True)
class RestoredState:
    """Everything a durable hook hands back when the broker starts."""

    sessions: list[RestoredSession] = field(default_factory=list)
    retained: list[Message] = field(default_factory=list)


class BrokerHooks:
    """Default hooks: allow everything, persist nothing. Subclass and override."""

    durable: bool = False

    def authenticate(self, client: ClientInfo, password: bytes | None) -> int:
        """Return SUCCESS or a CONNACK reason code that refuses the connection."""
        if client.username is None and not client.anonymous_allowed:
            return ReasonCode.NOT_AUTHORIZED
        return ReasonCode.SUCCESS

    def check_acl(self, client: ClientInfo, topic: str, access: Access) -> bool:
        """May `client` do `access` on `topic`?"""
        return True

    def session_saved(self, record: SessionRecord) -> None:
        """A persistent session was created or changed (subscriptions, will, expiry, online)."""

    def session_deleted(self, client_id: str) -> None:
        """A session ended for good (clean start, expiry, takeover with clean start)."""

    def qos_stored(self, client_id: str, delivery: Delivery) -> None:
        """A QoS 1/2 delivery to a persistent session was queued or put in flight.

        A durable store sets `delivery.store_seq` (increasing per client) and
        `delivery.message.store_id` (one stored body per message, shared by its deliveries).
        """

    def qos_updated(self, client_id: str, delivery: Delivery) -> None:
        """A stored delivery got its packet id or moved to the PUBREL stage."""

    def qos_completed(self, client_id: str, delivery: Delivery) -> None:
        """A stored delivery was acknowledged, expired or dropped."""

    def qos2_received(self, client_id: str, packet_id: int) -> None:
        """An incoming QoS 2 PUBLISH was accepted (PUBREC sent, PUBREL awaited)."""

    def qos2_released(self, client_id: str, packet_id: int) -> None:
        """The PUBREL for an incoming QoS 2 packet id arrived."""

    def load_deliveries(self, client_id: str, after_seq: int, limit: int) -> list[Delivery]:
        """Up to `limit` queued deliveries with `store_seq > after_seq`, oldest first."""
        return []

    def accepting(self) -> bool:
        """False while the store is full (size cap or disk headroom): refuse new QoS 1/2."""
        return True

    def retained_changed(self, topic: str, message: Message | None) -> None:
        """The retained message of `topic` was set (or deleted when None)."""

    def published(self, client: ClientInfo | None, message: Message) -> None:
        """A message was accepted and routed (for uplink outboxes and statistics)."""

    def restore(self) -> RestoredState:
        """State saved by an earlier run (empty for non-durable hooks)."""
        return RestoredState()

    async def flush(self) -> None:
        """Commit everything reported so far."""

    def flush_coming(self, at: float) -> None:
        """The broker will flush by loop time `at` (it holds acknowledgements until then, see
        gateway/broker/net/ack_hold.py): a commit of its own before that would only split
        the work into more commits."""

    async def close(self) -> None:
        """Flush and release resources at shutdown."""
        await self.flush()


# Events a chain hands to every member; `check_acl` must pass every member. These are called
# per message, so a chain binds each one straight to its only implementer (see HookChain).
_PER_MESSAGE = (
    "check_acl", "published", "retained_changed", "qos_stored", "qos_updated", "qos_completed",
    "qos2_received", "qos2_released", "session_saved", "session_deleted",
)


def _implements(hook: BrokerHooks, name: str) -> bool:
    """Does `hook` do something of its own for event `name` (not the default)?"""
    method = getattr(hook, name)
    return getattr(method, "__func__", None) is not getattr(BrokerHooks, name)


class HookChain(BrokerHooks):
    """Several hooks acting as one (see the module comment for how results combine).

    The members are fixed at construction. For a per-message event that at most one member
    implements, the chain's method is that member's own bound method (or the default), so
    the broker calls it directly instead of looping over members that do nothing: the
    in-process cost of a retained publish dropped by a fifth, of a QoS 1 one by a ninth.
    """

    def __init__(self, hooks: list[BrokerHooks]) -> None:
        self.hooks = hooks
        self.durable = any(h.durable for h in hooks)
        for name in _PER_MESSAGE:
            members = [hook for hook in hooks if _implements(hook, name)]
            if len(members) == 1:
                setattr(self, name, getattr(members[0], name))
            elif not members:
                setattr(self, name, getattr(BrokerHooks, name).__get__(self))

    def authenticate(self, client: ClientInfo, password: bytes | None) -> int:
        for hook in self.hooks:
            code = hook.authenticate(client, password)
            if code != ReasonCode.SUCCESS:
                return code
        return ReasonCode.SUCCESS

    def check_acl(self, client: ClientInfo, topic: str, access: Access) -> bool:
        return all(hook.check_acl(client, topic, access) for hook in self.hooks)

    def session_saved(self, record: SessionRecord) -> None:
        for hook in self.hooks:
            hook.session_saved(record)

    def session_deleted(self, client_id: str) -> None:
        for hook in self.hooks:
            hook.session_deleted(client_id)

    def qos_stored(self, client_id: str, delivery: Delivery) -> None:
        for hook in self.hooks:
            hook.qos_stored(client_id, delivery)

    def qos_updated(self, client_id: str, delivery: Delivery) -> None:
        for hook in self.hooks:
            hook.qos_updated(client_id, delivery)

    def qos_completed(self, client_id: str, delivery: Delivery) -> None:
        for hook in self.hooks:
            hook.qos_completed(client_id, delivery)

    def qos2_received(self, client_id: str, packet_id: int) -> None:
        for hook in self.hooks:
            hook.qos2_received(client_id, packet_id)

    def qos2_released(self, client_id: str, packet_id: int) -> None:
        for hook in self.hooks:
            hook.qos2_released(client_id, packet_id)

    def load_deliveries(self, client_id: str, after_seq: int, limit: int) -> list[Delivery]:
        for hook in self.hooks:
            if hook.durable:
                return hook.load_deliveries(client_id, after_seq, limit)
        return []

    def accepting(self) -> bool:
        return all(hook.accepting() for hook in self.hooks)

    def retained_changed(self, topic: str, message: Message | None) -> None:
        for hook in self.hooks:
            hook.retained_changed(topic, message)

    def published(self, client: ClientInfo | None, message: Message) -> None:
        for hook in self.hooks:
            hook.published(client, message)

    def restore(self) -> RestoredState:
        state = RestoredState()
        for hook in self.hooks:
            part = hook.restore()
            state.sessions.extend(part.sessions)
            state.retained.extend(part.retained)
        return state

    async def flush(self) -> None:
        for hook in self.hooks:
            await hook.flush()

    def flush_coming(self, at: float) -> None:
        for hook in self.hooks:
            hook.flush_coming(at)

    async def close(self) -> None:
        for hook in self.hooks:
            await hook.close()
