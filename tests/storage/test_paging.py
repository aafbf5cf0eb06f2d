"""Queues larger than a page: `restore` hands back one page, `load_deliveries` the rest."""

from __future__ import annotations

from gateway.broker.contracts.hooks import SessionRecord
from gateway.broker.core.message import QUEUED_OVERHEAD
from gateway.broker.core.session import NEVER_EXPIRES
from storage.sqlite.store import SqliteStore
from tests.storage.conftest import StoreFactory, delivery, flush, msg


def fill(store: SqliteStore, client_id: str, count: int, start: int = 0) -> list[int]:
    store.session_saved(SessionRecord(client_id, 4, NEVER_EXPIRES))
    seqs = []
    for n in range(start, start + count):
        d = delivery(msg(f"q/{n}", b"%06d" % n))
        store.qos_stored(client_id, d)
        seqs.append(d.store_seq)
    return seqs


def test_restore_returns_one_page_and_counts_the_rest(stores: StoreFactory) -> None:
    store = stores(queue_page=10)
    fill(store, "big", 35)
    fill(store, "small", 3)
    flush(store)
    store = stores.reopen(store, queue_page=10)
    sessions = {s.record.client_id: s for s in store.restore().sessions}
    big = sessions["big"]
    assert [d.message.payload for d in big.deliveries] == [b"%06d" % n for n in range(10)]
    assert big.spilled == 25
    # what the queue counts: topic + payload + the objects around them (Message.queued_cost)
    assert big.spilled_bytes == sum(len(f"q/{n}") + 6 + QUEUED_OVERHEAD for n in range(10, 35))
    assert (len(sessions["small"].deliveries), sessions["small"].spilled) == (3, 0)


def test_load_deliveries_pages_through_in_order(stores: StoreFactory) -> None:
    store = stores(queue_page=10)
    fill(store, "big", 35)
    fill(store, "other", 5)
    flush(store)
    store = stores.reopen(store, queue_page=10)
    (big,) = [s for s in store.restore().sessions if s.record.client_id == "big"]
    got = [d.message.payload for d in big.deliveries]
    after = big.deliveries[-1].store_seq
    while True:
        page = store.load_deliveries("big", after, 7)
        if not page:
            break
        assert len(page) <= 7
        got += [d.message.payload for d in page]
        after = page[-1].store_seq
    assert got == [b"%06d" % n for n in range(35)]
    assert store.load_deliveries("nobody", 0, 10) == []


def test_load_sees_uncommitted_and_skips_pending_completions(stores: StoreFactory) -> None:
    store = stores()
    seqs = fill(store, "c", 5)
    flush(store)
    more = fill(store, "c", 3, start=5)  # recorded, not committed yet
    assert store._batch.pending_rows() == 3
    page = store.load_deliveries("c", 0, 100)
    assert [d.store_seq for d in page] == seqs + more
    store.qos_completed("c", page[1])  # completed, delete not committed yet
    store.qos_completed("c", page[6])  # cancels an uncommitted insert
    page[2].packet_id = 4  # went in flight: the broker holds it now
    store.qos_updated("c", page[2])
    left = store.load_deliveries("c", 0, 100)
    assert [d.store_seq for d in left] == [seqs[0], seqs[3], seqs[4], more[0], more[2]]
    assert [d.store_seq for d in store.load_deliveries("c", seqs[3], 2)] == [seqs[4], more[0]]
    flush(store)
    assert [d.store_seq for d in store.load_deliveries("c", 0, 100)] == [
        seqs[0], seqs[3], seqs[4], more[0], more[2]]


def test_in_flight_rows_are_not_paged_again(stores: StoreFactory) -> None:
    store = stores(queue_page=10)
    fill(store, "c", 3)
    flush(store)
    first = store.load_deliveries("c", 0, 1)[0]
    first.packet_id = 1
    store.qos_updated("c", first)
    flush(store)
    assert [d.message.topic for d in store.load_deliveries("c", 0, 10)] == ["q/1", "q/2"]
