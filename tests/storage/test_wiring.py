"""`build_hooks` picks the store; `outpost run --durability`; the outbox sequence."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from pathlib import Path

import pytest

from gateway.app import build_hooks
from gateway.cli import build_parser
from gateway.config import Config, StorageConfig
from storage.memory import MemoryStore
from storage.sqlite import SqliteStore
from storage.sqlite.outbox import BLOCK, OutboxSeq, store_reservation
from tests.storage.conftest import copy_fixture


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
        assert isinstance(asyncio.run(build(config(), None)), MemoryStore)
        assert isinstance(asyncio.run(build(config(durability="memory"), tmp_path)), MemoryStore)
    assert sum("nothing is persisted" in r.getMessage() for r in caplog.records) == 2


def test_run_accepts_durability_override() -> None:
    args = build_parser().parse_args(["run", "--durability", "normal"])
    assert args.durability == "normal"
    with pytest.raises(SystemExit):
        build_parser().parse_args(["run", "--durability", "sometimes"])


def test_outbox_seq_is_never_reused(tmp_path: Path) -> None:
    path = copy_fixture("v2.db", tmp_path)
    conn = sqlite3.connect(path, isolation_level=None)
    alloc = OutboxSeq(conn)
    assert alloc.take() == (BLOCK + 1, 2 * BLOCK)  # the fixture reserved up to BLOCK
    conn.execute("BEGIN")
    store_reservation(conn, 2 * BLOCK)
    conn.execute("DELETE FROM outbox")  # everything acknowledged by the cloud
    conn.execute("COMMIT")
    assert OutboxSeq(conn).take()[0] == 2 * BLOCK + 1  # a "restart" continues above
    conn.close()
