"""Persistence hooks that keep everything in process memory: the restore path without a disk.

How this works: it mirrors what a durable store would write — persistent sessions, their QoS 1/2
deliveries in order, retained messages — into plain dicts, and hands them back from `restore`.
Nothing reaches disk, so a process restart starts empty; a new broker built on the same
`MemoryStore` object resumes exactly (the tests use this to exercise the restore path that the
SQLite store shares).
The daemon's `durability = "memory"` does not use it: one broker per process never restores,
so the mirror would only hold every retained message and session a second time.
"""

from __future__ import annotations

from gateway.broker.contracts.hooks import (
    BrokerHooks,
    RestoredSession,
    RestoredState,
    SessionRecord,
)
from gateway.broker.core.inflight import Delivery
from gateway.broker.core.message import Message


class MemoryStore(BrokerHooks):
    """Keeps the persistent state in process memory only."""

    durable = False

    def __init__(self) -> None:
        self.sessions: dict[str, SessionRecord] = {}
        self.deliveries: dict[str, dict[int, Delivery]] = {}
        self.retained: dict[str, Message] = {}

    def session_saved(self, record: SessionRecord) -> None:
        self.sessions[record.client_id] = record

    def session_deleted(self, client_id: str) -> None:
        self.sessions.pop(client_id, None)
        self.deliveries.pop(client_id, None)

    def qos_stored(self, client_id: str, delivery: Delivery) -> None:
        self.deliveries.setdefault(client_id, {})[id(delivery)] = delivery

    def qos_completed(self, client_id: str, delivery: Delivery) -> None:
        stored = self.deliveries.get(client_id)
        if stored is not None:
            stored.pop(id(delivery), None)

    def retained_changed(self, topic: str, message: Message | None) -> None:
        if message is None:
            self.retained.pop(topic, None)
        else:
            self.retained[topic] = message

    def restore(self) -> RestoredState:
        sessions = [
            RestoredSession(record, list(self.deliveries.get(client_id, {}).values()))
            for client_id, record in self.sessions.items()
        ]
        return RestoredState(sessions, list(self.retained.values()))
