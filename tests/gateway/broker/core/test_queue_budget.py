"""The process-wide queue budget (`QueueBudget`) and where its default comes from."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from gateway.base.memory import cgroup_memory_limit, ram_bytes
from gateway.broker.contracts.config import BrokerConfig
from gateway.broker.core.inflight import Delivery, Outbound, QueueBudget, QueueLimits
from gateway.broker.core.message import QUEUED_OVERHEAD, Message
from gateway.broker.engine.broker import Broker


def delivery(n: int, seq: int = 0) -> Delivery:
    return Delivery(Message("t", b"%04d" % n, 1, False), 1, False, store_seq=seq)


COST = 1 + 4 + QUEUED_OVERHEAD  # topic "t" + 4 payload bytes + the objects


def test_queues_share_one_budget_and_release_it() -> None:
    budget = QueueBudget(limit=5 * COST)
    a = Outbound(QueueLimits(1000, 1 << 30, drop_oldest=True, budget=budget))
    b = Outbound(QueueLimits(1000, 1 << 30, drop_oldest=True, budget=budget))
    for n in range(3):
        assert a.enqueue(delivery(n)) == []
    for n in range(2):
        assert b.enqueue(delivery(10 + n)) == []
    assert budget.used == 5 * COST and budget.full(1)
    # past the budget, the session's own policy: b drops its oldest for the new one
    dropped = b.enqueue(delivery(12))
    assert [d.message.payload for d in dropped] == [b"0010"]
    assert budget.used == 5 * COST
    a.pop()
    assert budget.used == 4 * COST
    b.clear()  # a session that ends gives its bytes back
    assert budget.used == 2 * COST


def test_drop_newest_and_an_empty_queue_refuse_the_new_message() -> None:
    budget = QueueBudget(limit=2 * COST)
    full = Outbound(QueueLimits(1000, 1 << 30, drop_oldest=True, budget=budget))
    full.enqueue(delivery(1))
    full.enqueue(delivery(2))
    newest = Outbound(QueueLimits(1000, 1 << 30, drop_oldest=False, budget=budget))
    new = delivery(3)
    assert newest.enqueue(new) == [new]  # nothing of its own to drop: the new one goes
    assert len(newest) == 0 and budget.used == 2 * COST


def test_a_reload_raises_the_budget_but_never_lowers_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def config(total: int) -> BrokerConfig:
        return BrokerConfig.model_validate({"limits": {"max_queued_total_bytes": total}})

    broker = Broker(config(1 << 20))
    broker.queue_budget.used = 700_000
    broker.apply_config(config(2 << 20))
    assert broker.queue_budget.limit == 2 << 20  # grown live
    with caplog.at_level(logging.WARNING, logger="outpost.broker"):
        broker.apply_config(config(1 << 19))
    # lower than what is queued: kept until a restart, and said so
    assert broker.queue_budget.limit == 2 << 20
    assert "lowering the queues' memory budget needs a restart" in caplog.text
    assert broker.queue_budget.used == 700_000


def test_stored_deliveries_spill_instead_of_taking_memory() -> None:
    budget = QueueBudget(limit=2 * COST)
    queue = Outbound(QueueLimits(1000, 1 << 30, drop_oldest=True, page=100, budget=budget))
    loaded: list[tuple[int, int]] = []

    def loader(after: int, limit: int) -> list[Delivery]:
        loaded.append((after, limit))
        return []

    for n in range(1, 6):
        assert queue.enqueue(delivery(n, seq=n), loader) == []
    assert (len(queue.queue), queue.spilled) == (2, 3)  # within the page, but over budget
    assert budget.used == 2 * COST


def test_cgroup_v2_and_v1_limits_and_ram(tmp_path: Path) -> None:
    root = tmp_path / "cgroup"
    (root / "system.slice" / "outpost.service").mkdir(parents=True)
    (root / "system.slice" / "outpost.service" / "memory.max").write_text("268435456\n")
    proc = tmp_path / "cgroup-self"
    proc.write_text("0::/system.slice/outpost.service\n")
    assert cgroup_memory_limit(proc, root) == 256 << 20
    (root / "system.slice" / "outpost.service" / "memory.max").write_text("max\n")
    assert cgroup_memory_limit(proc, root) is None
    (root / "memory" / "job").mkdir(parents=True)
    (root / "memory" / "job" / "memory.limit_in_bytes").write_text("1073741824\n")
    proc.write_text("5:devices:/\n4:memory:/job\n")
    assert cgroup_memory_limit(proc, root) == 1 << 30
    (root / "memory" / "job" / "memory.limit_in_bytes").write_text("9223372036854771712\n")
    assert cgroup_memory_limit(proc, root) is None  # v1's "no limit"
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:        1024000 kB\nMemFree: 1 kB\n")
    assert ram_bytes(meminfo) == 1024000 * 1024
