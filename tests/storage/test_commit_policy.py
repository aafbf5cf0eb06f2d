"""When a group commit starts: at once after a burst, gathering while a stream keeps arriving."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from gateway.broker.contracts.hooks import SessionRecord
from gateway.broker.core.session import NEVER_EXPIRES
from storage.config import StorageConfig
from storage.sqlite import writer
from storage.sqlite.store import IDLE_COMMIT_SECONDS, SqliteStore
from tests.storage.conftest import StoreFactory, delivery, flush, msg, rows, run


def test_a_burst_commits_without_waiting_for_the_interval(stores: StoreFactory) -> None:
    # Ten minutes of commit interval: the flush returns only because a burst (nothing
    # arrived during the previous commit) is committed as soon as its input has been read.
    store = stores(commit_interval_ms=600_000)
    store.session_saved(SessionRecord("c", 4, NEVER_EXPIRES))
    for n in range(64):
        store.qos_stored("c", delivery(msg(f"burst/{n}")))
    flush(store)
    assert rows(store, "SELECT count(*) FROM deliveries") == [(64,)]


def test_work_arriving_during_a_commit_is_gathered_until_the_stream_ends(
    stores: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = stores(commit_interval_ms=20)
    store.session_saved(SessionRecord("c", 4, NEVER_EXPIRES))
    flush(store)
    release = threading.Event()
    real_commit = store.writer.commit
    calls: list[int] = []

    def held_commit(batches: list[writer.Batch]) -> None:
        calls.append(sum(b.pending_rows() for b in batches))
        if len(calls) == 1:
            release.wait(10)
        real_commit(batches)

    monkeypatch.setattr(store.writer, "commit", held_commit)

    async def scenario() -> None:
        store.qos_stored("c", delivery(msg("first")))
        first = asyncio.create_task(store.flush())
        while not calls:
            await asyncio.sleep(0.001)
        # Messages keep coming while the first commit runs: a stream.
        later = []
        for n in range(10):
            store.qos_stored("c", delivery(msg(f"later/{n}")))
            later.append(asyncio.create_task(store.flush()))
        release.set()
        await first
        assert store.pacer.streaming
        await asyncio.gather(*later)
        # Nothing more arrived: the stream has ended, the next commit is a burst again.
        assert not store.pacer.streaming

    run(scenario())
    assert calls == [1, 10]
    assert rows(store, "SELECT count(*) FROM deliveries") == [(11,)]


def test_the_idle_commit_waits_at_least_as_long_as_the_broker_holds_acknowledgements(
    tmp_path: Path,
) -> None:
    # The broker flushes a held publisher's messages when its hold ends; an idle commit of
    # them before that would be an fsync of its own (gateway/broker/net/ack_hold.py).
    for ack_hold_ms, idle in ((1500, 1.5), (0, IDLE_COMMIT_SECONDS)):
        store = SqliteStore.from_config(
            StorageConfig(ack_hold_ms=ack_hold_ms), tmp_path / str(ack_hold_ms), "gw")
        try:
            assert store.idle_commit == idle
        finally:
            store.close_sync()
