"""Helpers for the store tests: a store on a temporary directory with controllable clocks."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import subprocess
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest

from gateway.broker.codec.packets import NO_PROPERTIES, Properties
from gateway.broker.core.inflight import Delivery
from gateway.broker.core.message import Message
from storage.sqlite import SqliteStore

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "db"
T = TypeVar("T")


@dataclass
class Clocks:
    """The broker's monotonic clock and the wall clock, both set by the test."""

    mono: float = 1000.0
    wall: float = 1_800_000_000.0  # 2027-01-15

    def advance(self, seconds: float) -> None:
        self.mono += seconds
        self.wall += seconds

    def restart(self, down_for: float) -> None:
        """A new process: the monotonic clock starts over, wall time has moved on."""
        self.mono = 50.0
        self.wall += down_for


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


class StoreFactory:
    """Opens `SqliteStore`s on one state directory; closes what is left open at the end."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self.clocks = Clocks()
        self.open: list[SqliteStore] = []

    def __call__(self, **kwargs: Any) -> SqliteStore:
        kwargs.setdefault("commit_interval_ms", 0)
        store = SqliteStore(
            self.state_dir, monotonic=lambda: self.clocks.mono, wall=lambda: self.clocks.wall,
            **kwargs,
        )
        self.open.append(store)
        return store

    def close(self, store: SqliteStore) -> None:
        run(store.close())
        self.open.remove(store)

    def crash(self, store: SqliteStore) -> None:
        """Drop the store like a killed process: nothing pending is written."""
        store.close_sync()
        self.open.remove(store)

    def reopen(self, store: SqliteStore, down_for: float = 0.0, **kwargs: Any) -> SqliteStore:
        self.close(store)
        self.clocks.restart(down_for)
        return self(**kwargs)


@pytest.fixture
def stores(tmp_path: Path) -> Iterator[StoreFactory]:
    factory = StoreFactory(tmp_path / "state")
    yield factory
    for store in list(factory.open):
        store.close_sync()


def flush(store: SqliteStore) -> None:
    run(store.flush())


def msg(
    topic: str = "t", payload: bytes = b"x", qos: int = 1, *, retain: bool = False,
    props: Properties = NO_PROPERTIES, expires_at: float | None = None,
) -> Message:
    return Message(topic, payload, qos, retain, props, expires_at, "publisher")


def delivery(message: Message, qos: int | None = None, **kwargs: Any) -> Delivery:
    return Delivery(message, message.qos if qos is None else qos, False, **kwargs)


def copy_fixture(name: str, state_dir: Path) -> Path:
    """Copy `tests/fixtures/db/<name>` (and its -wal) into `state_dir` as outpost.db."""
    state_dir.mkdir(parents=True, exist_ok=True)
    target = state_dir / "outpost.db"
    shutil.copyfile(FIXTURES / name, target)
    wal = FIXTURES / f"{name}-wal"
    if wal.exists():
        shutil.copyfile(wal, f"{target}-wal")
    return target


def rows(store: SqliteStore, sql: str, *args: Any) -> list[tuple[Any, ...]]:
    return [tuple(r) for r in store.reader.execute(sql, args)]


Call = Callable[..., Any]


@contextlib.contextmanager
def small_tmpfs(where: Path, size: str) -> Iterator[Path]:
    """A tmpfs of `size` mounted on `where` for the block (skips without root or mount)."""
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
