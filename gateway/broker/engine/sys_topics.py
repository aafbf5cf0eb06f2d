"""`$SYS/broker/...` statistics, published as retained messages at an interval.

How this works: `SysPublisher.due` is called from the broker's tick. Once per interval it reads
the broker's counters, computes per-second rates from the change since the last publication,
and returns the messages to publish; the broker routes them like any other message. The topic
names follow mosquitto's, so existing dashboards work unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Protocol

from gateway.broker.core.message import Message
from gateway.broker.core.retained import RetainedStore
from gateway.broker.core.router import SubscriptionTable
from gateway.broker.core.session import Session
from gateway.broker.engine.delivery import Counters

VERSION = "outpost 0.1.0"
# `$SYS/outpost/<name>`: access-control and abuse-limit counters (docs/security.md); outpost's
# own names live outside `$SYS/broker/`, which keeps mosquitto's names.
SECURITY_COUNTERS = (
    ("clients/login/failed", "auth_failed"),
    ("clients/login/delayed", "auth_delayed"),
    ("clients/refused/rate", "refused_rate"),
    ("clients/refused/source", "refused_source"),
    ("clients/refused/pending", "refused_pending"),
    ("clients/evicted/pending", "evicted_pending"),
    ("clients/refused/busy", "refused_busy"),
    ("clients/refused/timeout", "refused_timeout"),
    ("clients/refused/tls", "tls_failed"),
    ("clients/refused/websocket", "ws_refused"),
    ("limits/topic", "topic_limited"),
    ("limits/subscriptions", "subscriptions_limited"),
    ("limits/packet_size", "packets_limited"),
)


class BrokerFigures(Protocol):
    """What `$SYS` reads of the broker (gateway/broker/engine/broker.py)."""

    counters: Counters
    started_at: float
    clients_connected: int
    clients_maximum: int
    sessions: dict[str, Session]
    table: SubscriptionTable
    retained: RetainedStore


class SysPublisher:
    """Builds the `$SYS` messages from broker counters."""

    def __init__(self, interval: float, now: float) -> None:
        self.interval = interval
        self.next_at = now + interval
        self.last_at = now
        self.last: dict[str, int] = {}
        self.bytes_received = 0
        self.bytes_sent = 0
        # Further figures, e.g. the store's commit statistics: name -> values under
        # $SYS/outpost/<name>/<key>.
        self.sources: dict[str, Callable[[], Mapping[str, object]]] = {}

    def due(self, broker: BrokerFigures, now: float) -> list[Message]:
        """The messages to publish now (empty until the interval has passed)."""
        if self.interval <= 0 or now < self.next_at:
            return []
        self.next_at = now + self.interval
        elapsed = max(now - self.last_at, 1e-9)
        self.last_at = now
        counters = broker.counters
        totals = {
            "messages/received": counters.received,
            "messages/sent": counters.sent,
            "bytes/received": self.bytes_received,
            "bytes/sent": self.bytes_sent,
        }
        values: dict[str, str] = {
            "version": VERSION,
            "uptime": f"{int(now - broker.started_at)} seconds",
            "clients/connected": str(broker.clients_connected),
            "clients/maximum": str(broker.clients_maximum),
            "clients/total": str(len(broker.sessions)),
            "clients/disconnected": str(len(broker.sessions) - broker.clients_connected),
            "subscriptions/count": str(broker.table.count),
            "retained messages/count": str(broker.retained.count),
            "retained messages/refused": str(counters.retained_refused),
            "messages/dropped": str(counters.dropped),
            "messages/expired": str(counters.expired),
            "messages/denied": str(counters.denied),
        }
        for name, total in totals.items():
            values[name] = str(total)
            rate = (total - self.last.get(name, 0)) / elapsed
            values[f"{name}/per second"] = f"{rate:.1f}"
        self.last = totals
        messages = [
            Message(f"$SYS/broker/{name}", value.encode(), 0, True)
            for name, value in values.items()
        ]
        messages.extend(
            Message(f"$SYS/outpost/{name}", str(getattr(counters, attribute)).encode(), 0, True)
            for name, attribute in SECURITY_COUNTERS
        )
        for source, read in self.sources.items():
            messages.extend(
                Message(f"$SYS/outpost/{source}/{key}", str(value).encode(), 0, True)
                for key, value in read().items()
            )
        return messages
