"""What `outpost db ...` shows and does: library functions over the database file.

Theory of operation: every function except `vacuum` opens its own *read-only* connection
(`mode=ro`, `query_only`), so it can run next to a live broker: in WAL mode a reader sees the
last committed state and never blocks the writer (a long read only delays the next
checkpoint). Nothing here holds a read transaction longer than one query.

`vacuum` rewrites the file and therefore needs the broker stopped: it takes the state
directory's lock (the one a running broker holds) and refuses when it cannot. It checkpoints
the WAL, writes a compact copy with `VACUUM INTO`, fsyncs it and renames it over the original
(atomic), so a power cut during a vacuum leaves either the old or the new file.

`backup` copies the database of a *running* broker with SQLite's online backup API. A copy made
in steps restarts from scratch whenever another process commits between two steps, and the
broker commits every few milliseconds, so in WAL mode (always, for an outpost store) the copy
holds one read transaction from the first step to the last: every step reads the same snapshot
(no restarts, a consistent copy of the last commit before the backup began), and a WAL reader
never blocks the writer — the broker keeps committing throughout; only checkpoints cannot pass
the snapshot, so the WAL grows until the copy ends. The copy goes `pages_per_step` pages at a
time with a short sleep between steps, which caps the I/O it takes from the broker (an SD
card). It is written to a temporary file next to the destination, checked (`quick_check`),
fsynced and renamed into place, so a destination name never holds a partial copy.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gateway.broker.codec.topics import topic_matches
from storage.sqlite import recovery, schema
from storage.sqlite.rows import sub_ids_from

SIDE_FILES = ("-wal", "-shm", "-journal")  # SQLite's files next to a database
TABLES = ("sessions", "subscriptions", "messages", "deliveries", "qos2_in", "retained", "outbox")


def db_path(state_dir: Path) -> Path:
    return Path(state_dir) / recovery.DB_NAME


@contextmanager
def reading(state_dir: Path) -> Iterator[sqlite3.Connection]:
    """A read-only connection to the database of `state_dir`."""
    path = db_path(state_dir)
    if not path.exists():
        raise FileNotFoundError(f"no database at {path}")
    conn = recovery.connect(path, readonly=True)
    try:
        yield conn
    finally:
        conn.close()


def _age(now_ms: int, then_ms: int | None) -> float | None:
    return None if then_ms is None else round((now_ms - then_ms) / 1000, 1)


def stats(state_dir: Path) -> dict[str, Any]:
    """Sizes, rows per table, queue depths and oldest message ages, WAL size."""
    path = db_path(state_dir)
    now_ms = round(time.time() * 1000)
    with reading(state_dir) as conn:
        page_size = int(conn.execute("PRAGMA page_size").fetchone()[0])
        pages = int(conn.execute("PRAGMA page_count").fetchone()[0])
        free = int(conn.execute("PRAGMA freelist_count").fetchone()[0])
        rows = {t: int(conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0]) for t in TABLES}
        meta = {str(k): str(v) for k, v in conn.execute("SELECT key, value FROM meta")}
        queues = [
            {"client_id": cid, "queued": int(n), "bytes": int(b or 0), "oldest_age_s": _age(
                now_ms, _oldest(conn, sid))}
            for sid, cid, n, b in conn.execute(
                "SELECT s.sid, s.client_id, count(d.seq), total(d.size) FROM sessions s "
                "JOIN deliveries d ON d.sid = s.sid GROUP BY s.sid ORDER BY count(d.seq) DESC")
        ]
        oldest_stored = conn.execute("SELECT min(stored_ms) FROM messages").fetchone()[0]
    wal = Path(f"{path}-wal")
    return {
        "path": str(path),
        "file_bytes": path.stat().st_size,
        "wal_bytes": wal.stat().st_size if wal.exists() else 0,
        "page_size": page_size,
        "pages": pages,
        "free_pages": free,
        "live_bytes": (pages - free) * page_size,
        "schema_version": meta.get("schema_version"),
        "epoch": meta.get("epoch"),
        "gateway_id": meta.get("gateway_id"),
        "rows": rows,
        "queues": queues,
        "oldest_stored_age_s": _age(now_ms, oldest_stored),
    }


def _oldest(conn: sqlite3.Connection, sid: int) -> int | None:
    row = conn.execute(
        "SELECT m.stored_ms FROM deliveries d JOIN messages m ON m.id = d.message_id "
        "WHERE d.sid = ? ORDER BY d.seq LIMIT 1", (sid,)).fetchone()
    return None if row is None else int(row[0])


def sessions(state_dir: Path) -> list[dict[str, Any]]:
    """Every stored session with its subscriptions and queue depth."""
    now_ms = round(time.time() * 1000)
    out: list[dict[str, Any]] = []
    with reading(state_dir) as conn:
        for sid, cid, level, expiry, disc, will_topic in conn.execute(
            "SELECT sid, client_id, protocol_level, expiry_interval, disconnected_ms, will_topic "
            "FROM sessions ORDER BY client_id"
        ).fetchall():
            subs = {str(f): int(q) for f, q in conn.execute(
                "SELECT topic_filter, qos FROM subscriptions WHERE sid = ?", (sid,))}
            queued, inflight = conn.execute(
                "SELECT count(*) FILTER (WHERE packet_id = 0), "
                "count(*) FILTER (WHERE packet_id != 0) FROM deliveries WHERE sid = ?", (sid,)
            ).fetchone()
            awaiting = conn.execute(
                "SELECT count(*) FROM qos2_in WHERE sid = ?", (sid,)).fetchone()[0]
            out.append({
                "client_id": cid, "protocol_level": level, "expiry_interval": expiry,
                "online": disc is None, "offline_for_s": _age(now_ms, disc),
                "will_topic": will_topic, "subscriptions": subs, "queued": int(queued),
                "inflight": int(inflight), "qos2_awaiting_release": int(awaiting),
            })
    return out


@dataclass
class QueuedRow:
    """One stored delivery as `outpost db queue` prints it."""

    seq: int
    packet_id: int
    released: bool
    qos: int
    topic: str
    payload_bytes: int
    age_s: float | None
    subscription_ids: tuple[int, ...]


def queue(state_dir: Path, client_id: str, limit: int = 100, after_seq: int = 0) -> list[QueuedRow]:
    """The first `limit` stored deliveries of `client_id` (in flight and queued), in order."""
    now_ms = round(time.time() * 1000)
    with reading(state_dir) as conn:
        row = conn.execute("SELECT sid FROM sessions WHERE client_id = ?", (client_id,)).fetchone()
        if row is None:
            raise LookupError(f"no stored session for client id {client_id!r}")
        return [
            QueuedRow(seq, pid, bool(rel), qos, topic, int(size), _age(now_ms, stored),
                      sub_ids_from(sub_ids))
            for seq, pid, rel, qos, topic, size, stored, sub_ids in conn.execute(
                "SELECT d.seq, d.packet_id, d.released, d.qos, m.topic, length(m.payload), "
                "m.stored_ms, d.subscription_ids FROM deliveries d "
                "JOIN messages m ON m.id = d.message_id "
                "WHERE d.sid = ? AND d.seq > ? ORDER BY d.seq LIMIT ?",
                (row[0], after_seq, limit))
        ]


def retained(state_dir: Path, topic_filter: str | None = None) -> list[dict[str, Any]]:
    """Retained messages, optionally only those matching `topic_filter`."""
    now_ms = round(time.time() * 1000)
    out: list[dict[str, Any]] = []
    with reading(state_dir) as conn:
        for topic, qos, size, expires in conn.execute(
            "SELECT topic, qos, length(payload), expires_ms FROM retained ORDER BY topic"
        ):
            if topic_filter is not None and not topic_matches(topic_filter, topic):
                continue
            out.append({
                "topic": topic, "qos": qos, "payload_bytes": size,
                "expires_in_s": None if expires is None else round((expires - now_ms) / 1000, 1),
            })
    return out


def check(state_dir: Path, full: bool = False) -> list[str]:
    """`PRAGMA quick_check` (or `integrity_check`); returns the problems found (empty: sound)."""
    pragma = "integrity_check" if full else "quick_check"
    try:
        with reading(state_dir) as conn:
            rows = [str(r[0]) for r in conn.execute(f"PRAGMA {pragma}")]
            tables = {str(r[0]) for r in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table'")}
    except sqlite3.Error as exc:
        return [f"{type(exc).__name__}: {exc}"]
    problems = [] if rows == ["ok"] else rows
    missing = [t for t in (*TABLES, "meta") if t not in tables]
    if missing:
        problems.append(f"missing tables: {', '.join(missing)}")
    return problems


def vacuum(state_dir: Path) -> tuple[int, int]:
    """Compact the database (broker stopped); returns file bytes before and after."""
    state_dir = Path(state_dir)
    path = db_path(state_dir)
    fd = recovery.lock_state_dir(state_dir)  # StoreLockedError while a broker runs
    try:
        conn = recovery.connect(path)
        try:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            before = path.stat().st_size
            tmp = path.with_name(path.name + ".vacuum")
            tmp.unlink(missing_ok=True)
            conn.execute("VACUUM INTO ?", (str(tmp),))
        finally:
            conn.close()
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        for suffix in ("-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
        os.replace(tmp, path)
        recovery.fsync_dir(state_dir)
        conn = recovery.connect(path)
        try:
            conn.execute("PRAGMA journal_mode = WAL")
        finally:
            conn.close()
        return before, path.stat().st_size
    finally:
        recovery.unlock(fd)


class BackupError(Exception):
    """The backup cannot be made here (the destination is the live file) or the copy is bad."""


@dataclass
class BackupResult:
    """What `backup` copied."""

    source: Path
    dest: Path
    file_bytes: int
    page_size: int
    pages: int
    steps: int
    seconds: float
    snapshot: bool  # True: one read transaction pinned the WAL snapshot for the whole copy
    rows: dict[str, int]


def backup(
    state_dir: Path, dest: Path, *, force: bool = False, pages_per_step: int = 256,
    sleep: float = 0.005, progress: Callable[[int, int], None] | None = None,
) -> BackupResult:
    """Copy the database of `state_dir` to `dest` while a broker may be running (see the module
    comment). `FileExistsError` if `dest` (or a `-wal` of it) exists, unless `force`.
    `progress(remaining, total)` is called after every step (pages). A file in rollback-journal
    mode (never an outpost store) is copied without the pinned snapshot: SQLite restarts that
    copy whenever another process writes to the file between two steps."""
    source = db_path(state_dir)
    dest = Path(dest)
    if not source.exists():
        raise FileNotFoundError(f"no database at {source}")
    if dest.is_dir():
        raise BackupError(f"{dest} is a directory; give the file name of the copy")
    if not dest.parent.is_dir():
        raise FileNotFoundError(f"no directory {dest.parent}")
    if dest.resolve() == source.resolve() or (dest.exists() and dest.samefile(source)):
        raise BackupError(f"{dest} is the live database itself")
    side = [Path(f"{dest}{suffix}") for suffix in SIDE_FILES]
    if not force and (dest.exists() or side[0].exists()):
        raise FileExistsError(f"{dest} exists (--force to overwrite it)")
    tmp = dest.with_name(f"{dest.name}.partial-{os.getpid()}")
    tmp_files = [tmp, *(Path(f"{tmp}{suffix}") for suffix in SIDE_FILES)]
    for leftover in tmp_files:
        leftover.unlink(missing_ok=True)
    started = time.monotonic()
    steps = 0

    def step(status: int, remaining: int, total: int) -> None:
        nonlocal steps
        steps += 1
        if progress is not None:
            progress(remaining, total)
        if remaining and sleep > 0:
            time.sleep(sleep)  # the broker's commits and fsyncs get the disk meanwhile

    try:
        src = recovery.connect(source, readonly=True)
        try:
            snapshot = str(src.execute("PRAGMA journal_mode").fetchone()[0]).lower() == "wal"
            out = sqlite3.connect(tmp, isolation_level=None)
            try:
                out.execute("PRAGMA synchronous = OFF")  # fsynced once, below
                if snapshot:
                    src.execute("BEGIN")
                    src.execute("SELECT count(*) FROM sqlite_master").fetchone()  # pins it
                try:
                    src.backup(out, pages=max(1, pages_per_step), progress=step)
                finally:
                    if snapshot:
                        src.execute("COMMIT")
            finally:
                out.close()
        finally:
            src.close()
        seconds = time.monotonic() - started
        conn = sqlite3.connect(tmp, isolation_level=None)  # a fresh connection: from the file
        try:
            problems = [str(r[0]) for r in conn.execute("PRAGMA quick_check")]
            if problems != ["ok"]:
                raise BackupError("the copy fails quick_check: " + "; ".join(problems[:5]))
            schema.mark_for_new_epoch(conn)  # restored, it must never reuse an uplink id
            rows = {t: int(conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0])
                    for t in TABLES}
            page_size = int(conn.execute("PRAGMA page_size").fetchone()[0])
            pages = int(conn.execute("PRAGMA page_count").fetchone()[0])
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        finally:
            conn.close()  # the last connection: the copy is one file again (no -wal, -shm)
        os.chmod(tmp, source.stat().st_mode & 0o777)  # as private as the live file
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        for stale in side:  # a -wal left by an overwritten copy would be replayed onto ours
            stale.unlink(missing_ok=True)
        os.replace(tmp, dest)
        recovery.fsync_dir(dest.parent)
    except BaseException:
        for leftover in tmp_files:
            leftover.unlink(missing_ok=True)
        raise
    return BackupResult(source, dest, dest.stat().st_size, page_size, pages, steps,
                        round(seconds, 3), snapshot, rows)
