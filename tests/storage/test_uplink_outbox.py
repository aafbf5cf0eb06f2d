"""The uplink outbox on SQLite: caps while a drain runs, exact counts, both overflow policies.

The counters (`counts`, `sizes`, `stats()`) must equal the `outbox` table after every commit,
whatever mix of appends, cap removals, acknowledgements and releases came before; `dropped`
must count exactly the messages that never reached the cloud. The shared semantics also run
against `MemoryOutbox`.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest

from bridge.uplink.outbox import MemoryOutbox
from gateway.base.outbox import Outbox, OutboxRecord, RuleLimits
from storage.sqlite.uplink_outbox import SqliteOutbox
from tests.storage.conftest import StoreFactory, flush

UNLIMITED = 10**9


def rec(outbox: Outbox, rule: str = "r", size: int = 10, topic: str = "t") -> OutboxRecord:
    """A record of `size` bytes against the caps (topic + payload)."""
    return OutboxRecord(outbox.next_seq(), rule, topic, b"x" * (size - len(topic)), 1, False, 7)


def table(outbox: SqliteOutbox) -> dict[str, tuple[int, int]]:
    """rule -> (rows, bytes) as stored in the `outbox` table."""
    return {
        str(rule): (int(n), int(size))
        for rule, n, size in outbox.store.reader.execute(
            "SELECT rule, count(*), sum(length(topic) + length(payload)) FROM outbox "
            "GROUP BY rule"
        )
    }


def seqs(outbox: Outbox, rule: str = "r") -> list[int]:
    """The committed seqs of `rule`, oldest first (read without keeping them in flight)."""
    records = outbox.read(rule, 10**6, False, set())
    outbox.release(r.seq for r in records)
    return [r.seq for r in records]


def assert_counts_match(outbox: SqliteOutbox) -> None:
    stored = table(outbox)
    counters = {
        rule: (outbox.counts[rule], outbox.sizes[rule])
        for rule in outbox.counts if outbox.counts[rule] or outbox.sizes[rule]
    }
    assert counters == stored
    stats = outbox.stats()
    assert (stats.messages, stats.bytes) == (
        sum(n for n, _ in stored.values()), sum(b for _, b in stored.values())
    )


@pytest.fixture
def sqlite_outbox(stores: StoreFactory) -> Iterator[tuple[SqliteOutbox, Callable[[], None]]]:
    store = stores(durability="normal")
    yield SqliteOutbox(store), lambda: flush(store)


@dataclass
class Impl:
    outbox: Outbox
    commit: Callable[[], None]


@pytest.fixture(params=["memory", "sqlite"])
def impl(request: pytest.FixtureRequest, stores: StoreFactory) -> Impl:
    if request.param == "memory":
        return Impl(MemoryOutbox(), lambda: None)
    store = stores(durability="normal")
    return Impl(SqliteOutbox(store), lambda: flush(store))


def test_drain_while_the_cap_removes_keeps_the_counts_equal_to_the_table(
    sqlite_outbox: tuple[SqliteOutbox, Callable[[], None]],
) -> None:
    # The audit's reproduction: before the fix, after 20 cycles the table held 43 rows while
    # the outbox counted 3, and acknowledged messages were counted as dropped.
    outbox, commit = sqlite_outbox
    cap = RuleLimits(5, UNLIMITED, drop_oldest=True)
    appended = acked = 0
    for _cycle in range(20):
        for _ in range(3):
            outbox.append(rec(outbox), cap)
        commit()
        in_flight = outbox.read("r", 3, False, set())
        for _ in range(3):  # removes the oldest rows: the ones in flight
            outbox.append(rec(outbox), cap)
        appended += 6
        commit()
        assert_counts_match(outbox)
        assert table(outbox)["r"][0] == 5
        outbox.delete(r.seq for r in in_flight)  # their PUBACKs arrive after the removal
        acked += len(in_flight)
        commit()
        assert_counts_match(outbox)
        assert table(outbox)["r"][0] <= 5
    # Every acknowledged message reached the cloud: dropped = never delivered.
    left = seqs(outbox)
    assert outbox.stats().dropped == appended - acked - len(left)
    assert left == list(range(appended - len(left) + 1, appended + 1))  # the newest


def test_rows_waiting_for_their_removal_are_not_handed_out(
    sqlite_outbox: tuple[SqliteOutbox, Callable[[], None]],
) -> None:
    outbox, commit = sqlite_outbox
    cap = RuleLimits(2, UNLIMITED, drop_oldest=True)
    first, second = rec(outbox), rec(outbox)
    outbox.append(first, cap)
    outbox.append(second, cap)
    commit()
    assert outbox.append(rec(outbox), cap) == 1  # removes `first`; not committed yet
    assert [r.seq for r in outbox.read("r", 10, False, set())] == [second.seq]
    assert [r.seq for r in outbox.read("r", 10, True, {second.seq})] == []
    commit()
    assert seqs(outbox) == [second.seq, second.seq + 1]
    assert_counts_match(outbox)


def test_removal_reaches_rows_not_committed_yet(
    sqlite_outbox: tuple[SqliteOutbox, Callable[[], None]],
) -> None:
    outbox, commit = sqlite_outbox
    cap = RuleLimits(3, UNLIMITED, drop_oldest=True)
    for _ in range(2):
        outbox.append(rec(outbox), cap)
    commit()
    for _ in range(5):  # removes both committed rows, then two of its own batch
        outbox.append(rec(outbox), cap)
    assert outbox.counts["r"] == 3
    commit()
    assert seqs(outbox) == [5, 6, 7]
    assert_counts_match(outbox)
    assert outbox.stats().dropped == 4


def test_byte_cap_removes_exactly_what_is_needed(
    sqlite_outbox: tuple[SqliteOutbox, Callable[[], None]],
) -> None:
    outbox, commit = sqlite_outbox
    cap = RuleLimits(UNLIMITED, 100, drop_oldest=True)
    for size in (11, 51, 21):
        outbox.append(rec(outbox, size=size), cap)
    commit()
    # 83 + 31 > 100: an average row size (27.7) would remove one row and keep 103 bytes;
    # the exact sizes remove the 11 and the 51.
    assert outbox.append(rec(outbox, size=31), cap) == 2
    commit()
    assert table(outbox) == {"r": (2, 52)}
    assert_counts_match(outbox)
    # A record larger than the cap can never fit: refused, nothing removed for it.
    assert outbox.append(rec(outbox, size=101), cap) == 1
    commit()
    assert table(outbox) == {"r": (2, 52)}
    # Exactly at the cap fits.
    assert outbox.append(rec(outbox, size=48), cap) == 0
    commit()
    assert table(outbox) == {"r": (3, 100)}
    assert outbox.stats().dropped == 3
    assert_counts_match(outbox)


def test_byte_cap_counts_topic_characters_like_the_record(
    sqlite_outbox: tuple[SqliteOutbox, Callable[[], None]],
) -> None:
    outbox, commit = sqlite_outbox
    cap = RuleLimits(UNLIMITED, 100, drop_oldest=True)
    outbox.append(rec(outbox, size=40, topic="zähler/ü"), cap)
    commit()
    assert_counts_match(outbox)
    assert outbox.sizes["r"] == 40


def test_drop_newest_refuses_and_keeps_the_table(
    sqlite_outbox: tuple[SqliteOutbox, Callable[[], None]],
) -> None:
    outbox, commit = sqlite_outbox
    by_count = RuleLimits(2, UNLIMITED, drop_oldest=False)
    results = [outbox.append(rec(outbox), by_count) for _ in range(4)]
    assert results == [0, 0, 1, 1]
    commit()
    assert seqs(outbox) == [1, 2]
    assert_counts_match(outbox)
    # An acknowledgement makes room for one more.
    handed = outbox.read("r", 1, False, set())
    outbox.delete([handed[0].seq])
    assert outbox.append(rec(outbox), by_count) == 0
    commit()
    assert seqs(outbox) == [2, 5]
    by_bytes = RuleLimits(UNLIMITED, 30, drop_oldest=False)
    assert [outbox.append(rec(outbox, "b", size), by_bytes) for size in (15, 15, 1)] == [0, 0, 1]
    commit()
    assert table(outbox)["b"] == (2, 30)
    assert_counts_match(outbox)
    assert outbox.stats().dropped == 3


def test_counts_survive_a_restart(stores: StoreFactory) -> None:
    store = stores(durability="normal")
    outbox = SqliteOutbox(store)
    cap = RuleLimits(3, UNLIMITED, drop_oldest=True)
    for size in range(10, 16):
        outbox.append(rec(outbox, size=size), cap)
    flush(store)
    store = stores.reopen(store, durability="normal")
    outbox = SqliteOutbox(store)
    assert (outbox.counts, outbox.sizes) == ({"r": 3}, {"r": 13 + 14 + 15})
    assert outbox.append(rec(outbox, size=10), cap) == 1  # still removes the oldest first
    flush(store)
    assert seqs(outbox) == [5, 6, 7]
    assert_counts_match(outbox)


def test_released_removed_record_counts_as_dropped_acknowledged_does_not(impl: Impl) -> None:
    outbox, commit = impl.outbox, impl.commit
    cap = RuleLimits(2, UNLIMITED, drop_oldest=True)
    outbox.append(rec(outbox), cap)
    outbox.append(rec(outbox), cap)
    commit()
    first, second = outbox.read("r", 10, False, set())
    assert outbox.append(rec(outbox), cap) == 1  # removes `first` while in flight
    assert outbox.append(rec(outbox), cap) == 1  # and `second`
    commit()
    assert outbox.stats().dropped == 0  # both may still be acknowledged
    assert outbox.stats().messages == 2
    outbox.delete([first.seq])  # delivered after all: nothing changes
    outbox.release([second.seq])  # refused or the session ended: it is lost
    commit()
    stats = outbox.stats()
    assert (stats.messages, stats.bytes, stats.dropped) == (2, 20, 1)
    outbox.delete([first.seq])  # a repeated acknowledgement changes nothing either
    outbox.release([second.seq])
    assert outbox.stats().dropped == 1
    assert seqs(outbox) == [3, 4]


def test_released_record_is_read_again_and_can_be_removed(impl: Impl) -> None:
    outbox, commit = impl.outbox, impl.commit
    cap = RuleLimits(2, UNLIMITED, drop_oldest=True)
    outbox.append(rec(outbox), cap)
    outbox.append(rec(outbox), cap)
    commit()
    first, _ = outbox.read("r", 10, False, set())
    outbox.release([first.seq])
    assert [r.seq for r in outbox.read("r", 1, False, set())] == [first.seq]
    outbox.release([first.seq])
    outbox.append(rec(outbox), cap)  # not in flight: dropped at once
    commit()
    assert outbox.stats().dropped == 1 and outbox.stats().messages == 2


def test_oversize_record_removes_nothing(impl: Impl) -> None:
    outbox, commit = impl.outbox, impl.commit
    cap = RuleLimits(UNLIMITED, 50, drop_oldest=True)
    for _ in range(3):
        outbox.append(rec(outbox), cap)
    assert outbox.append(rec(outbox, size=51), cap) == 1
    commit()
    stats = outbox.stats()
    assert (stats.messages, stats.bytes, stats.dropped) == (3, 30, 1)


@pytest.mark.parametrize("seed", range(6))
def test_random_drain_and_caps_keep_every_count_exact(
    seed: int, sqlite_outbox: tuple[SqliteOutbox, Callable[[], None]],
) -> None:
    outbox, commit = sqlite_outbox
    rnd = random.Random(seed)
    limits = {
        "a": RuleLimits(rnd.randint(1, 8), UNLIMITED, drop_oldest=True),
        "b": RuleLimits(UNLIMITED, rnd.randint(40, 120), drop_oldest=True),
        "c": RuleLimits(rnd.randint(1, 6), rnd.randint(40, 120), drop_oldest=False),
    }
    in_flight: dict[int, str] = {}
    appended = delivered = 0
    for _step in range(300):
        action = rnd.random()
        if action < 0.45:
            rule = rnd.choice("abc")
            outbox.append(rec(outbox, rule, rnd.randint(2, 30)), limits[rule])
            appended += 1
        elif action < 0.6:
            rule = rnd.choice("abc")
            for record in outbox.read(rule, rnd.randint(1, 4), rnd.random() < 0.3,
                                      set(in_flight)):
                in_flight[record.seq] = rule
        elif action < 0.8 and in_flight:
            seq = rnd.choice(sorted(in_flight))
            del in_flight[seq]
            if rnd.random() < 0.75:
                outbox.delete([seq])
                delivered += 1
            else:
                outbox.release([seq])
        else:
            commit()
            assert_counts_match(outbox)
            stored = table(outbox)
            for rule, (n, size) in stored.items():
                assert n <= limits[rule].max_messages and size <= limits[rule].max_bytes
    outbox.release(list(in_flight))
    commit()
    assert_counts_match(outbox)
    assert appended == delivered + outbox.stats().dropped + outbox.stats().messages
