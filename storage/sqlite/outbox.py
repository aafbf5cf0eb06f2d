"""Outbox sequence numbers that are never reused, even after the rows are deleted.

Theory of operation: every forwarded message is identified downstream by (gateway_id, epoch,
seq), so an outbox `seq` must never be handed out twice by one database, although acknowledged
rows are deleted (a plain `max(seq) + 1` would reuse numbers once the outbox drained). Writing
a counter per message would cost a page write per commit, so numbers are reserved in blocks:
`meta.outbox_seq_reserved` is the highest number that may have been used. `OutboxSeq.take`
returns the next number and, once per `BLOCK`, the new reservation, which the writer stores
in the same transaction as the rows that use the block. After a crash numbering continues
above the reservation, leaving a gap but never a repeat.
"""

from __future__ import annotations

import sqlite3

BLOCK = 65536


class OutboxSeq:
    """Allocator of outbox sequence numbers (owned by the writer of the outbox)."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        reserved = conn.execute(
            "SELECT value FROM meta WHERE key = 'outbox_seq_reserved'").fetchone()
        top = conn.execute("SELECT max(seq) FROM outbox").fetchone()[0]
        self.reserved = max(int(reserved[0]) if reserved else 0, int(top or 0))
        self.next = self.reserved + 1

    def take(self) -> tuple[int, int | None]:
        """(seq, new reservation to store with it, or None when the block still has room)."""
        seq = self.next
        self.next += 1
        if seq <= self.reserved:
            return seq, None
        self.reserved = seq + BLOCK - 1
        return seq, self.reserved


def store_reservation(conn: sqlite3.Connection, reserved: int) -> None:
    """Record a reservation (inside the transaction that inserts the rows using it)."""
    conn.execute(
        "UPDATE meta SET value = ? "
        "WHERE key = 'outbox_seq_reserved' AND CAST(value AS INTEGER) < ?",
        (str(reserved), reserved),
    )
