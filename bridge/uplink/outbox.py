"""The outbox semantics and the in-memory implementation (the interface: gateway/base/outbox.py).

How this works: every local message matching a forward rule is appended with a sequence number
from one per-gateway counter that never goes back within a store epoch. The drain reads records
per rule in the rule's order (oldest or newest first), skipping those already in flight, and
deletes a record only when the cloud acknowledged it; a record it read that was not
acknowledged (refused, the session ended, never sent) is given back with `release`. Caps per
rule (messages, bytes) apply on append: drop-oldest removes the rule's oldest records until the
new one fits, drop-newest refuses the new one. A record larger than the byte cap can never fit:
it is refused under both policies and nothing is removed for it.

Overflow and records in flight (read, neither acknowledged nor released yet): drop-oldest removes
the oldest records whether they are in flight or not. Skipping them would remove a record that
was never sent instead of one the cloud is about to acknowledge. The counts drop at once, so
`stats()` always describes what is stored, and the later acknowledgement of a removed record
changes no count. `dropped` counts only messages that did not reach the cloud: a removed record
not in flight at once, one in flight only if it is released instead of acknowledged, and every
refused one.

A durable implementation (SQLite) must only hand out committed records, so that a sequence
number seen by the cloud is never reused after a crash.

`MemoryOutbox` is the `durability = "memory"` implementation: its epoch is new for every process,
so restarting its counter at 1 still never repeats a (gateway, epoch, seq) id.
"""

from __future__ import annotations

import uuid
from collections import OrderedDict
from collections.abc import Iterable

from gateway.base.outbox import OutboxRecord, OutboxStats, RuleLimits


class MemoryOutbox:
    """Outbox in process memory (lost on restart, by definition of durability "memory")."""

    def __init__(self) -> None:
        self.epoch = str(uuid.uuid4())
        self._seq = 0
        self._rules: dict[str, OrderedDict[int, OutboxRecord]] = {}
        self._bytes: dict[str, int] = {}
        self._in_flight: set[int] = set()  # read, neither deleted nor released
        self._removed_in_flight: set[int] = set()  # removed by a cap while in flight
        self.dropped = 0

    def next_seq(self) -> int:
        """Allocate the next sequence number."""
        self._seq += 1
        return self._seq

    def append(self, record: OutboxRecord, limits: RuleLimits) -> int:
        rows = self._rules.setdefault(record.rule, OrderedDict())
        size = self._bytes.get(record.rule, 0)
        if record.size > limits.max_bytes or (
            not limits.drop_oldest
            and (len(rows) >= limits.max_messages or size + record.size > limits.max_bytes)
        ):
            self.dropped += 1
            return 1
        removed = 0
        while rows and (len(rows) >= limits.max_messages or size + record.size > limits.max_bytes):
            seq, oldest = rows.popitem(last=False)
            size -= oldest.size
            removed += 1
            if seq in self._in_flight:
                self._in_flight.discard(seq)
                self._removed_in_flight.add(seq)  # dropped only if it is released
            else:
                self.dropped += 1
        rows[record.seq] = record
        self._bytes[record.rule] = size + record.size
        return removed

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
                self._in_flight.add(record.seq)
                if len(out) >= limit:
                    break
        return out

    def delete(self, seqs: Iterable[int]) -> None:
        for seq in seqs:
            self._in_flight.discard(seq)
            self._removed_in_flight.discard(seq)  # delivered after all
            for rule, rows in self._rules.items():
                record = rows.pop(seq, None)
                if record is not None:
                    self._bytes[rule] -= record.size
                    break

    def release(self, seqs: Iterable[int]) -> None:
        for seq in seqs:
            self._in_flight.discard(seq)
            if seq in self._removed_in_flight:
                self._removed_in_flight.discard(seq)
                self.dropped += 1

    def stats(self) -> OutboxStats:
        messages = sum(len(rows) for rows in self._rules.values())
        oldest = min(
            (next(iter(rows.values())).received_ms for rows in self._rules.values() if rows),
            default=None,
        )
        return OutboxStats(messages, sum(self._bytes.values()), oldest, self.dropped)
