"""A full store refuses new work (`accepting`), and a full disk never corrupts the file."""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path

from gateway.broker.contracts.hooks import SessionRecord
from gateway.broker.core.session import NEVER_EXPIRES
from storage.sqlite import StoreError
from storage.sqlite.space import RESERVE_NAME, bound_wal
from storage.sqlite.store import SqliteStore
from tests.storage.conftest import StoreFactory, delivery, flush, msg, rows, small_tmpfs


def recheck(store: SqliteStore) -> bool:
    store._space_checked = -1e18  # the next call re-reads sizes (normally once a second)
    return store.accepting()


def test_accepting_false_above_max_db_bytes(stores: StoreFactory) -> None:
    store = stores(max_db_bytes=1 << 20)
    store.session_saved(SessionRecord("c", 4, NEVER_EXPIRES))
    assert recheck(store)
    stored = []
    for n in range(300):
        d = delivery(msg(f"big/{n}", os.urandom(4096)))
        store.qos_stored("c", d)
        stored.append(d)
    flush(store)
    assert not recheck(store)
    assert store.full_events == 1
    assert not store.accepting()  # cached until the next check
    for d in stored:
        store.qos_completed("c", d)
    flush(store)
    assert recheck(store)  # freed pages count as room again, before any vacuum


def test_accepting_false_below_min_free_bytes(stores: StoreFactory) -> None:
    free = shutil.disk_usage(stores.state_dir.parent).free
    store = stores(min_free_bytes=free * 2)
    assert not recheck(store)


def test_accepting_is_cached(stores: StoreFactory) -> None:
    store = stores(max_db_bytes=1 << 20)
    assert store.accepting()
    store.max_db_bytes = 0
    assert store.accepting()  # not re-read within the second
    assert not recheck(store)


def test_full_disk_fails_the_commit_and_a_later_one_succeeds(tmp_path: Path) -> None:
    with small_tmpfs(tmp_path / "small", "2m") as mount:
        factory = StoreFactory(mount / "state")
        store = factory(min_free_bytes=256 * 1024, reserve_bytes=0)  # no reserve to fall back on
        try:
            store.session_saved(SessionRecord("c", 4, NEVER_EXPIRES))
            flush(store)
            committed = []
            for n in range(50):
                d = delivery(msg(f"ok/{n}", b"x" * 200))
                store.qos_stored("c", d)
                committed.append(d)
            flush(store)
            filler = mount / "filler"
            with open(filler, "wb") as f, contextlib.suppress(OSError):
                while True:
                    f.write(b"\xff" * 65536)
                    f.flush()
            failed = False
            pending = []
            for n in range(200):
                d = delivery(msg(f"full/{n}", os.urandom(4000)))
                store.qos_stored("c", d)
                pending.append(d)
                try:
                    flush(store)
                except StoreError:
                    failed = True
                    break
            assert failed, "the commit should have run out of space"
            assert store.writer.stats.failures >= 1
            assert not recheck(store)
            filler.unlink()  # space comes back
            assert recheck(store)
            flush(store)  # the kept batch goes in now
            assert rows(store, "PRAGMA quick_check") == [("ok",)]
            store = factory.reopen(store, min_free_bytes=256 * 1024, reserve_bytes=0)
            (s,) = store.restore().sessions
            topics = [d.message.topic for d in s.deliveries]
            assert topics == [d.message.topic for d in committed + pending]
        finally:
            for open_store in list(factory.open):
                open_store.close_sync()


def test_space_reserve_is_made_released_and_made_again(stores: StoreFactory) -> None:
    store = stores(reserve_bytes=64 * 1024)
    reserve = stores.state_dir / RESERVE_NAME
    assert reserve.stat().st_size == 64 * 1024
    assert recheck(store)
    assert store.reserve.release()
    assert not reserve.exists() and not store.reserve.release()  # released once
    assert recheck(store)  # room for it twice over: made again by the space check
    assert reserve.stat().st_size == 64 * 1024


def test_wal_is_truncated_when_long_or_when_the_disk_is_short(stores: StoreFactory) -> None:
    store = stores(wal_autocheckpoint=100_000)  # SQLite's own checkpoints never come
    wal = Path(f"{store.path}-wal")
    store.session_saved(SessionRecord("c", 4, NEVER_EXPIRES))
    for n in range(200):
        store.qos_stored("c", delivery(msg(f"w/{n}", b"x" * 1000)))
    flush(store)
    size = wal.stat().st_size
    assert size > 200 * 1000
    assert not bound_wal(store.writer.conn, wal, limit=size, free=10 * size)  # short, room
    assert wal.stat().st_size == size
    assert bound_wal(store.writer.conn, wal, limit=size, free=size)  # the disk is short
    assert wal.stat().st_size == 0
    store.qos_stored("c", delivery(msg("w/last", b"x" * 1000)))
    flush(store)
    assert bound_wal(store.writer.conn, wal, limit=1024, free=1 << 40)  # long
    assert wal.stat().st_size == 0
    assert len(rows(store, "SELECT seq FROM deliveries")) == 201


def test_full_disk_commit_goes_into_the_reserve_and_the_store_refuses(tmp_path: Path) -> None:
    with small_tmpfs(tmp_path / "small", "4m") as mount:
        factory = StoreFactory(mount / "state")
        store = factory(min_free_bytes=0, reserve_bytes=512 * 1024)
        try:
            assert (factory.state_dir / RESERVE_NAME).exists()
            store.session_saved(SessionRecord("c", 4, NEVER_EXPIRES))
            flush(store)
            filler = mount / "filler"
            with open(filler, "wb", buffering=0) as f, contextlib.suppress(OSError):
                while True:
                    f.write(b"\xff" * 4096)
            stored = []
            for n in range(100):  # fails for want of space, then fits in the reserve
                d = delivery(msg(f"full/{n}", os.urandom(1000)))
                store.qos_stored("c", d)
                stored.append(d)
                flush(store)
                if not store.reserve.present:
                    break
            assert not store.reserve.present, "the disk should have run full"
            assert store.writer.stats.failures == 1 and not store.accepting()
            assert not recheck(store)  # no room for a new reserve: still refusing
            for d in stored:  # acknowledgements commit on the full disk
                store.qos_completed("c", d)
            flush(store)
            assert rows(store, "SELECT count(*) FROM deliveries") == [(0,)]
            filler.unlink()
            assert recheck(store)  # room again: reserve made, accepting, no restart
            assert (factory.state_dir / RESERVE_NAME).exists()
        finally:
            for open_store in list(factory.open):
                open_store.close_sync()
