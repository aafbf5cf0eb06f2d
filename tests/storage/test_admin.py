"""`outpost db ...`: library functions and the thin CLI, next to a live store."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gateway.broker.contracts.hooks import SessionRecord
from gateway.broker.core.router import SubOptions
from gateway.broker.core.session import NEVER_EXPIRES
from storage.sqlite import admin
from storage.sqlite.recovery import StoreLockedError
from tests.storage.conftest import StoreFactory, copy_fixture, delivery, flush, msg

ROOT = Path(__file__).resolve().parents[2]


def populated(stores: StoreFactory) -> None:
    store = stores()
    store.session_saved(SessionRecord("c1", 5, NEVER_EXPIRES, {"a/#": SubOptions(1)}))
    store.session_saved(SessionRecord("c2", 4, 3600, disconnected_at=stores.clocks.mono))
    for n in range(5):
        d = delivery(msg(f"a/{n}", b"12345"))
        if n == 0:
            d.packet_id = 3
        store.qos_stored("c1", d)
    store.qos2_received("c1", 77)
    store.retained_changed("a/r", msg("a/r", b"ret", retain=True))
    store.retained_changed("b/r", msg("b/r", b"ret", retain=True))
    flush(store)


def test_stats_sessions_queue_retained_on_a_live_store(stores: StoreFactory) -> None:
    populated(stores)  # the store stays open, as in a running broker
    s = admin.stats(stores.state_dir)
    assert s["rows"]["deliveries"] == 5 and s["rows"]["retained"] == 2
    assert s["schema_version"] == "2" and s["wal_bytes"] > 0
    assert s["queues"][0]["client_id"] == "c1" and s["queues"][0]["queued"] == 5
    assert s["queues"][0]["bytes"] == 5 * (3 + 5)
    sessions = {x["client_id"]: x for x in admin.sessions(stores.state_dir)}
    assert sessions["c1"]["subscriptions"] == {"a/#": 1}
    assert (sessions["c1"]["queued"], sessions["c1"]["inflight"]) == (4, 1)
    assert sessions["c1"]["qos2_awaiting_release"] == 1 and sessions["c1"]["online"]
    assert not sessions["c2"]["online"]
    q = admin.queue(stores.state_dir, "c1", limit=3)
    assert [(r.topic, r.packet_id) for r in q] == [("a/0", 3), ("a/1", 0), ("a/2", 0)]
    with pytest.raises(LookupError):
        admin.queue(stores.state_dir, "nobody")
    assert [r["topic"] for r in admin.retained(stores.state_dir, "a/#")] == ["a/r"]
    assert len(admin.retained(stores.state_dir)) == 2
    assert admin.check(stores.state_dir) == []
    store = stores.open[0]  # the live store keeps committing after the readers went away
    store.qos_stored("c1", delivery(msg("a/later")))
    flush(store)
    assert admin.stats(stores.state_dir)["rows"]["deliveries"] == 6


def test_check_reports_a_corrupt_file(tmp_path: Path) -> None:
    copy_fixture("corrupt.db", tmp_path)
    problems = admin.check(tmp_path)
    assert problems and any("malformed" in p or "Page" in p for p in problems)


def test_vacuum_refuses_while_a_broker_holds_the_lock(stores: StoreFactory) -> None:
    populated(stores)
    with pytest.raises(StoreLockedError):
        admin.vacuum(stores.state_dir)
    stores.close(stores.open[0])
    before, after = admin.vacuum(stores.state_dir)
    assert after <= before
    store = stores()
    assert len(store.restore().sessions) == 2
    assert store.reader.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def outpost_db(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "outpost", "db", *args], capture_output=True,
                          text=True, cwd=ROOT, timeout=60, check=False)


def test_cli_commands(stores: StoreFactory) -> None:
    populated(stores)
    d = str(stores.state_dir)
    out = outpost_db("stats", "--state-dir", d)
    assert out.returncode == 0, out.stderr
    assert "deliveries" in out.stdout and "schema_version" in out.stdout
    assert "c1" in outpost_db("sessions", "--state-dir", d).stdout
    assert "a/0" in outpost_db("queue", "c1", "--state-dir", d).stdout
    assert outpost_db("queue", "nobody", "--state-dir", d).returncode == 2
    assert "b/r" not in outpost_db("retained", "a/#", "--state-dir", d).stdout
    assert outpost_db("check", "--state-dir", d).stdout.strip() == "ok"
    locked = outpost_db("vacuum", "--state-dir", d)
    assert locked.returncode == 1 and "stop the broker" in locked.stderr
    assert outpost_db("stats", "--state-dir", str(stores.state_dir / "none")).returncode == 2


def test_every_db_command_is_documented() -> None:
    text = (ROOT / "docs" / "storage.md").read_text(encoding="utf-8")
    for command in ("stats", "sessions", "queue", "retained", "check", "vacuum", "backup"):
        assert f"outpost db {command}" in text
