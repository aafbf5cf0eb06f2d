"""The versioned configuration store: atomic writes, the history, stale writes refused,
rollback, and a write killed half-way leaving the old file or the new one."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from outpost.config_store import (
    ConfigStore,
    ConfigStoreError,
    StaleConfigError,
    sha256_text,
)

ONE = 'gateway_id = "one"\n'
TWO = 'gateway_id = "two"\n'
THREE = 'gateway_id = "three"\n'


def make_store(tmp_path: Path, text: str | None = ONE, keep: int = 20) -> ConfigStore:
    path = tmp_path / "etc" / "outpost.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    if text is not None:
        path.write_text(text, encoding="utf-8")
    return ConfigStore(path, tmp_path / "state", keep=keep)


def test_the_file_found_on_disk_is_the_first_version(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    current = store.current()
    assert (current.text, current.sha256, current.version) == (ONE, sha256_text(ONE), 1)
    [first] = store.history()
    assert (first.number, first.source, first.result) == (1, "hand", "applied")
    assert store.show(1) == ONE


def test_a_write_becomes_the_file_and_a_new_version(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    loaded = store.current()
    version = store.write(TWO, "console:alice", expected_sha256=loaded.sha256)
    assert (version.number, version.source, version.result) == (2, "console:alice", "written")
    assert store.path.read_text(encoding="utf-8") == TWO
    applied = store.set_result(2, "applied")
    assert applied.result == "applied"
    assert [(v.number, v.result) for v in store.history()] == [(1, "applied"), (2, "applied")]
    assert store.show(2) == TWO
    assert store.current().version == 2
    assert not list(store.path.parent.glob(".*"))  # no temporary file left beside it


def test_a_write_on_a_file_changed_since_it_was_loaded_is_refused(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    loaded = store.current()
    store.path.write_text(THREE, encoding="utf-8")  # someone edits it meanwhile
    with pytest.raises(StaleConfigError, match="changed since it was loaded"):
        store.write(TWO, "console:alice", expected_sha256=loaded.sha256)
    assert store.path.read_text(encoding="utf-8") == THREE  # untouched
    # The hand edit is recorded, so a rollback can come back to it.
    assert [(v.source, v.sha256) for v in store.history()] == [
        ("hand", sha256_text(ONE)), ("hand", sha256_text(THREE))]


def test_rollback_goes_back_to_the_previous_applied_version(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    store.write(TWO, "remote:7")
    restored = store.rollback(reason="the uplink did not come back")
    assert store.path.read_text(encoding="utf-8") == ONE
    assert (restored.number, restored.source, restored.result) == (3, "rollback:1", "written")
    history = {v.number: v for v in store.history()}
    assert (history[2].result, history[2].reason) == ("rolled back",
                                                     "the uplink did not come back")
    # A named version, forward again.
    store.set_result(3, "applied")
    store.rollback(to=2)
    assert store.path.read_text(encoding="utf-8") == TWO


def test_rollback_refuses_what_it_cannot_restore(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    with pytest.raises(ConfigStoreError, match="no earlier applied configuration"):
        store.rollback()
    with pytest.raises(ConfigStoreError, match="not in the history"):
        store.rollback(to=42)
    refused = store.record_refused(TWO, "remote:9", "bad signature")
    with pytest.raises(ConfigStoreError, match="never running"):
        store.rollback(to=refused.number)
    assert store.path.read_text(encoding="utf-8") == ONE


def test_a_refused_configuration_is_kept_but_never_written(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    version = store.record_refused(TWO, "remote:9", "signature does not verify")
    assert (version.result, version.reason) == ("refused", "signature does not verify")
    assert store.path.read_text(encoding="utf-8") == ONE
    assert store.show(version.number) == TWO
    assert store.current().version == 1
    with pytest.raises(ConfigStoreError, match="cannot become applied"):
        store.set_result(version.number, "applied")


def test_the_history_is_bounded_and_keeps_the_running_version(tmp_path: Path) -> None:
    store = make_store(tmp_path, keep=3)
    for n in range(6):
        store.write(f'gateway_id = "g{n}"\n', "hand")
    numbers = [v.number for v in store.history()]
    assert numbers == [5, 6, 7]
    assert len(list(store.folder.glob("*.toml"))) == 3
    with pytest.raises(ConfigStoreError, match="not in the history"):
        store.show(1)


def test_a_symbolic_link_stays_and_the_mode_is_kept(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    real = data / "outpost.toml"
    real.write_text(ONE, encoding="utf-8")
    real.chmod(0o640)
    link = tmp_path / "outpost.toml"
    link.symlink_to(real)
    store = ConfigStore(link, tmp_path / "state")
    store.write(TWO, "remote:1")
    assert link.is_symlink()
    assert real.read_text(encoding="utf-8") == TWO
    assert real.stat().st_mode & 0o777 == 0o640


def test_no_file_yet(tmp_path: Path) -> None:
    store = make_store(tmp_path, text=None)
    assert store.history() == []
    assert store.current().text == ""
    store.write(ONE, "remote:1", expected_sha256=sha256_text(""))
    assert store.path.read_text(encoding="utf-8") == ONE


WRITER = """
import os, sys, time
from pathlib import Path
from outpost.config_store import ConfigStore
stop_at, calls, real_fsync = int(sys.argv[4]), [0], os.fsync
def fsync(fd):
    calls[0] += 1
    if calls[0] == stop_at:  # the power goes here: tell the parent, wait to be killed
        print("stopped", flush=True)
        time.sleep(60)
    real_fsync(fd)
os.fsync = fsync
ConfigStore(Path(sys.argv[1]), Path(sys.argv[2])).write(sys.argv[3], "hand")
print("done", flush=True)
"""


def test_a_write_killed_at_any_point_leaves_the_old_file_or_the_new(tmp_path: Path) -> None:
    """A power cut while writing: the writer is killed (SIGKILL) at each of the fsyncs of a
    write in turn (the version's text, the history, the new file, the folder...). The file is
    then whole, the old text or the new, and the store opens again with the write recorded
    as written or interrupted, never left "writing", and no temporary file behind."""
    store = make_store(tmp_path)
    texts = [line * 8000 for line in ('a = "A"\n', 'b = "B"\n')]  # 64 kB each
    store.write(texts[0], "hand")
    root = Path(__file__).resolve().parents[2]
    outcomes = set()
    for stop_at in range(1, 30):
        old = store.path.read_text(encoding="utf-8")
        new = texts[1] if old == texts[0] else texts[0]
        before = store.history()[-1].number
        child = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(store.path), str(tmp_path / "state"), new,
             str(stop_at)], stdout=subprocess.PIPE, text=True, cwd=root)
        assert child.stdout is not None
        said = child.stdout.readline().strip()
        if said == "stopped":
            os.kill(child.pid, signal.SIGKILL)
        child.wait()
        child.stdout.close()
        assert store.path.read_text(encoding="utf-8") in (old, new)
        history = store.history()
        assert all(v.result != "writing" for v in history)
        on_disk = store.current().text
        latest = history[-1]
        if latest.number > before:  # the new version was recorded: its result tells the truth
            assert latest.sha256 == sha256_text(new)
            assert latest.result == ("written" if on_disk == new else "interrupted")
        else:  # killed before it was recorded: nothing changed
            assert on_disk == old
        assert store.current().version is not None
        assert not list(store.path.parent.glob(".*.tmp"))
        assert not list(store.folder.glob(".*.tmp"))
        index = json.loads((store.folder / "history.json").read_text(encoding="utf-8"))
        assert len(index["versions"]) == len(history)
        outcomes.add(store.current().text == new)
        if said == "done":
            break
    else:
        raise AssertionError("the write never finished")
    assert outcomes == {False, True}  # killed before the rename and after it
