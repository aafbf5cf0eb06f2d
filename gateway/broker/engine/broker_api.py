"""What the packet handlers need of the broker, as a protocol they can import.

`Broker` (gateway/broker/engine/broker.py) calls the handlers (handle_connect, handle_publish,
handle_subscribe) and passes itself; the handlers type it as `BrokerApi`, so they never import
the broker module and no import cycle forms. The handlers read limits, hooks and the tables,
and report what they count through these methods: they never write broker counters or broker
state directly.
"""

from __future__ import annotations

from typing import Protocol

from gateway.broker.codec.packets import Connect
from gateway.broker.contracts.config import LimitsConfig
from gateway.broker.contracts.hooks import BrokerHooks, SessionRecord
from gateway.broker.core.log_sampling import SourceCounts
from gateway.broker.core.message import Message
from gateway.broker.core.retained import RetainedStore
from gateway.broker.core.router import SubscriptionTable
from gateway.broker.core.session import ClientInfo, Connection, Session
from gateway.broker.engine.delivery import Dispatcher


class BrokerApi(Protocol):
    """The broker as its packet handlers see it."""

    limits: LimitsConfig
    hooks: BrokerHooks
    gated_acks: bool  # acknowledgements wait for the store's flush (durable hooks)
    dispatch: Dispatcher
    table: SubscriptionTable
    retained: RetainedStore
    sessions: dict[str, Session]
    refusals_by_source: SourceCounts  # refused CONNECTs per address: sampled log lines

    @property
    def network_clients(self) -> int:
        """Connected clients, the in-process links not included."""

    def protocol_error(self, conn: Connection, reason: int, message: str) -> None:
        """Close `conn` because the client broke the protocol."""

    def publish(self, message: Message, now: float, origin: ClientInfo | None = None) -> int:
        """Route an accepted message."""

    def record(self, session: Session) -> SessionRecord:
        """The stored form of a session."""

    def take_session(
        self, conn: Connection, packet: Connect, expiry: int, now: float
    ) -> tuple[Session, bool]:
        """The session a CONNECT continues or starts, and whether it was present."""

    def client_connected(self, conn: Connection) -> None:
        """`conn` completed its CONNECT."""

    def topic_over_limits(self, topic: str, info: ClientInfo, what: str) -> bool:
        """A client's topic is over the limits: counted and logged."""

    def topic_refused(self, topic: str, info: ClientInfo, what: str) -> None:
        """Count and log a topic refused for its length or depth."""

    def count_denied(self) -> None:
        """An access-control hook refused a publish, subscription or will."""

    def count_refused_busy(self, conn: Connection) -> None:
        """A CONNECT refused because limits.max_connections clients are connected."""

    def count_store_full(self) -> None:
        """A QoS 1/2 PUBLISH refused because the durable store cannot take more."""

    def retained_full(self, message: Message) -> None:
        """Count and log a retained message the retained limits have no room for."""

    def count_subscription_limited(self, session: Session, topic_filter: str) -> None:
        """A filter refused because the session has limits.max_subscriptions_per_client."""
