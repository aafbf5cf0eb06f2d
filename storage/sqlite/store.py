"""`SqliteStore`: the broker's persistence hooks on SQLite (durability "full" and "normal").

Theory of operation
-------------------
Events (`session_saved`, `qos_stored`, ...) run on the event loop and only record the change
in the current `Batch` (see `storage.sqlite.writer`), so they cost a few dict operations.
`flush()` is the only awaitable. It joins the *next* commit: the commit task waits
(storage/sqlite/commit_pacing.py: after a burst only until the input already there is read,
for a stream `commit_interval_ms` and longer while work keeps arriving), takes the batch, and
runs one transaction on the writer thread while the loop goes on; every flush that arrives
meanwhile joins the commit after it (group commit). Events no flush asks for are committed by
an idle commit within IDLE_COMMIT_SECONDS, or, while the broker holds acknowledgements and has
announced its flush (`flush_coming`), by that flush. A commit that fails rolls back, the
flushes waiting on it raise `StoreError`, and its batches are kept and written in front of
the next commit.

Identifiers: `store_seq` comes from one counter shared by every session (so it increases per
client), `Message.store_id` from another, each continuing after the largest value on disk;
a session is known on disk by a small integer `sid`.

Reads (storage/sqlite/restore.py): `restore()` (once, at start) drops expired sessions and
expired queued messages by their wall-clock times, then returns each session's in-flight
deliveries plus the first `queue_page` queued ones and how many more are on disk.
`load_deliveries()` reads the next page through a separate read-only connection on the loop
thread (a range scan of the `(sid, seq)` primary key), merged with rows that are recorded but
not yet committed.

`accepting()` is False while the live part of the database exceeds `max_db_bytes` or the
file system has less than `min_free_bytes` free; it is re-evaluated at most once a second.

A full disk (storage/sqlite/space.py): a commit that fails with SQLITE_FULL deletes the space
reserve and is retried at once in its room (so acknowledgements, deletes and promised
sessions commit), and the store stops accepting until the reserve can be made again; after
every commit the WAL is truncated when it is long or the disk is short.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gateway.broker.contracts.hooks import (
    BrokerHooks,
    RestoredState,
    SessionRecord,
)
from gateway.broker.core.inflight import Delivery
from gateway.broker.core.message import Message
from storage.config import StorageConfig
from storage.sqlite import recovery
from storage.sqlite.commit_pacing import CommitPacer
from storage.sqlite.restore import prune_expired, read_deliveries, read_retained, read_sessions
from storage.sqlite.rows import (
    Clock,
    SessionRow,
    SubscriptionRow,
    body_row,
    delivery_row,
    retained_row,
    session_row,
    subscription_rows,
)
from storage.sqlite.space import (
    RESERVE_BYTES,
    RESERVE_NAME,
    SpaceReserve,
    bound_wal,
    disk_full,
    free_bytes,
)
from storage.sqlite.writer import Batch, Writer

log = logging.getLogger("outpost.storage")

# Flash: a commit rewrites every page it touches (about 2 + rows/rows-per-page), so smaller
# pages mean fewer bytes per commit; 1 KiB halves the WAL volume of 4 KiB at 1,000 msg/s
# (docs/storage.md, bench/storage/write_amp.py). Fixed when the file is created.
PAGE_SIZE = 1024
WAL_AUTOCHECKPOINT = 4000  # pages (4 MiB) in the WAL before a commit checkpoints it
IDLE_COMMIT_SECONDS = 0.1  # events nobody flushes (acks from subscribers) are committed by then
SPACE_CHECK_SECONDS = 1.0

class StoreError(Exception):
    """A commit failed: nothing of its batch counts as stored."""


class SqliteStore(BrokerHooks):
    """Persistent sessions, queues, in-flight state and retained messages in `outpost.db`."""

    durable = True

    def __init__(
        self,
        state_dir: Path,
        *,
        durability: str = "full",
        gateway_id: str = "outpost",
        commit_interval_ms: float = 2.0,
        queue_page: int = 1000,
        max_db_bytes: int = 2 << 30,
        min_free_bytes: int = 64 << 20,
        page_size: int = PAGE_SIZE,
        wal_autocheckpoint: int = WAL_AUTOCHECKPOINT,
        reserve_bytes: int = RESERVE_BYTES,
        monotonic: Callable[[], float] | None = None,
        wall: Callable[[], float] | None = None,
    ) -> None:
        if durability not in ("full", "normal"):
            raise ValueError(f"durability {durability!r}: SqliteStore is for 'full' or 'normal'")
        self.state_dir = Path(state_dir)
        self.path = self.state_dir / recovery.DB_NAME
        self.durability = durability
        self.commit_interval = commit_interval_ms / 1000
        self.queue_page = queue_page
        self.max_db_bytes = max_db_bytes
        self.min_free_bytes = min_free_bytes
        self._lock_fd = recovery.lock_state_dir(self.state_dir)
        self.reserve = SpaceReserve(self.state_dir / RESERVE_NAME, reserve_bytes)
        if free_bytes(self.state_dir) < reserve_bytes:
            self.reserve.release()  # opening and restoring need room: take it from here
        try:
            self._last_alive_ms = _last_write_ms(self.path)
            self.opened = recovery.open_database(self.path, gateway_id, page_size)
            self.clock = Clock(monotonic or _loop_time(), wall)
            wconn = recovery.connect(self.path)
            self.page_size = int(wconn.execute("PRAGMA page_size").fetchone()[0])
            self.wal_limit = int(wal_autocheckpoint) * self.page_size
            for pragma in (
                "journal_mode = WAL",
                f"synchronous = {'FULL' if durability == 'full' else 'NORMAL'}",
                f"wal_autocheckpoint = {int(wal_autocheckpoint)}",
                f"journal_size_limit = {int(wal_autocheckpoint) * self.page_size * 2}",
                "temp_store = MEMORY",
                "cache_size = -8192",
            ):
                wconn.execute(f"PRAGMA {pragma}")
            self.writer = Writer(wconn)
            self.reader = recovery.connect(self.path)
            self.reader.execute("PRAGMA query_only = 1")
        except BaseException:
            recovery.unlock(self._lock_fd)
            raise
        self.meta = {str(k): str(v) for k, v in wconn.execute("SELECT key, value FROM meta")}
        self._sids: dict[str, int] = {}
        self._saved_rows: dict[int, SessionRow] = {}
        self._saved_subs: dict[int, dict[str, SubscriptionRow]] = {}
        self._load_counters()
        self._batch = Batch()
        self._inflight: list[Batch] = []  # handed to the writer thread, commit running
        self._failed: list[Batch] = []  # commit failed: written in front of the next one
        self._waiter: asyncio.Future[None] | None = None  # the next commit
        self._committing: asyncio.Future[None] | None = None  # the running commit
        self._first_request = 0.0
        self.pacer = CommitPacer(self.commit_interval)
        self._task: asyncio.Task[None] | None = None
        self._accepting = True
        self._space_checked = -1e18
        self._loop: asyncio.AbstractEventLoop | None = _running_loop()
        self._scheduled = False  # an idle commit is scheduled
        self._idle_not_before = 0.0  # loop time of a flush the broker has promised
        self._idle_tasks: set[asyncio.Task[None]] = set()
        self.full_events = 0
        self._closed = False
        self.reserve.ensure(free_bytes(self.state_dir))

    @classmethod
    def from_config(
        cls, storage: StorageConfig, state_dir: Path, gateway_id: str, **kwargs: Any
    ) -> SqliteStore:
        """The store a `[storage]` section asks for."""
        return cls(
            state_dir, durability=storage.durability, gateway_id=gateway_id,
            commit_interval_ms=storage.commit_interval_ms, queue_page=storage.queue_page,
            max_db_bytes=storage.max_db_bytes, min_free_bytes=storage.min_free_bytes, **kwargs,
        )

    # -- identifiers ---------------------------------------------------------------------

    def _load_counters(self) -> None:
        conn = self.writer.conn

        def top(sql: str) -> int:
            return int(conn.execute(sql).fetchone()[0] or 0)

        self._next_sid = top("SELECT max(sid) FROM sessions") + 1
        self._next_seq = top("SELECT max(seq) FROM deliveries") + 1
        self._next_mid = top("SELECT max(id) FROM messages") + 1
        self._sids.clear()
        self._saved_rows.clear()
        self._saved_subs.clear()
        for row in conn.execute(
            "SELECT sid, client_id, protocol_level, expiry_interval, disconnected_ms, will_topic, "
            "will_payload, will_qos, will_retain, will_properties, will_delay FROM sessions"
        ):
            sid = int(row[0])
            self._sids[str(row[1])] = sid
            self._saved_rows[sid] = tuple(row)
            self._saved_subs[sid] = {}
        for row in conn.execute(
            "SELECT sid, topic_filter, qos, no_local, retain_as_published, retain_handling, "
            "subscription_id FROM subscriptions"
        ):
            subs = self._saved_subs.get(int(row[0]))
            if subs is not None:
                subs[str(row[1])] = tuple(row)

    def _sid(self, client_id: str) -> int:
        sid = self._sids.get(client_id)
        if sid is None:
            sid = self._next_sid
            self._next_sid += 1
            self._sids[client_id] = sid
        return sid

    # -- events (event loop, cheap) ------------------------------------------------------

    def session_saved(self, record: SessionRecord) -> None:
        sid = self._sid(record.client_id)
        batch = self._batch
        row = session_row(sid, record, self.clock)
        if self._saved_rows.get(sid) != row:
            self._saved_rows[sid] = row
            batch.sessions[sid] = row
        old = self._saved_subs.get(sid, {})
        new = {r[1]: r for r in subscription_rows(sid, record.subscriptions)}
        for topic_filter, sub in new.items():
            if old.get(topic_filter) != sub:
                batch.subscriptions[(sid, topic_filter)] = sub
        for topic_filter in old.keys() - new.keys():
            batch.subscriptions[(sid, topic_filter)] = None
        self._saved_subs[sid] = new
        self._count(batch)

    def session_deleted(self, client_id: str) -> None:
        sid = self._sids.pop(client_id, None)
        if sid is None:
            return
        batch = self._batch
        batch.cancel_session(sid)
        batch.session_deletes.append(sid)
        self._saved_rows.pop(sid, None)
        self._saved_subs.pop(sid, None)
        self._count(batch)

    def qos_stored(self, client_id: str, delivery: Delivery) -> None:
        sid = self._sids.get(client_id) or self._sid(client_id)
        seq = self._next_seq
        self._next_seq = seq + 1
        delivery.store_seq = seq
        message = delivery.message
        batch = self._batch
        mid = message.store_id
        if not mid:  # a new body: certainly not in the batch yet
            mid = message.store_id = self._next_mid
            self._next_mid = mid + 1
            batch.bodies[mid] = body_row(message, self.clock)
        else:
            known = batch.bodies.get(mid)
            if known is None:
                batch.bodies[mid] = body_row(message, self.clock)
            else:
                known[-1] += 1
        per_sid = batch.inserts.get(sid)
        if per_sid is None:
            per_sid = batch.inserts[sid] = {}
        per_sid[seq] = (delivery, delivery_row(sid, delivery))
        self._count(batch)
        self.pacer.grew(batch.ops)

    def qos_updated(self, client_id: str, delivery: Delivery) -> None:
        sid = self._sids.get(client_id)
        seq = delivery.store_seq
        if sid is None or not seq:
            return
        batch = self._batch
        per_sid = batch.inserts.get(sid)
        if per_sid is not None and seq in per_sid:
            per_sid[seq] = (delivery, delivery_row(sid, delivery))
        else:
            batch.updates[(sid, seq)] = (delivery.packet_id, int(delivery.released))
        self._count(batch)

    def qos_completed(self, client_id: str, delivery: Delivery) -> None:
        sid = self._sids.get(client_id)
        seq = delivery.store_seq
        if sid is None or not seq:
            return
        batch = self._batch
        per_sid = batch.inserts.get(sid)
        if per_sid is not None and per_sid.pop(seq, None) is not None:
            batch.drop_ref(delivery.message.store_id)
            self.writer.stats.cancelled += 1
            return
        batch.updates.pop((sid, seq), None)
        batch.deletes.append((sid, seq, delivery.message.store_id))
        self._count(batch)

    def qos2_received(self, client_id: str, packet_id: int) -> None:
        key = (self._sid(client_id), packet_id)
        batch = self._batch
        batch.qos2_del.discard(key)
        batch.qos2_add.add(key)
        self._count(batch)

    def qos2_released(self, client_id: str, packet_id: int) -> None:
        sid = self._sids.get(client_id)
        if sid is None:
            return
        key = (sid, packet_id)
        batch = self._batch
        batch.qos2_add.discard(key)
        batch.qos2_del.add(key)
        self._count(batch)

    def retained_changed(self, topic: str, message: Message | None) -> None:
        batch = self._batch
        batch.retained[topic] = None if message is None else retained_row(message, self.clock)
        self._count(batch)

    def outbox_batch(self) -> Batch:
        """The batch the next group commit writes (the uplink outbox records into it)."""
        batch = self._batch
        self._count(batch)
        return batch

    def _count(self, batch: Batch) -> None:
        """One more change in `batch`: a commit must come even if no flush asks for one."""
        batch.ops += 1
        if not self._scheduled:
            self._schedule()

    # -- group commit ----------------------------------------------------------------------

    def _schedule(self) -> None:
        """Commit events that no flush asks for (a subscriber's PUBACK) within a bound."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        self._scheduled = True
        loop.call_later(IDLE_COMMIT_SECONDS, self._idle_commit)

    def flush_coming(self, at: float) -> None:
        """The broker flushes by loop time `at`: the idle commit waits for that flush."""
        self._idle_not_before = max(self._idle_not_before, at)

    def _idle_commit(self) -> None:
        self._scheduled = False
        loop = self._loop
        if self._closed or loop is None or (not self._batch and not self._failed):
            return
        if loop.time() < self._idle_not_before:  # a held publisher's flush is coming
            self._schedule()  # look again soon: the flush resets the promise
            return
        task = loop.create_task(self._quiet_flush(), name="outpost-store-idle-commit")
        self._idle_tasks.add(task)
        task.add_done_callback(self._idle_tasks.discard)

    async def _quiet_flush(self) -> None:
        with contextlib.suppress(StoreError):  # logged; the batch is kept for the next commit
            await self.flush()

    async def flush(self) -> None:
        loop = asyncio.get_running_loop()
        if loop is not self._loop:
            self._loop, self._scheduled = loop, False
        if not self._batch and not self._failed:
            if self._committing is not None:
                await asyncio.shield(self._committing)
            return
        if self._waiter is None:
            self._waiter = loop.create_future()
            self._waiter.add_done_callback(_consume)
            self._first_request = loop.time()
        waiter = self._waiter
        if self._task is None:
            self._task = loop.create_task(self._commit_loop(), name="outpost-store-commit")
        await asyncio.shield(waiter)

    async def _commit_loop(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while self._waiter is not None:
                await self.pacer.wait(loop, self._first_request, self._ops)
                waiter, self._waiter = self._waiter, None
                self._idle_not_before = 0.0  # this commit is the promised flush
                batches = [*self._failed, self._batch]
                self._batch = Batch()
                self._failed = []
                if not any(batch.writes() for batch in batches):
                    waiter.set_result(None)  # everything cancelled out: nothing to commit
                    continue
                self._inflight = batches
                self._committing = waiter
                try:
                    await loop.run_in_executor(self.writer.executor, self._commit, batches)
                    if self._batch.ops:  # work arrived meanwhile: a stream
                        self.pacer.streaming = True
                except Exception as exc:
                    self._failed = [b for b in batches if b]
                    log.error("store commit failed (%s): kept for the next commit", exc)
                    if disk_full(exc):
                        self._refuse_until_room()
                    if not waiter.done():
                        waiter.set_exception(StoreError(f"commit failed: {exc}"))
                else:
                    for batch in batches:
                        for callback in batch.on_committed:
                            callback()
                    if not waiter.done():
                        waiter.set_result(None)
                finally:
                    self._inflight = []
                    self._committing = None
        finally:
            self._task = None

    def _ops(self) -> int:
        return self._batch.ops

    def _commit(self, batches: list[Batch]) -> None:
        """One group commit on the writer thread; on a full disk, again in the reserve's room."""
        try:
            self.writer.commit(batches)
        except sqlite3.Error as exc:
            if not disk_full(exc) or not self.reserve.release():
                raise
            log.warning("disk full: released the space reserve to commit %d change(s)",
                        sum(b.ops for b in batches))
            self._space_checked = -1e18  # the next accepting() looks at the disk again
            self.writer.commit(batches)
        self._bound_wal()

    def _bound_wal(self) -> None:
        """Keep the WAL from eating the headroom (writer thread, after a commit)."""
        try:
            bound_wal(self.writer.conn, Path(f"{self.path}-wal"), self.wal_limit,
                      free_bytes(self.state_dir))
        except sqlite3.Error as exc:  # the commit stands; the next one tries again
            log.warning("WAL checkpoint failed: %s", exc)

    def _refuse_until_room(self) -> None:
        """The disk is full: refuse new QoS 1/2 messages until `accepting` finds room."""
        self._space_checked = time.monotonic()
        if self._accepting:
            self._accepting = False
            self.full_events += 1
            log.warning("disk full: refusing new QoS 1/2 messages until there is room again")

    # -- reads -----------------------------------------------------------------------------

    def restore(self) -> RestoredState:
        """Drop what expired while the broker was down, then hand back everything else."""
        try:
            return self.writer.executor.submit(self._restore).result()
        except sqlite3.Error as exc:
            if not disk_full(exc) or not self.reserve.release():
                raise
            self._refuse_until_room()
            return self.writer.executor.submit(self._restore).result()

    def _restore(self) -> RestoredState:
        conn = self.writer.conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            pruned = prune_expired(conn, self.clock.now_ms(), self._last_alive_ms)
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        if pruned:
            log.info(
                "restore: dropped %d expired session(s), %d expired queued message(s), "
                "%d expired retained message(s)", pruned.sessions, pruned.queued,
                pruned.retained,
            )
        self._load_counters()
        return RestoredState(read_sessions(conn, self.clock, self.queue_page),
                             read_retained(conn, self.clock))

    def load_deliveries(self, client_id: str, after_seq: int, limit: int) -> list[Delivery]:
        sid = self._sids.get(client_id)
        if sid is None or limit <= 0:
            return []
        pending = [*self._failed, *self._inflight, self._batch]  # not yet (known) committed
        gone: set[int] = set()
        for batch in pending:
            gone.update(seq for s, seq, _m in batch.deletes if s == sid and seq > after_seq)
            gone.update(seq for (s, seq), (pid, _r) in batch.updates.items() if s == sid and pid)
        found: dict[int, Delivery] = {}
        for delivery in read_deliveries(
            self.reader, self.clock,
            "d.sid = ? AND d.seq > ? AND d.packet_id = 0 ORDER BY d.seq LIMIT ?",
            (sid, after_seq, limit + len(gone)),
        ):
            found[delivery.store_seq] = delivery
        for batch in pending:
            for seq, (delivery, _row) in batch.inserts.get(sid, {}).items():
                if seq > after_seq and not delivery.packet_id:
                    found.setdefault(seq, delivery)
        return [found[seq] for seq in sorted(found) if seq not in gone][:limit]

    def accepting(self) -> bool:
        now = time.monotonic()
        if now - self._space_checked < SPACE_CHECK_SECONDS:
            return self._accepting
        self._space_checked = now
        used, free = self.space()
        accepting = (used <= self.max_db_bytes and free >= self.min_free_bytes
                     and self.reserve.ensure(free))
        if accepting != self._accepting:
            self._accepting = accepting
            if accepting:
                log.info("store has room again (%d bytes used, %d free): accepting", used, free)
            else:
                self.full_events += 1
                log.warning(
                    "store full (%d bytes used, max %d; %d bytes free, min %d): refusing new "
                    "QoS 1/2 messages", used, self.max_db_bytes, free, self.min_free_bytes,
                )
        return accepting

    def space(self) -> tuple[int, int]:
        """(bytes of live database pages, bytes free on the file system)."""
        pages = int(self.reader.execute("PRAGMA page_count").fetchone()[0])
        unused = int(self.reader.execute("PRAGMA freelist_count").fetchone()[0])
        return (pages - unused) * self.page_size, free_bytes(self.state_dir)

    # -- statistics and shutdown -----------------------------------------------------------

    def stats(self) -> dict[str, float | int | str]:
        """Commit figures for `$SYS` (counters since start)."""
        s = self.writer.stats
        return {
            "commits": s.commits, "commit_failures": s.failures, "events": s.ops,
            "rows_written": s.rows_written, "deliveries_cancelled": s.cancelled,
            "commit_seconds_total": s.seconds_total, "commit_seconds_last": s.last_seconds,
            "commit_seconds_max": s.max_seconds,
            "batch_events_avg": s.ops / s.commits if s.commits else 0.0,
            "store_full_events": self.full_events,
            "files_moved_aside": 1 if self.opened.moved else 0,
            "write_bytes": _proc_write_bytes(),
        }

    async def close(self) -> None:
        if self._closed:
            return
        try:
            for _attempt in range(2):
                try:
                    await self.flush()
                    break
                except StoreError:
                    continue
            if self._task is not None:
                await self._task
        finally:
            self._closed = True
            loop = asyncio.get_running_loop()
            try:
                await loop.run_in_executor(self.writer.executor, self._checkpoint)
            finally:
                self.reader.close()
                self.writer.close()
                recovery.unlock(self._lock_fd)

    def close_sync(self) -> None:
        """Close without an event loop (tests and tools): nothing pending is written."""
        if self._closed:
            return
        self._closed = True
        self.reader.close()
        self.writer.close()
        recovery.unlock(self._lock_fd)

    def _checkpoint(self) -> None:
        try:
            self.writer.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        except sqlite3.Error as exc:
            log.warning("checkpoint at close failed: %s", exc)


def _consume(future: asyncio.Future[None]) -> None:
    if not future.cancelled():
        future.exception()  # mark retrieved: every waiter already saw it


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def _loop_time() -> Callable[[], float]:
    try:
        return asyncio.get_running_loop().time
    except RuntimeError:
        return time.monotonic


def _last_write_ms(path: Path) -> int:
    """When the database was last written (the newest mtime of the file and its WAL)."""
    times = [p.stat().st_mtime for p in (path, Path(f"{path}-wal"))
             if p.exists() and p.stat().st_size > 0]  # a reader may leave an empty WAL
    return round((max(times) if times else time.time()) * 1000)


def _proc_write_bytes() -> int:
    try:
        with open("/proc/self/io", encoding="ascii") as f:
            for line in f:
                if line.startswith("write_bytes:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0
