"""When a group commit starts: at once after a burst, gathering while a stream keeps arriving."""

from __future__ import annotations

import asyncio
import threading

import pytest

from gateway.broker.contracts.hooks import SessionRecord
from gateway.broker.core.session import NEVER_EXPIRES
from storage.sqlite import writer
from storage.sqlite.store import IDLE_COMMIT_SECONDS
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



def test_an_idle_commit_waits_for_a_flush_the_broker_has_promised(stores: StoreFactory) -> None:
    # The broker holds a slow publisher's acknowledgements and will flush when the hold ends
    # (gateway/broker/net/ack_hold.py); an idle commit before that would be an fsync of its own.
    store = stores()

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        store.session_saved(SessionRecord("c", 4, NEVER_EXPIRES))
        await store.flush()  # the store's idle commits run on this loop from now on
        store.flush_coming(loop.time() + 600)
        store.qos_stored("c", delivery(msg("held")))
        await asyncio.sleep(3 * IDLE_COMMIT_SECONDS)
        assert rows(store, "SELECT count(*) FROM deliveries") == [(0,)]  # not on its own
        await store.flush()  # the promised flush
        assert rows(store, "SELECT count(*) FROM deliveries") == [(1,)]
        # the promise is kept: idle commits are back to IDLE_COMMIT_SECONDS
        store.qos_stored("c", delivery(msg("unflushed")))
        while rows(store, "SELECT count(*) FROM deliveries") != [(2,)]:
            await asyncio.sleep(IDLE_COMMIT_SECONDS)

    run(scenario())
