"""A store migrated by a newer outpost, opened again by this one (an update rolled back).

The files are stored fixtures (tests/fixtures/db/make_fixtures.py): `newer-expand.db` is what a
future schema 3 leaves behind (an expand migration: an added column and table), which this
outpost must use as it is; `newer-contract.db` adds a contract migration (oldest_reader 4),
which this outpost must refuse while keeping every byte of it.
"""

from __future__ import annotations

import sqlite3

from storage.sqlite import schema
from tests.storage.conftest import FIXTURES, StoreFactory, copy_fixture, delivery, flush, msg, rows


def test_newer_expand_schema_is_used_as_it_is(stores: StoreFactory) -> None:
    copy_fixture("newer-expand.db", stores.state_dir)
    store = stores()
    assert store.opened.moved == [] and store.opened.migrated == []
    state = store.restore()
    sessions = {s.record.client_id: s for s in state.sessions}
    assert sorted(sessions) == ["fix-v3", "fix-v5"]
    assert [(d.message.topic, d.packet_id, d.released) for d in sessions["fix-v5"].deliveries] == [
        ("fix/a", 7, False), ("fix/b", 8, True), ("fix/d", 0, False)]
    v3 = sessions["fix-v3"]
    assert [d.message.topic for d in v3.deliveries] == ["fix/d", "fix/e"]  # fix/e: by schema 3
    assert v3.deliveries[1].message.payload == b"new"
    assert {m.topic: m.payload for m in state.retained} == {"fix/retained": b"kept"}
    # This outpost keeps writing in its own layout; the newer columns and tables stay.
    new = delivery(msg("fix/after-rollback"))
    store.qos_stored("fix-v3", new)
    flush(store)
    store = stores.reopen(store)
    assert store.opened.moved == []
    v3 = next(s for s in store.restore().sessions if s.record.client_id == "fix-v3")
    assert [d.message.topic for d in v3.deliveries] == ["fix/d", "fix/e", "fix/after-rollback"]
    assert rows(store, "SELECT name FROM _sqlite_migrations ORDER BY id")[-1] == (
        "0003_future_expand",)
    assert rows(store, "SELECT origin FROM messages WHERE topic = 'fix/e'") == [("modbus",)]
    assert rows(store, "SELECT target FROM future_routes") == [("cloud",)]
    assert store.meta["schema_version"] == "3"
    assert store.meta[schema.OLDEST_READER] == "1"


def test_newer_contract_schema_is_refused_and_kept_intact(stores: StoreFactory) -> None:
    copy_fixture("newer-contract.db", stores.state_dir)
    original = (FIXTURES / "newer-contract.db").read_bytes()
    store = stores()
    moved = store.opened.moved
    assert moved[0].name.startswith("outpost.db.newer-")
    assert moved[0].read_bytes() == original  # nothing lost: the newer outpost can take it back
    assert "schema version 4" in store.opened.reason
    assert "0004_future_contract" in store.opened.reason
    assert f"this outpost has {schema.SCHEMA_VERSION}" in store.opened.reason
    assert store.restore().sessions == []
    assert store.meta["moved_aside"] == moved[0].name


def test_newer_file_that_does_not_name_its_readers_is_refused(stores: StoreFactory) -> None:
    copy_fixture("newer-expand.db", stores.state_dir)
    conn = sqlite3.connect(stores.state_dir / "outpost.db")
    conn.execute("DELETE FROM meta WHERE key = ?", (schema.OLDEST_READER,))
    conn.commit()
    conn.close()
    store = stores()
    assert store.opened.moved[0].name.startswith("outpost.db.newer-")
    assert "does not say which versions can read it" in store.opened.reason


def test_every_migration_records_the_oldest_reader(stores: StoreFactory) -> None:
    store = stores()
    contracts = [schema.KNOWN.index(n) + 1 for n in schema.CONTRACTS]
    assert store.meta[schema.OLDEST_READER] == str(max(contracts, default=1))
    # No released migration is a contract yet: every older outpost reads today's files.
    assert not schema.CONTRACTS
