"""`build_hooks` picks the store; `outpost run --durability`; the outbox sequence."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from gateway.base.outbox import OutboxRecord, RuleLimits
from gateway.broker.contracts.hooks import BrokerHooks
from outpost.app import build_hooks
from outpost.cli import build_parser
from outpost.config import Config
from storage.config import StorageConfig
from storage.sqlite import SqliteStore
from storage.sqlite.uplink_outbox import SqliteOutbox
from tests.storage.conftest import StoreFactory, copy_fixture, flush, rows


def config(**storage: object) -> Config:
    return Config(storage=StorageConfig(**storage))  # type: ignore[arg-type]


def test_build_hooks_chooses_by_durability_and_state_dir(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def build(cfg: Config, state_dir: Path | None) -> object:
        hooks = build_hooks(cfg, state_dir)
        if isinstance(hooks, SqliteStore):
            await hooks.close()
        return hooks

    hooks = asyncio.run(build(config(), tmp_path / "a"))
    assert isinstance(hooks, SqliteStore) and hooks.durability == "full"
    hooks = asyncio.run(build(config(durability="normal", state_dir=tmp_path / "b"), None))
    assert isinstance(hooks, SqliteStore) and hooks.path == tmp_path / "b" / "outpost.db"
    with caplog.at_level(logging.INFO, logger="outpost"):
        # nothing persisted: plain hooks, no mirror of the broker's state
        assert type(asyncio.run(build(config(), None))) is BrokerHooks
        assert type(asyncio.run(build(config(durability="memory"), tmp_path))) is BrokerHooks
    assert sum("nothing is persisted" in r.getMessage() for r in caplog.records) == 2


def test_run_accepts_durability_override() -> None:
    args = build_parser().parse_args(["run", "--durability", "normal"])
    assert args.durability == "normal"
    with pytest.raises(SystemExit):
        build_parser().parse_args(["run", "--durability", "sometimes"])


def test_outbox_seq_is_never_reused(stores: StoreFactory) -> None:
    # The fixture: one row (seq 1) and `outbox_seq_reserved` = 65,536.
    copy_fixture("v2.db", stores.state_dir)
    limits = RuleLimits(100, 10**6, drop_oldest=True)

    def append(outbox: SqliteOutbox) -> int:
        seq = outbox.next_seq()
        outbox.append(OutboxRecord(seq, "rule-1", "t", b"p", 1, False, 5), limits)
        return seq

    store = stores()
    outbox = SqliteOutbox(store)
    assert [append(outbox), append(outbox)] == [65537, 65538]  # above the stored value
    flush(store)
    assert rows(store, "SELECT value FROM meta WHERE key = 'outbox_seq_reserved'") == [("65538",)]
    outbox.delete(r.seq for r in outbox.read("rule-1", 10, False, set()))  # all acknowledged
    flush(store)
    assert rows(store, "SELECT count(*) FROM outbox") == [(0,)]
    store = stores.reopen(store)
    outbox = SqliteOutbox(store)
    assert append(outbox) == 65539  # the table is empty: the meta value still continues above
    stores.crash(store)  # that row never committed, so the cloud never saw 65539
    outbox = SqliteOutbox(stores())
    assert outbox.next_seq() == 65539  # handed out again: no gap, no repeat the cloud sees
