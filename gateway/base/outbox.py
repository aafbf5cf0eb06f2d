"""The uplink outbox contract: the record a forward rule stores and the store interface.

How this works: the uplink (bridge/uplink) appends, reads, deletes and releases records through
`Outbox`; the durable implementation lives in storage (storage/sqlite/uplink_outbox.py) and the
in-memory one beside the uplink (bridge/uplink/outbox.py). Neither side may import the other, so
the contract sits here, below both. The semantics every implementation keeps (sequence numbers,
caps, what counts as dropped) are described in bridge/uplink/outbox.py.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class OutboxRecord:
    """One stored message waiting for the cloud's PUBACK."""

    seq: int
    rule: str
    topic: str  # the local topic
    payload: bytes
    qos: int
    retain: bool
    received_ms: int
    user_properties: tuple[tuple[str, str], ...] = ()
    content_type: str | None = None

    @property
    def size(self) -> int:
        """Bytes this record counts against the outbox byte cap."""
        return len(self.topic) + len(self.payload)


@dataclass(frozen=True, slots=True)
class RuleLimits:
    """The caps of one forward rule."""

    max_messages: int
    max_bytes: int
    drop_oldest: bool


@dataclass(slots=True)
class OutboxStats:
    """Backlog figures for status and `$SYS`."""

    messages: int = 0
    bytes: int = 0
    oldest_ms: int | None = None
    dropped: int = 0


class Outbox(Protocol):
    """What the uplink needs from a store."""

    epoch: str

    def next_seq(self) -> int:
        """Allocate the next sequence number (never lower than any committed one)."""

    def append(self, record: OutboxRecord, limits: RuleLimits) -> int:
        """Store a record (in the current group commit); returns how many records the caps
        removed (drop-oldest) or refused (drop-newest, or a record larger than the byte cap)."""

    def read(
        self, rule: str, limit: int, newest_first: bool, exclude: set[int]
    ) -> list[OutboxRecord]:
        """Up to `limit` committed records of `rule` in its order, skipping `exclude`; they are
        in flight until deleted or released."""

    def delete(self, seqs: Iterable[int]) -> None:
        """The cloud acknowledged these (records handed out by `read`)."""

    def release(self, seqs: Iterable[int]) -> None:
        """These records handed out by `read` were not acknowledged: no longer in flight."""

    def stats(self) -> OutboxStats:
        """Backlog size and age."""
