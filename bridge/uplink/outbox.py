"""The outbox interface and its in-memory implementation.

How this works: every local message matching a forward rule is appended with a sequence number
from one per-gateway counter that never goes back within a store epoch. The drain reads records
per rule in the rule's order (oldest or newest first), skipping those already in flight, and
deletes a record only when the cloud acknowledged it. Caps per rule (messages, bytes) apply on
append: drop-oldest removes the oldest record of that rule, drop-newest refuses the new one; both
are counted. A durable implementation (SQLite) must only hand out committed records, so that a
sequence number seen by the cloud is never reused after a crash.

`MemoryOutbox` is the `durability = "memory"` implementation: its epoch is new for every process,
so restarting its counter at 1 still never repeats a (gateway, epoch, seq) id.
"""

from __future__ import annotations

import uuid
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from bridge.uplink.envelope import OutboxRecord


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
        """Store a record (in the current group commit); returns how many were dropped."""

    def read(
        self, rule: str, limit: int, newest_first: bool, exclude: set[int]
    ) -> list[OutboxRecord]:
        """Up to `limit` committed records of `rule` in its order, skipping `exclude`."""

    def delete(self, seqs: Iterable[int]) -> None:
        """The cloud acknowledged these."""

    def stats(self) -> OutboxStats:
        """Backlog size and age."""


class MemoryOutbox:
    """Outbox in process memory (lost on restart, by definition of durability "memory")."""

    def __init__(self) -> None:
        self.epoch = str(uuid.uuid4())
        self._seq = 0
        self._rules: dict[str, OrderedDict[int, OutboxRecord]] = {}
        self._bytes: dict[str, int] = {}
        self.dropped = 0

    def next_seq(self) -> int:
        """Allocate the next sequence number."""
        self._seq += 1
        return self._seq

    def append(self, record: OutboxRecord, limits: RuleLimits) -> int:
        rows = self._rules.setdefault(record.rule, OrderedDict())
        size = self._bytes.get(record.rule, 0)
        dropped = 0
        while rows and (len(rows) >= limits.max_messages or size + record.size > limits.max_bytes):
            if not limits.drop_oldest:
                self.dropped += 1
                return 1
            _, oldest = rows.popitem(last=False)
            size -= oldest.size
            dropped += 1
        if record.size > limits.max_bytes:
            self.dropped += dropped + 1
            self._bytes[record.rule] = size
            return dropped + 1
        rows[record.seq] = record
        self._bytes[record.rule] = size + record.size
        self.dropped += dropped
        return dropped

    def read(
        self, rule: str, limit: int, newest_first: bool, exclude: set[int]
    ) -> list[OutboxRecord]:
        rows = self._rules.get(rule)
        if not rows:
            return []
        source = reversed(rows.values()) if newest_first else iter(rows.values())
        out: list[OutboxRecord] = []
        for record in source:
            if record.seq not in exclude:
                out.append(record)
                if len(out) >= limit:
                    break
        return out

    def delete(self, seqs: Iterable[int]) -> None:
        for seq in seqs:
            for rule, rows in self._rules.items():
                record = rows.pop(seq, None)
                if record is not None:
                    self._bytes[rule] -= record.size
                    break

    def stats(self) -> OutboxStats:
        messages = sum(len(rows) for rows in self._rules.values())
        oldest = min(
            (next(iter(rows.values())).received_ms for rows in self._rules.values() if rows),
            default=None,
        )
        return OutboxStats(messages, sum(self._bytes.values()), oldest, self.dropped)
