"""A full store refuses new work (`accepting`), and a full disk never corrupts the file."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.broker.contracts.hooks import SessionRecord
from gateway.broker.core.session import NEVER_EXPIRES
from storage.sqlite import StoreError
from storage.sqlite.store import SqliteStore
from tests.storage.conftest import StoreFactory, delivery, flush, msg, rows


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


@contextlib.contextmanager
def small_tmpfs(where: Path, size: str) -> Iterator[Path]:
    where.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("needs root and mount(8) to make a size-capped tmpfs")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"mount -t tmpfs not permitted here: {done.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def test_full_disk_fails_the_commit_and_a_later_one_succeeds(tmp_path: Path) -> None:
    with small_tmpfs(tmp_path / "small", "2m") as mount:
        factory = StoreFactory(mount / "state")
        store = factory(min_free_bytes=256 * 1024)
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
            store = factory.reopen(store, min_free_bytes=256 * 1024)
            (s,) = store.restore().sessions
            topics = [d.message.topic for d in s.deliveries]
            assert topics == [d.message.topic for d in committed + pending]
        finally:
            for open_store in list(factory.open):
                open_store.close_sync()
