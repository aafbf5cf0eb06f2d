"""Stored database files of every schema version open, migrate and restore the same content."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from gateway.broker.codec.packets import Properties, Will
from gateway.broker.contracts.hooks import RestoredState
from gateway.broker.core.router import SubOptions
from gateway.broker.core.session import NEVER_EXPIRES
from storage.sqlite import schema
from tests.storage.conftest import FIXTURES, StoreFactory, copy_fixture, rows

VERSIONS = {"v1.db": 1, "v2.db": 2, "v2-wal.db": 2}


def test_every_schema_version_has_a_fixture() -> None:
    assert len(schema.KNOWN) == schema.SCHEMA_VERSION
    versions = set()
    for name in VERSIONS:
        conn = sqlite3.connect(f"file:{FIXTURES / name}?mode=ro&immutable=1", uri=True)
        try:
            versions.add(len(schema.applied(conn)))
        finally:
            conn.close()
    assert versions == set(range(1, schema.SCHEMA_VERSION + 1))


def check_content(state: RestoredState) -> None:
    """The logical content every fixture version holds (see make_fixtures.py)."""
    sessions = {s.record.client_id: s for s in state.sessions}
    assert sorted(sessions) == ["fix-v3", "fix-v5"]  # fix-expired expired in 2023
    v5 = sessions["fix-v5"]
    assert v5.record.protocol_level == 5 and v5.record.expiry_interval == NEVER_EXPIRES
    assert v5.record.subscriptions == {
        "fix/#": SubOptions(2, True, True, 2, 42),
        "$share/g/fix/shared": SubOptions(1, False, False, 0, None),
    }
    assert v5.record.will == Will("fix/will", b"gone", 1, True, Properties(
        will_delay_interval=30, content_type="text/plain", user_properties=(("a", "b"),)))
    assert v5.record.will_delay == 30
    got = [(d.message.topic, d.message.payload, d.qos, d.packet_id, d.released, d.retain,
            d.subscription_ids) for d in v5.deliveries]
    assert got == [
        ("fix/a", b"one", 1, 7, False, False, ()),
        ("fix/b", b"two", 2, 8, True, False, (42,)),
        ("fix/d", b"four", 1, 0, False, True, (42,)),  # fix/c expired in 2001: dropped
    ]
    assert v5.deliveries[1].message.properties == Properties(
        message_expiry_interval=3600, response_topic="fix/reply", correlation_data=b"\x00\x01",
        user_properties=(("k", "v"), ("k", "w")))
    assert v5.awaiting_release == {300}
    v3 = sessions["fix-v3"]
    assert v3.record.subscriptions == {"fix/3": SubOptions(1, False, False, 1, None)}
    assert [(d.message.topic, d.message.store_id) for d in v3.deliveries] == [
        ("fix/d", v5.deliveries[2].message.store_id)]
    retained = {m.topic: m for m in state.retained}
    assert "fix/retained-expired" not in retained
    assert retained["fix/retained"].payload == b"kept"
    assert retained["fix/retained"].properties == Properties(content_type="application/json")


@pytest.mark.parametrize("name", sorted(VERSIONS))
def test_fixture_opens_migrates_and_restores(name: str, stores: StoreFactory) -> None:
    copy_fixture(name, stores.state_dir)
    store = stores()
    assert store.opened.moved == []
    expected_migrations = schema.KNOWN[VERSIONS[name]:]
    assert store.opened.migrated == expected_migrations
    assert store.meta["schema_version"] == str(schema.SCHEMA_VERSION)
    assert store.meta["epoch"] == "00000000-0000-4000-8000-0000000000f1"  # kept by migrations
    state = store.restore()
    check_content(state)
    if name == "v2-wal.db":  # the commit that only reached the WAL is there
        assert "fix/in-wal" in {m.topic for m in state.retained}
    assert rows(store, "SELECT count(*) FROM outbox") == [(0 if name == "v1.db" else 1,)]
    assert rows(store, "SELECT name FROM _sqlite_migrations ORDER BY id") == [
        (n,) for n in schema.KNOWN]


@pytest.mark.parametrize("name", sorted(VERSIONS))
def test_fixture_keeps_working_after_migration(name: str, stores: StoreFactory) -> None:
    copy_fixture(name, stores.state_dir)
    store = stores()
    state = store.restore()
    v5 = next(s for s in state.sessions if s.record.client_id == "fix-v5")
    store.qos_completed("fix-v5", v5.deliveries[0])
    from tests.storage.conftest import delivery, flush, msg

    new = delivery(msg("fix/new"))
    store.qos_stored("fix-v5", new)
    assert new.store_seq > max(d.store_seq for d in v5.deliveries)
    flush(store)
    store = stores.reopen(store)
    (v5,) = [s for s in store.restore().sessions if s.record.client_id == "fix-v5"]
    assert [d.message.topic for d in v5.deliveries] == ["fix/b", "fix/d", "fix/new"]


def test_fixtures_are_not_modified_by_the_tests() -> None:
    for name in ("v1.db", "v2.db", "v2-wal.db"):
        assert not Path(f"{FIXTURES / name}-shm").exists()
    assert (FIXTURES / "v2-wal.db-wal").exists()
