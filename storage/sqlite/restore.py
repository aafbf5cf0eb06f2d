"""Reading the store back: the state `SqliteStore.restore()` hands the broker at start, and
the pages of queued deliveries `load_deliveries()` reads as a queue drains.

Functions of a sqlite3 connection and a `Clock`; the store owns the connections, the
transaction and the counters. `prune_expired` runs inside the store's write transaction
before anything is read: sessions that were online when the process ended went offline at
the database's last write, and whatever expired by the wall clock since is deleted, so the
broker never sees it.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from gateway.broker.contracts.hooks import RestoredSession
from gateway.broker.core.inflight import Delivery
from gateway.broker.core.message import QUEUED_OVERHEAD, Message
from gateway.broker.core.session import NEVER_EXPIRES
from storage.sqlite.rows import (
    Clock,
    delivery_from,
    message_from,
    options_from,
    record_from,
    retained_from,
)
from storage.sqlite.writer import delete_session, release_dead

_DELIVERY_COLUMNS = (
    "d.seq, d.qos, d.retain, d.subscription_ids, d.packet_id, d.released, "
    "m.id, m.topic, m.payload, m.qos, m.retain, m.properties, m.expires_ms"
)


@dataclass(frozen=True)
class Pruned:
    """What `prune_expired` deleted."""

    sessions: int = 0
    queued: int = 0
    retained: int = 0

    def __bool__(self) -> bool:
        return bool(self.sessions or self.queued or self.retained)


def prune_expired(conn: sqlite3.Connection, now_ms: int, last_alive_ms: int) -> Pruned:
    """Mark sessions left online as offline since `last_alive_ms`; delete what has expired.

    Runs inside the caller's transaction.
    """
    conn.execute(
        "UPDATE sessions SET disconnected_ms = ? WHERE disconnected_ms IS NULL",
        (last_alive_ms,),
    )
    expired = [int(r[0]) for r in conn.execute(
        "SELECT sid FROM sessions WHERE expiry_interval != ? "
        "AND disconnected_ms + expiry_interval * 1000 <= ?", (NEVER_EXPIRES, now_ms))]
    for sid in expired:
        delete_session(conn, sid)
    orphans = [sid for sid in _distinct_sids(conn) if not conn.execute(
        "SELECT 1 FROM sessions WHERE sid = ?", (sid,)).fetchone()]
    for sid in orphans:
        delete_session(conn, sid)
    conn.execute("DELETE FROM qos2_in WHERE sid NOT IN (SELECT sid FROM sessions)")
    dropped = 0
    if conn.execute(
        "SELECT 1 FROM messages WHERE expires_ms <= ? LIMIT 1", (now_ms,)
    ).fetchone():
        conn.execute("CREATE TEMP TABLE IF NOT EXISTS dead (id INTEGER PRIMARY KEY, n)")
        conn.execute(
            "INSERT INTO temp.dead (id, n) SELECT message_id, count(*) FROM deliveries "
            "WHERE packet_id = 0 AND message_id IN "
            "(SELECT id FROM messages WHERE expires_ms <= ?) GROUP BY message_id",
            (now_ms,),
        )
        dropped = conn.execute(
            "DELETE FROM deliveries WHERE packet_id = 0 AND message_id IN "
            "(SELECT id FROM temp.dead)").rowcount
        release_dead(conn)
    expired_retained = conn.execute(
        "DELETE FROM retained WHERE expires_ms <= ?", (now_ms,)).rowcount
    return Pruned(len(expired), dropped, expired_retained)


def read_retained(conn: sqlite3.Connection, clock: Clock) -> list[Message]:
    """Every retained message."""
    return [retained_from(row, clock) for row in conn.execute(
        "SELECT topic, payload, qos, properties, expires_ms FROM retained")]


def read_sessions(
    conn: sqlite3.Connection, clock: Clock, queue_page: int
) -> list[RestoredSession]:
    """Every session with its in-flight deliveries and the first `queue_page` queued ones."""
    subs: dict[int, dict[str, Any]] = {}
    for row in conn.execute(
        "SELECT sid, topic_filter, qos, no_local, retain_as_published, retain_handling, "
        "subscription_id FROM subscriptions"
    ):
        subs.setdefault(int(row[0]), {})[str(row[1])] = options_from(row[2:])
    awaiting: dict[int, set[int]] = {}
    for sid, packet_id in conn.execute("SELECT sid, packet_id FROM qos2_in"):
        awaiting.setdefault(int(sid), set()).add(int(packet_id))
    messages: dict[int, Message] = {}
    sessions: list[RestoredSession] = []
    for row in conn.execute(
        "SELECT sid, disconnected_ms, client_id, protocol_level, expiry_interval, "
        "will_topic, will_payload, will_qos, will_retain, will_properties, will_delay "
        "FROM sessions ORDER BY sid"
    ).fetchall():
        sid = int(row[0])
        record = record_from(row[2:], subs.get(sid, {}), clock, row[1])
        inflight = read_deliveries(
            conn, clock, "d.sid = ? AND d.packet_id != 0 ORDER BY d.seq", (sid,), messages)
        queued = read_deliveries(
            conn, clock, "d.sid = ? AND d.packet_id = 0 ORDER BY d.seq LIMIT ?",
            (sid, queue_page), messages)
        count, size = conn.execute(
            "SELECT count(*), total(size) FROM deliveries WHERE sid = ? AND packet_id = 0",
            (sid,)).fetchone()
        spilled = int(count) - len(queued)
        # in the queue's units (Message.queued_cost): stored bytes + per-message overhead
        spilled_bytes = (int(size) - sum(d.message.size for d in queued)
                         + spilled * QUEUED_OVERHEAD)
        sessions.append(RestoredSession(
            record, inflight + queued, spilled, spilled_bytes, awaiting.get(sid, set()),
        ))
    return sessions


def read_deliveries(
    conn: sqlite3.Connection, clock: Clock, where: str, args: tuple[Any, ...],
    messages: dict[int, Message] | None = None,
) -> list[Delivery]:
    """Deliveries joined with their messages; `messages` shares one Message per stored id."""
    out: list[Delivery] = []
    for row in conn.execute(
        f"SELECT {_DELIVERY_COLUMNS} FROM deliveries d "
        f"JOIN messages m ON m.id = d.message_id WHERE {where}", args,
    ):
        mid = int(row[6])
        message = messages.get(mid) if messages is not None else None
        if message is None:
            message = message_from(row[6:], clock)
            if messages is not None:
                messages[mid] = message
        out.append(delivery_from(row[:6], message))
    return out


def _distinct_sids(conn: sqlite3.Connection) -> Iterable[int]:
    """Every sid present in deliveries, by hopping along the primary key (no full scan)."""
    last = -1
    while True:
        row = conn.execute(
            "SELECT sid FROM deliveries WHERE sid > ? ORDER BY sid LIMIT 1", (last,)
        ).fetchone()
        if row is None:
            return
        last = int(row[0])
        yield last
