"""The batch of pending changes and the one writer thread that commits it.

Theory of operation
-------------------
Hook events run on the event loop and only record what changed in the current `Batch` (dicts
and lists, no SQL). The batch already folds work that cancels out, because every row that is
never written is a flash write saved:

- a delivery stored and completed before its batch is taken (an online subscriber acking
  quickly) is removed again, and with it its reference to the message body; a body whose
  references all went away in the same batch is never inserted;
- a packet-id / PUBREL change of a delivery still in the batch rewrites the pending row;
- an incoming QoS 2 id received and released in the same batch disappears;
- a retained topic set several times keeps only the last value;
- a session's subscriptions are written as a diff against what was last written.

`Writer` owns the read-write SQLite connection and one thread (a single-worker executor).
`commit(batches)` runs there: `BEGIN IMMEDIATE`, every batch applied in order, `COMMIT`.
With `synchronous = FULL` SQLite fsyncs the WAL in that COMMIT (durability "full"); with
`NORMAL` it does not (durability "normal": the WAL survives a process crash, not a power
cut). On any error the transaction is rolled back and the exception propagates: nothing of
those batches is stored. The caller (`SqliteStore.flush`) keeps failed batches and commits
them in front of the next one, so the database ends up matching the broker's memory once
the disk has room again.

Message bodies are reference counted (`messages.refs`): inserts of a batch are one upsert
per body (`refs = refs + n`), a delivery delete that really removed a row (rowcount 1)
decrements its body, and a body at zero is deleted in the same transaction. A session
deleted for good takes its deliveries, subscriptions and QoS 2 ids with it.
"""

from __future__ import annotations

import contextlib
import sqlite3
import time
from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from gateway.broker.core.inflight import Delivery
from storage.sqlite.rows import BodyRow, DeliveryRow, RetainedRow, SessionRow, SubscriptionRow


@dataclass(slots=True)
class Batch:
    """Changes recorded since the last flush took a batch (see the module comment)."""

    session_deletes: list[int] = field(default_factory=list)
    sessions: dict[int, SessionRow] = field(default_factory=dict)
    subscriptions: dict[tuple[int, str], SubscriptionRow | None] = field(default_factory=dict)
    bodies: dict[int, BodyRow] = field(default_factory=dict)  # id -> row (refs last)
    inserts: dict[int, dict[int, tuple[Delivery, DeliveryRow]]] = field(default_factory=dict)
    updates: dict[tuple[int, int], tuple[int, int]] = field(default_factory=dict)
    deletes: list[tuple[int, int, int]] = field(default_factory=list)  # (sid, seq, message id)
    qos2_add: set[tuple[int, int]] = field(default_factory=set)
    qos2_del: set[tuple[int, int]] = field(default_factory=set)
    retained: dict[str, RetainedRow | None] = field(default_factory=dict)
    # the uplink outbox (storage/sqlite/uplink_outbox.py)
    outbox_inserts: list[tuple[int, str, bytes, int, int, bytes, int, str]] = field(
        default_factory=list
    )
    outbox_deletes: list[int] = field(default_factory=list)  # acknowledged or over the cap
    outbox_top: int = 0  # highest outbox seq inserted: stored so it is never reused
    on_committed: list[Callable[[], None]] = field(default_factory=list)
    ops: int = 0  # events recorded (for the size trigger and statistics)

    def __bool__(self) -> bool:
        return self.ops > 0

    def drop_ref(self, message_id: int) -> None:
        row = self.bodies[message_id]
        if row[-1] <= 1:
            del self.bodies[message_id]
        else:
            row[-1] -= 1

    def cancel_session(self, sid: int) -> None:
        """Forget everything pending for `sid` (the session is being deleted)."""
        for _delivery, row in self.inserts.pop(sid, {}).values():
            self.drop_ref(row[2])
        self.sessions.pop(sid, None)
        for sub_key in [k for k in self.subscriptions if k[0] == sid]:
            del self.subscriptions[sub_key]
        for key in [k for k in self.updates if k[0] == sid]:
            del self.updates[key]
        self.deletes = [d for d in self.deletes if d[0] != sid]
        self.qos2_add = {k for k in self.qos2_add if k[0] != sid}
        self.qos2_del = {k for k in self.qos2_del if k[0] != sid}

    def writes(self) -> bool:
        """Is anything left to write (everything recorded may have cancelled out)?"""
        return bool(
            self.session_deletes or self.sessions or self.subscriptions or self.bodies
            or any(self.inserts.values()) or self.updates or self.deletes or self.qos2_add
            or self.qos2_del or self.retained or self.outbox_inserts or self.outbox_deletes
        )

    def pending_rows(self) -> int:
        return sum(len(rows) for rows in self.inserts.values())


@dataclass(slots=True)
class CommitStats:
    """Figures of the writer for `$SYS` and `outpost db stats`."""

    commits: int = 0
    failures: int = 0
    batches: int = 0  # batches committed (more than commits when failed ones were retried)
    ops: int = 0  # events committed
    rows_written: int = 0  # delivery rows inserted
    cancelled: int = 0  # deliveries stored and completed inside one batch: never written
    seconds_total: float = 0.0
    last_seconds: float = 0.0
    max_seconds: float = 0.0
    last_error: str = ""


_UPSERT_SESSION = (
    "INSERT INTO sessions (sid, client_id, protocol_level, expiry_interval, disconnected_ms, "
    "will_topic, will_payload, will_qos, will_retain, will_properties, will_delay) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (sid) DO UPDATE SET "
    "client_id = excluded.client_id, protocol_level = excluded.protocol_level, "
    "expiry_interval = excluded.expiry_interval, disconnected_ms = excluded.disconnected_ms, "
    "will_topic = excluded.will_topic, will_payload = excluded.will_payload, "
    "will_qos = excluded.will_qos, will_retain = excluded.will_retain, "
    "will_properties = excluded.will_properties, will_delay = excluded.will_delay"
)
_UPSERT_SUBSCRIPTION = (
    "INSERT OR REPLACE INTO subscriptions (sid, topic_filter, qos, no_local, "
    "retain_as_published, retain_handling, subscription_id) VALUES (?, ?, ?, ?, ?, ?, ?)"
)
_UPSERT_BODY = (
    "INSERT INTO messages (id, topic, payload, qos, retain, properties, expires_ms, stored_ms, "
    "refs) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) "
    "ON CONFLICT (id) DO UPDATE SET refs = refs + excluded.refs"
)
_INSERT_DELIVERY = (
    "INSERT OR REPLACE INTO deliveries (sid, seq, message_id, qos, retain, subscription_ids, "
    "packet_id, released, size) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_UPSERT_RETAINED = (
    "INSERT OR REPLACE INTO retained (topic, payload, qos, properties, expires_ms) "
    "VALUES (?, ?, ?, ?, ?)"
)


def delete_session(conn: sqlite3.Connection, sid: int) -> None:
    """Delete a session with its deliveries (releasing their bodies), subscriptions, QoS 2."""
    conn.execute("DELETE FROM qos2_in WHERE sid = ?", (sid,))
    conn.execute("DELETE FROM subscriptions WHERE sid = ?", (sid,))
    conn.execute("CREATE TEMP TABLE IF NOT EXISTS dead (id INTEGER PRIMARY KEY, n INTEGER)")
    conn.execute(
        "INSERT INTO temp.dead (id, n) SELECT message_id, count(*) FROM deliveries "
        "WHERE sid = ? GROUP BY message_id", (sid,),
    )
    release_dead(conn)
    conn.execute("DELETE FROM deliveries WHERE sid = ?", (sid,))
    conn.execute("DELETE FROM sessions WHERE sid = ?", (sid,))


def release_dead(conn: sqlite3.Connection) -> None:
    """Subtract `temp.dead` counts from message refs; delete bodies at zero; empty dead."""
    conn.execute(
        "UPDATE messages SET refs = refs - dead.n FROM temp.dead AS dead "
        "WHERE messages.id = dead.id"
    )
    conn.execute("DELETE FROM messages WHERE id IN (SELECT id FROM temp.dead) AND refs <= 0")
    conn.execute("DELETE FROM temp.dead")


_INSERT_OUTBOX = (
    "INSERT OR REPLACE INTO outbox (seq, topic, payload, qos, retain, properties, received_ms, "
    "rule) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)


def apply(conn: sqlite3.Connection, batch: Batch) -> int:
    """Write one batch inside the caller's transaction; returns delivery rows inserted."""
    for sid in batch.session_deletes:
        delete_session(conn, sid)
    if batch.sessions:
        conn.executemany(_UPSERT_SESSION, batch.sessions.values())
    if batch.subscriptions:
        gone = [k for k, row in batch.subscriptions.items() if row is None]
        if gone:
            conn.executemany("DELETE FROM subscriptions WHERE sid = ? AND topic_filter = ?", gone)
        rows = [row for row in batch.subscriptions.values() if row is not None]
        if rows:
            conn.executemany(_UPSERT_SUBSCRIPTION, rows)
    if batch.bodies:
        conn.executemany(_UPSERT_BODY, batch.bodies.values())
    inserted = 0
    if batch.inserts:
        rows_d = [row for per_sid in batch.inserts.values() for _d, row in per_sid.values()]
        inserted = len(rows_d)
        conn.executemany(_INSERT_DELIVERY, rows_d)
    if batch.updates:
        conn.executemany(
            "UPDATE deliveries SET packet_id = ?, released = ? WHERE sid = ? AND seq = ?",
            [(pid, rel, sid, seq) for (sid, seq), (pid, rel) in batch.updates.items()],
        )
    if batch.deletes:
        released: dict[int, int] = defaultdict(int)
        delete = "DELETE FROM deliveries WHERE sid = ? AND seq = ?"
        for sid, seq, message_id in batch.deletes:
            if conn.execute(delete, (sid, seq)).rowcount:
                released[message_id] += 1
        for message_id, n in released.items():
            if not conn.execute(
                "DELETE FROM messages WHERE id = ? AND refs <= ?", (message_id, n)
            ).rowcount:
                conn.execute("UPDATE messages SET refs = refs - ? WHERE id = ?", (n, message_id))
    if batch.qos2_del:
        conn.executemany("DELETE FROM qos2_in WHERE sid = ? AND packet_id = ?", batch.qos2_del)
    if batch.qos2_add:
        conn.executemany("INSERT OR IGNORE INTO qos2_in (sid, packet_id) VALUES (?, ?)",
                         batch.qos2_add)
    if batch.retained:
        gone_topics = [(t,) for t, row in batch.retained.items() if row is None]
        if gone_topics:
            conn.executemany("DELETE FROM retained WHERE topic = ?", gone_topics)
        rows_r = [row for row in batch.retained.values() if row is not None]
        if rows_r:
            conn.executemany(_UPSERT_RETAINED, rows_r)
    if batch.outbox_inserts:
        conn.executemany(_INSERT_OUTBOX, batch.outbox_inserts)
        # The highest seq ever inserted, kept although its row will be deleted: the outbox's
        # counter starts above it, so no seq is handed out twice (uplink_outbox.py).
        conn.execute(
            "UPDATE meta SET value = ? "
            "WHERE key = 'outbox_seq_reserved' AND CAST(value AS INTEGER) < ?",
            (str(batch.outbox_top), batch.outbox_top),
        )
    if batch.outbox_deletes:  # after the inserts: a row may come and go in one batch
        conn.executemany("DELETE FROM outbox WHERE seq = ?", [(s,) for s in batch.outbox_deletes])
    return inserted


class Writer:
    """The read-write connection and the thread that commits on it."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self.stats = CommitStats()
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="outpost-writer")

    def commit(self, batches: list[Batch]) -> None:
        """Apply `batches` in order in one transaction (runs on the writer thread)."""
        conn = self.conn
        started = time.perf_counter()
        try:
            conn.execute("BEGIN IMMEDIATE")
            inserted = 0
            for batch in batches:
                inserted += apply(conn, batch)
            conn.execute("COMMIT")
        except BaseException as exc:
            if conn.in_transaction:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
            self.stats.failures += 1
            self.stats.last_error = f"{type(exc).__name__}: {exc}"
            raise
        elapsed = time.perf_counter() - started
        stats = self.stats
        stats.commits += 1
        stats.batches += len(batches)
        stats.ops += sum(b.ops for b in batches)
        stats.rows_written += inserted
        stats.seconds_total += elapsed
        stats.last_seconds = elapsed
        stats.max_seconds = max(stats.max_seconds, elapsed)

    def close(self) -> None:
        self.executor.shutdown(wait=True)
        self.conn.close()
