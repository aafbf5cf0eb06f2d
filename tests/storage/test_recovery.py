"""A bad database file never stops the broker: it is moved aside and the store starts empty."""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

import pytest

from gateway.broker.contracts.hooks import SessionRecord
from gateway.broker.core.session import NEVER_EXPIRES
from storage.sqlite import recovery, schema
from tests.storage.conftest import FIXTURES, StoreFactory, copy_fixture, delivery, flush, msg


@pytest.mark.parametrize("name", ["corrupt.db", "truncated.db", "zero.db"])
def test_bad_file_is_moved_aside_and_store_starts_empty(
    name: str, stores: StoreFactory, caplog: pytest.LogCaptureFixture
) -> None:
    target = copy_fixture(name, stores.state_dir)
    original = (FIXTURES / name).read_bytes()
    Path(f"{target}-wal").write_bytes(b"\x00" * 100)  # a WAL left next to it goes along
    with caplog.at_level(logging.ERROR, logger="outpost.storage"):
        store = stores()
    moved = store.opened.moved
    assert [p.name for p in moved] == [
        moved[0].name, f"{moved[0].name}-wal"]
    assert moved[0].name.startswith("outpost.db.corrupt-")
    assert moved[0].read_bytes() == original  # kept for forensics, untouched
    assert any(r.levelno == logging.ERROR and "moved aside" in r.getMessage()
               for r in caplog.records)
    assert store.meta["moved_aside"] == moved[0].name
    assert store.stats()["files_moved_aside"] == 1
    state = store.restore()
    assert state.sessions == [] and state.retained == []
    store.session_saved(SessionRecord("fresh", 4, NEVER_EXPIRES))
    store.qos_stored("fresh", delivery(msg()))
    flush(store)
    store = stores.reopen(store)
    assert store.opened.moved == []
    assert [s.record.client_id for s in store.restore().sessions] == ["fresh"]


def test_zero_length_file_is_a_new_database(stores: StoreFactory) -> None:
    stores.state_dir.mkdir(parents=True)
    (stores.state_dir / "outpost.db").write_bytes(b"")
    store = stores()
    assert store.opened.created and store.opened.moved == []


def test_database_of_a_newer_outpost_is_moved_aside_as_newer(stores: StoreFactory) -> None:
    copy_fixture("v2.db", stores.state_dir)
    conn = sqlite3.connect(stores.state_dir / "outpost.db")
    conn.execute("INSERT INTO _sqlite_migrations (migration_set, name, applied_at) "
                 "VALUES ('outpost', '9999_future', 'x')")
    conn.commit()
    conn.close()
    store = stores()
    assert store.opened.moved[0].name.startswith("outpost.db.newer-")
    assert store.restore().sessions == []


def test_foreign_database_is_moved_aside(stores: StoreFactory) -> None:
    stores.state_dir.mkdir(parents=True)
    conn = sqlite3.connect(stores.state_dir / "outpost.db")
    conn.execute("CREATE TABLE sessions (whatever TEXT)")
    conn.commit()
    conn.close()
    store = stores()
    assert store.opened.moved and "not an outpost database" in store.opened.reason


def test_environment_errors_do_not_move_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = copy_fixture("v2.db", tmp_path)

    def full(*args: object, **kwargs: object) -> list[str]:
        exc = sqlite3.OperationalError("database or disk is full")
        exc.sqlite_errorname = "SQLITE_FULL"
        raise exc

    monkeypatch.setattr(schema, "migrate", full)
    with pytest.raises(sqlite3.OperationalError):
        recovery.open_database(path, "gw")
    assert path.exists() and not list(tmp_path.glob("*.corrupt-*"))


def test_a_failed_migration_leaves_the_previous_version(tmp_path: Path) -> None:
    path = copy_fixture("v1.db", tmp_path)
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("CREATE TABLE outbox (x)")  # makes 0002_outbox fail half-way
    with pytest.raises(sqlite3.OperationalError):
        schema.migrate(conn, "gw")
    assert schema.applied(conn) == ["0001_core"]
    assert conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone() == (
        "1",)
    conn.close()
