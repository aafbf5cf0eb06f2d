"""Expiry across a restart is decided by absolute wall-clock times."""

from __future__ import annotations

import os
from pathlib import Path

from gateway.broker.contracts.hooks import SessionRecord
from gateway.broker.core.router import SubOptions
from gateway.broker.core.session import NEVER_EXPIRES
from tests.storage.conftest import StoreFactory, delivery, flush, msg, rows


def test_expired_queued_messages_are_dropped_at_restore(stores: StoreFactory) -> None:
    store = stores()
    store.session_saved(SessionRecord("c", 5, NEVER_EXPIRES))
    now = stores.clocks.mono
    short = delivery(msg("short", expires_at=now + 30))
    long = delivery(msg("long", expires_at=now + 300))
    never = delivery(msg("never"))
    inflight = delivery(msg("inflight-short", expires_at=now + 30))
    inflight.packet_id = 5
    for d in (inflight, short, long, never):
        store.qos_stored("c", d)
    flush(store)
    store = stores.reopen(store, down_for=60)
    (s,) = store.restore().sessions
    # delivery had started for the in-flight one: it is finished, not dropped
    assert [d.message.topic for d in s.deliveries] == ["inflight-short", "long", "never"]
    remaining = s.deliveries[1].message.expires_at
    assert remaining is not None and abs(remaining - (stores.clocks.mono + 240)) < 0.01
    assert rows(store, "SELECT count(*) FROM messages WHERE topic = 'short'") == [(0,)]


def test_expired_sessions_are_dropped_at_restore(stores: StoreFactory) -> None:
    store = stores()
    now = stores.clocks.mono
    store.session_saved(SessionRecord("brief", 5, 60, {"a": SubOptions(1)}, disconnected_at=now))
    store.session_saved(SessionRecord("long", 5, 3600, {"a": SubOptions(1)}, disconnected_at=now))
    store.session_saved(SessionRecord("forever", 4, NEVER_EXPIRES, disconnected_at=now))
    for client_id in ("brief", "long", "forever"):
        store.qos_stored(client_id, delivery(msg(client_id)))
    store.qos2_received("brief", 9)
    flush(store)
    store = stores.reopen(store, down_for=61)
    assert sorted(s.record.client_id for s in store.restore().sessions) == ["forever", "long"]
    assert rows(store, "SELECT topic FROM messages ORDER BY topic") == [("forever",), ("long",)]
    assert rows(store, "SELECT count(*) FROM qos2_in") == [(0,)]
    assert rows(store, "SELECT count(*) FROM subscriptions") == [(1,)]


def _set_mtime(path: Path, wall: float) -> None:
    for p in (path, Path(f"{path}-wal")):
        if p.exists():
            os.utime(p, (wall, wall))


def test_session_online_at_a_crash_counts_as_disconnected_at_the_last_write(
    stores: StoreFactory,
) -> None:
    store = stores()
    store.session_saved(SessionRecord("online-60", 5, 60))  # disconnected_at None: online
    store.session_saved(SessionRecord("online-600", 5, 600))
    flush(store)
    path = store.path
    stores.crash(store)
    _set_mtime(path, stores.clocks.wall)  # the last write happened "now"
    stores.clocks.restart(down_for=100)
    store = stores()
    (s,) = store.restore().sessions
    assert s.record.client_id == "online-600"
    assert s.record.disconnected_at is not None
    assert abs(s.record.disconnected_at - (stores.clocks.mono - 100)) < 1.0


def test_expired_retained_messages_are_dropped_at_restore(stores: StoreFactory) -> None:
    store = stores()
    now = stores.clocks.mono
    store.retained_changed("soon", msg("soon", retain=True, expires_at=now + 10))
    store.retained_changed("later", msg("later", retain=True, expires_at=now + 1000))
    flush(store)
    store = stores.reopen(store, down_for=11)
    assert [m.topic for m in store.restore().retained] == ["later"]
    assert rows(store, "SELECT topic FROM retained") == [("later",)]
