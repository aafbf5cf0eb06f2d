"""Build a store as a broker would have left it, fast, through the store's own hooks.

Used by the reconnect and start-up benchmarks: writing a million queued messages through a
broker would take minutes; recording the same hook events directly into `SqliteStore` and
flushing in large batches gives the same file (same code, same rows) in seconds.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from gateway.broker.contracts.hooks import SessionRecord
from gateway.broker.core.inflight import Delivery
from gateway.broker.core.message import Message
from gateway.broker.core.router import SubOptions
from gateway.broker.core.session import NEVER_EXPIRES
from storage.sqlite import SqliteStore

BATCH = 20_000


async def _fill(
    state_dir: Path, sessions: list[tuple[str, str]], queued_per_session: int,
    retained: int, payload: bytes,
) -> None:
    store = SqliteStore(state_dir, commit_interval_ms=0)
    now = asyncio.get_running_loop().time()
    for client_id, topic_filter in sessions:
        store.session_saved(SessionRecord(
            client_id, 4, NEVER_EXPIRES, {topic_filter: SubOptions(1)}, disconnected_at=now))
    await store.flush()
    pending = 0
    for client_id, topic_filter in sessions:
        base = topic_filter.rstrip("#").rstrip("/")
        for n in range(queued_per_session):
            store.qos_stored(client_id, Delivery(Message(f"{base}/{n % 100}", payload, 1, False),
                                                 1, False))
            pending += 1
            if pending >= BATCH:
                await store.flush()
                pending = 0
    for n in range(retained):
        store.retained_changed(f"bench/ret/{n:06d}", Message(
            f"bench/ret/{n:06d}", payload, 1, True))
        pending += 1
        if pending >= BATCH:
            await store.flush()
            pending = 0
    await store.close()


def fill(
    state_dir: Path, sessions: list[tuple[str, str]], queued_per_session: int = 0,
    retained: int = 0, payload: bytes = b"x" * 64,
) -> float:
    """Write the store; returns the seconds it took."""
    started = time.perf_counter()
    asyncio.run(_fill(state_dir, sessions, queued_per_session, retained, payload))
    return time.perf_counter() - started
