"""`outpost db backup`: an online copy of a real running broker's database, taken while a
publisher keeps adding messages to an offline persistent session's queue; then a broker started
on the copy delivers exactly the messages the copy holds.

What must hold:
- the broker keeps committing (and acknowledging) while the copy is in progress: the copy holds
  one read transaction on the WAL, which never blocks the writer;
- the copy is one consistent snapshot: every message acknowledged before the backup began is in
  it, nothing published after it began is, and what it holds is a gapless prefix of the
  publisher's sequence;
- the copy passes `quick_check`, is a single file (no -wal/-shm) and a broker starts on it with
  its sessions, subscriptions and queues.
"""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

from gateway.broker.codec.packets import Connect, PubAck, Publish
from storage.sqlite import admin
from tests.gateway.broker.e2e.helpers import RawClient
from tests.support.broker_proc import ROOT, BrokerProcess, start_broker

CONFIG = """\
[limits]
max_queued_messages = 1000000
max_queued_bytes = 1000000000
max_inflight = 20

[storage]
queue_page = 50
"""
TOPIC = "backup/data"
KEEPER = "keeper"  # the persistent session whose queue fills
WINDOW = 20  # QoS 1 messages the feeder has unacknowledged at most
PAD = b"." * 200  # more pages to copy: more steps


def broker(workdir: Path, state: Path) -> BrokerProcess:
    return start_broker(workdir, CONFIG, ("--state-dir", str(state)))


def offline_session(proc: BrokerProcess) -> None:
    """`keeper` subscribes with a persistent session and goes away: its queue fills."""
    with RawClient.to(proc) as c:
        assert c.connect(KEEPER, clean=False)[3] == 0
        assert c.subscribe((f"{TOPIC}/#", 1))[-1] == 1
        c.disconnect()


class Feeder(threading.Thread):
    """Publishes numbered QoS 1 messages (pipelined) until stopped; records the acknowledged."""

    def __init__(self, proc: BrokerProcess) -> None:
        super().__init__(daemon=True)
        self.proc = proc
        self.halt = threading.Event()
        self.published = 0  # messages 0 .. published-1 were sent
        self.acked: set[int] = set()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with RawClient.to(self.proc, timeout=10) as c:
                c.send(Connect("feeder", 4, True, 60))
                assert c.recv_frame()[:2] == b"\x20\x02"
                unacked: dict[int, int] = {}  # packet id -> message number
                while not self.halt.is_set() or unacked:
                    while not self.halt.is_set() and len(unacked) < WINDOW:
                        pid = self.published % 65535 + 1
                        unacked[pid] = self.published
                        c.send(Publish(f"{TOPIC}/{self.published % 7}",
                                       b"m%06d" % self.published + PAD, 1, False, False, pid))
                        self.published += 1
                    packet = c.recv()
                    if isinstance(packet, PubAck):
                        self.acked.add(unacked.pop(packet.packet_id))
        except BaseException as exc:  # reported by stop()
            self.error = exc

    def wait_acked(self, count: int, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while len(self.acked) < count:
            assert self.error is None, self.error
            assert time.monotonic() < deadline, f"only {len(self.acked)} of {count} acknowledged"
            time.sleep(0.01)

    def stop(self) -> None:
        self.halt.set()
        self.join(30)
        assert not self.is_alive() and self.error is None, self.error


def drain(proc: BrokerProcess, count: int) -> list[int]:
    """Reconnect `keeper`, take `count` queued messages (acknowledging them) and check that no
    more come; returns the message numbers in the order received."""
    with RawClient.to(proc, timeout=10) as c:
        assert c.connect(KEEPER, clean=False)[:4] == b"\x20\x02\x01\x00"  # session present
        numbers = [int(p.payload[1:7]) for p in c.receive_publishes(count, timeout=10)]
        assert not [p for p in c.sync() if isinstance(p, Publish)]
        c.disconnect()
    return numbers


def test_backup_of_a_running_broker_while_messages_are_queued(tmp_path: Path) -> None:
    state, restored = tmp_path / "state", tmp_path / "restored"
    copy = tmp_path / "backups" / "outpost.db"
    copy.parent.mkdir()
    proc = broker(tmp_path / "run0", state)
    try:
        offline_session(proc)
        feeder = Feeder(proc)
        feeder.start()
        feeder.wait_acked(1500)  # a queue of some MB: enough pages for many small steps
        acked_before = set(feeder.acked)
        seen: dict[str, int] = {}

        def progress(remaining: int, total: int) -> None:
            seen["steps"] = seen.get("steps", 0) + 1
            if seen["steps"] == 1:
                # The snapshot was pinned before this first step; anything the feeder sends
                # from now on was published after it.
                seen["published_at_start"] = feeder.published
            elif seen["steps"] == 3:
                # Mid-copy, with the read transaction held: the broker must still commit and
                # acknowledge new messages (a blocked writer would time out here).
                feeder.wait_acked(len(feeder.acked) + 3 * WINDOW, timeout=30)
                assert remaining > 0, "the copy ended too early to be checked mid-way"
                seen["acked_mid_copy"] = max(feeder.acked)

        result = admin.backup(state, copy, pages_per_step=4, sleep=0.002, progress=progress)
        feeder.stop()
        epoch = admin.stats(state)["epoch"]
    finally:
        assert proc.stop() == 0, proc.log()[-3000:]

    assert result.snapshot and result.steps == seen["steps"] >= 5
    assert seen["acked_mid_copy"] >= seen["published_at_start"]  # committed during the copy
    queued = result.rows["deliveries"]
    assert queued == result.rows["messages"] and result.rows["subscriptions"] == 1
    assert max(acked_before) < queued <= seen["published_at_start"]  # one snapshot
    assert result.file_bytes == copy.stat().st_size == result.pages * result.page_size
    assert sorted(p.name for p in copy.parent.iterdir()) == ["outpost.db"]  # one file
    assert not admin.check(copy.parent)

    # Restore: the copy becomes outpost.db of a state directory; a broker starts on it.
    restored.mkdir()
    shutil.copyfile(copy, restored / "outpost.db")
    proc = broker(tmp_path / "run1", restored)
    try:
        assert "moved aside" not in proc.log()
        # a restored copy numbers the uplink under a new epoch: no id the original handed
        # out after the backup can come back with another message
        assert admin.stats(restored)["epoch"] != epoch
        with sqlite3.connect(f"file:{restored / 'outpost.db'}?mode=ro", uri=True) as db:
            meta = dict(db.execute("SELECT key, value FROM meta"))
        assert meta["previous_epoch"] == epoch and "epoch_renew" not in meta
        assert drain(proc, queued) == list(range(queued))  # the snapshot's queue, in order, no gaps
        with RawClient.to(proc) as c:  # the subscription came back with the session
            assert c.connect("late", clean=True)[3] == 0
            c.publish(f"{TOPIC}/late", b"m999999", qos=1)
        assert drain(proc, 1) == [999999]
    finally:
        assert proc.stop() == 0, proc.log()[-3000:]


def outpost_db(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "outpost", "db", *args], capture_output=True,
                          text=True, cwd=ROOT, timeout=60, check=False)


def test_cli_backup_next_to_a_running_broker(tmp_path: Path) -> None:
    state = tmp_path / "state"
    dest = tmp_path / "copy.db"
    proc = broker(tmp_path / "run0", state)
    try:
        offline_session(proc)
        with RawClient.to(proc) as c:
            assert c.connect("pub", clean=True)[3] == 0
            for n in range(5):
                c.publish(f"{TOPIC}/x", b"m%06d" % n, qos=1)
        out = outpost_db("backup", str(dest), "--state-dir", str(state))
        assert out.returncode == 0, out.stderr
        assert f"to {dest}" in out.stdout and "quick_check            ok" in out.stdout
        assert "  deliveries           5" in out.stdout
        again = outpost_db("backup", str(dest), "--state-dir", str(state))
        assert again.returncode == 1 and "exists (--force" in again.stderr
        Path(f"{dest}-wal").write_bytes(b"stale")  # left by an earlier copy: would be replayed
        forced = outpost_db("backup", str(dest), "--force", "--pages-per-step", "1",
                            "--sleep-ms", "0", "--state-dir", str(state))
        assert forced.returncode == 0, forced.stderr
        assert not Path(f"{dest}-wal").exists()
        live = outpost_db("backup", str(state / "outpost.db"), "--force",
                          "--state-dir", str(state))
        assert live.returncode == 1 and "live database" in live.stderr
        missing = outpost_db("backup", str(dest), "--state-dir", str(tmp_path / "none"))
        assert missing.returncode == 2
    finally:
        assert proc.stop() == 0
    restored = tmp_path / "restored"
    restored.mkdir()
    shutil.copyfile(dest, restored / "outpost.db")
    assert outpost_db("check", "--state-dir", str(restored)).stdout.strip() == "ok"
    assert len(admin.queue(restored, KEEPER)) == 5


def test_backup_and_restore_are_documented() -> None:
    text = (ROOT / "docs" / "operations.md").read_text(encoding="utf-8")
    assert "## Backup and restore of the state directory" in text
    assert "outpost db backup" in text
