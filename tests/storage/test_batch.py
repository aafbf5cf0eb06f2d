"""The batch folds work that cancels out; group commit; a failed commit stores nothing."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from typing import Any

import pytest

from gateway.broker.contracts.hooks import SessionRecord
from gateway.broker.core.session import NEVER_EXPIRES
from storage.sqlite import StoreError, writer
from storage.sqlite.store import SqliteStore
from tests.storage.conftest import StoreFactory, delivery, flush, msg, rows, run


def saved(store: SqliteStore, *client_ids: str) -> None:
    for client_id in client_ids:
        store.session_saved(SessionRecord(client_id, 4, NEVER_EXPIRES))


def test_completion_cancels_uncommitted_insert(stores: StoreFactory) -> None:
    store = stores()
    saved(store, "c")
    flush(store)
    d = delivery(msg("fast", b"acked before the commit"))
    store.qos_stored("c", d)
    d.packet_id = 1
    store.qos_updated("c", d)
    store.qos_completed("c", d)
    flush(store)
    assert rows(store, "SELECT count(*) FROM deliveries") == [(0,)]
    assert rows(store, "SELECT count(*) FROM messages") == [(0,)]  # the body was never written
    assert store.writer.stats.rows_written == 0
    assert store.writer.stats.cancelled == 1


def test_cancelled_delivery_keeps_body_of_other_sessions(stores: StoreFactory) -> None:
    store = stores()
    saved(store, "a", "b")
    m = msg("two")
    da, db = delivery(m), delivery(m)
    store.qos_stored("a", da)
    store.qos_stored("b", db)
    store.qos_completed("a", da)
    flush(store)
    assert rows(store, "SELECT topic, refs FROM messages") == [("two", 1)]
    assert rows(store, "SELECT seq FROM deliveries") == [(db.store_seq,)]


def test_completion_after_commit_deletes(stores: StoreFactory) -> None:
    store = stores()
    saved(store, "c")
    d = delivery(msg())
    store.qos_stored("c", d)
    flush(store)
    d.packet_id = 3
    store.qos_updated("c", d)
    store.qos_completed("c", d)  # the pending update is dropped with it
    flush(store)
    assert rows(store, "SELECT count(*) FROM deliveries") == [(0,)]
    assert rows(store, "SELECT count(*) FROM messages") == [(0,)]


def test_double_completion_releases_the_body_once(stores: StoreFactory) -> None:
    store = stores()
    saved(store, "a", "b")
    m = msg()
    da, db = delivery(m), delivery(m)
    store.qos_stored("a", da)
    store.qos_stored("b", db)
    flush(store)
    store.qos_completed("a", da)
    store.qos_completed("a", da)
    flush(store)
    assert rows(store, "SELECT refs FROM messages") == [(1,)]


def test_qos2_received_and_released_in_one_batch_writes_nothing(stores: StoreFactory) -> None:
    store = stores()
    saved(store, "c")
    flush(store)
    store.qos2_received("c", 7)
    store.qos2_released("c", 7)
    assert not store._batch.qos2_add
    flush(store)
    assert rows(store, "SELECT count(*) FROM qos2_in") == [(0,)]


def test_unchanged_session_is_not_rewritten(stores: StoreFactory) -> None:
    store = stores()
    saved(store, "c")
    flush(store)
    saved(store, "c")
    assert not store._batch.sessions and not store._batch.subscriptions


def test_flushes_during_a_commit_join_the_next_one(
    stores: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = stores()
    saved(store, "c")
    flush(store)
    release = threading.Event()
    real_commit = store.writer.commit
    calls: list[int] = []

    def slow_commit(batches: list[writer.Batch]) -> None:
        calls.append(sum(b.pending_rows() for b in batches))
        if len(calls) == 1:
            release.wait(10)
        real_commit(batches)

    monkeypatch.setattr(store.writer, "commit", slow_commit)

    async def scenario() -> list[str]:
        order: list[str] = []
        store.qos_stored("c", delivery(msg("first")))
        first = asyncio.create_task(store.flush())
        while not calls:
            await asyncio.sleep(0.001)
        waiting = []
        for n in range(10):
            store.qos_stored("c", delivery(msg(f"later/{n}")))
            waiting.append(asyncio.create_task(store.flush()))
        empty = asyncio.create_task(store.flush())  # nothing new: waits for the running commit
        await asyncio.sleep(0.01)
        assert not first.done() and not empty.done()
        release.set()
        await first
        order.append("first")
        await empty
        await asyncio.gather(*waiting)
        order.append("rest")
        return order

    assert run(scenario()) == ["first", "rest"]
    assert calls == [1, 10]  # exactly two commits: everything that waited went together
    assert rows(store, "SELECT count(*) FROM deliveries") == [(11,)]


def test_many_flushes_one_commit(stores: StoreFactory) -> None:
    store = stores(commit_interval_ms=5)
    saved(store, "c")

    async def scenario() -> None:
        tasks = []
        for n in range(50):
            store.qos_stored("c", delivery(msg(f"t/{n}")))
            tasks.append(asyncio.create_task(store.flush()))
        await asyncio.gather(*tasks)

    run(scenario())
    assert store.writer.stats.commits == 1
    assert rows(store, "SELECT count(*) FROM deliveries") == [(50,)]


def failing_apply(monkeypatch: pytest.MonkeyPatch, failures: int) -> list[int]:
    """Make the next `failures` commits fail after writing part of their batch."""
    real = writer.apply
    seen: list[int] = []

    def apply(conn: sqlite3.Connection, batch: writer.Batch) -> int:
        inserted = real(conn, batch)
        seen.append(inserted)
        if len(seen) <= failures:
            raise sqlite3.OperationalError("database or disk is full")
        return inserted

    monkeypatch.setattr(writer, "apply", apply)
    return seen


def test_failed_commit_stores_nothing_and_raises(
    stores: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = stores()
    saved(store, "c")
    flush(store)
    failing_apply(monkeypatch, failures=1)
    store.qos_stored("c", delivery(msg("lost")))
    store.retained_changed("r", msg("r", retain=True))
    with pytest.raises(StoreError):
        flush(store)
    assert rows(store, "SELECT count(*) FROM deliveries") == [(0,)]
    assert rows(store, "SELECT count(*) FROM retained") == [(0,)]
    assert store.writer.stats.failures == 1
    stores.crash(store)  # the process dies before any retry
    store = stores()
    (s,) = store.restore().sessions
    assert s.deliveries == [] and store.restore().retained == []


def test_failed_batch_is_written_with_the_next_commit(
    stores: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = stores()
    saved(store, "c")
    flush(store)
    failing_apply(monkeypatch, failures=1)
    first = delivery(msg("first"))
    store.qos_stored("c", first)
    with pytest.raises(StoreError):
        flush(store)
    assert [d.message.topic for d in store.load_deliveries("c", 0, 10)] == ["first"]
    store.qos_stored("c", delivery(msg("second")))
    flush(store)
    assert rows(store, "SELECT m.topic FROM deliveries d JOIN messages m ON m.id = d.message_id "
                       "ORDER BY d.seq") == [("first",), ("second",)]
    assert rows(store, "PRAGMA quick_check") == [("ok",)]


def test_close_flushes_what_is_pending(stores: StoreFactory) -> None:
    store = stores(commit_interval_ms=50)
    saved(store, "c")
    store.qos_stored("c", delivery(msg("at-close")))
    stores.close(store)
    store = stores()
    (s,) = store.restore().sessions
    assert [d.message.topic for d in s.deliveries] == ["at-close"]


def test_second_store_on_the_same_directory_is_refused(stores: StoreFactory) -> None:
    from storage.sqlite.recovery import StoreLockedError

    stores()
    with pytest.raises(StoreLockedError):
        stores()


def test_durability_memory_is_not_a_sqlite_store(stores: StoreFactory) -> None:
    kwargs: dict[str, Any] = {"durability": "memory"}
    with pytest.raises(ValueError, match="memory"):
        stores(**kwargs)
