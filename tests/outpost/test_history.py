"""Point history end to end: the pymodbus simulator's values through `outpost run`, read back
with `outpost history` and `/history.json`; a clean stop keeps every value, kill -9 loses at
most the last flush interval."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest

from bench.bridge.simulator import Simulator
from storage.history.reader import HistoryReader
from tests.bridge.support import Watcher
from tests.outpost.support import ROOT, Outpost, http_get, start_outpost
from tests.support.waiting import wait_for

FLUSH_S = 1.0


def config(port: int) -> str:
    return f"""
[history]
flush_interval = {FLUSH_S}

[bridge]
diagnostics_interval = 5

[[bridge.buses]]
name = "line"
type = "tcp"
host = "127.0.0.1"
port = {port}
timeout = 0.5

[[bridge.devices]]
name = "plc"
bus = "line"
unit_id = 1
address_base = 0
poll_interval = 0.1
report = "poll"
points = [
  {{ name = "power", address = 0, unit = "kW", scale = 0.5 }},
  {{ name = "door", table = "discrete", address = 9 }},
]
"""


class Stepper:
    """Moves the simulator's register 0 by one every 70 ms until stopped (a PLC at work)."""

    def __init__(self, sim: Simulator) -> None:
        self.sim = sim
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        value = 0
        while not self.done.wait(0.07):
            value = (value + 1) % 1000
            self.sim.set_registers(1, "holding", 0, [value])
            self.sim.set_bits(1, "discrete", 9, [value % 20 < 10])

    def stop(self) -> None:
        self.done.set()
        self.thread.join(2)


@pytest.fixture
def running(tmp_path: Path) -> Iterator[tuple[Outpost, Watcher, Stepper, Path]]:
    sim = Simulator([1], "tcp", size=20)
    port = sim.start()
    stepper = Stepper(sim)
    state = tmp_path / "state"
    outpost = start_outpost(tmp_path, config(port), "--state-dir", str(state))
    watcher = Watcher(outpost)
    try:
        yield outpost, watcher, stepper, state
    finally:
        stepper.stop()
        watcher.disconnect()
        if outpost.process.poll() is None:
            outpost.stop(signal.SIGKILL)
        sim.stop()


def published(watcher: Watcher, topic: str) -> list[tuple[int, Any]]:
    """(ts, value) of every value the bridge published on `topic`, in order."""
    return [(p["ts"], p["value"]) for p in map(json.loads, watcher.payloads(topic))]


def cli(state: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "outpost", "history", "--state-dir", str(state),
                           *args], check=False, capture_output=True, text=True, cwd=ROOT,
                          timeout=30)


def test_history_by_cli_and_http_and_all_of_it_after_a_clean_stop(
        running: tuple[Outpost, Watcher, Stepper, Path]) -> None:
    outpost, watcher, stepper, state = running
    wait_for(lambda: len(watcher.payloads("devices/plc/power")) >= 30, 20,
             message="the bridge publishes")
    cut = published(watcher, "devices/plc/power")
    since, until = cut[0][0], cut[-1][0] + 1
    query = urlencode({"point": "plc/power", "since": since,
                       "until": until, "max_points": 100_000})

    def served() -> dict[str, Any] | None:
        status, _, body = http_get(outpost.url(f"/history.json?{query}"))
        answer: dict[str, Any] = json.loads(body)
        return answer if status == 200 and len(answer["series"][0]["t"]) == len(cut) else None

    answer = wait_for(served, 20, message="the values reach the history within a flush")
    series = answer["series"][0]
    assert series["unit"] == "kW" and series["step_ms"] == 0
    assert list(zip(series["t"], series["value"], strict=True)) == cut

    done = cli(state, "plc/power", f"--since={since}", f"--until={until}", "--max-points",
               "100000", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == answer
    text = cli(state, "plc/power", "plc/door", "--since=-1h")
    assert text.returncode == 0, text.stderr
    assert "# plc/power (" in text.stdout and "# plc/door (" in text.stdout

    status, _, body = http_get(outpost.url("/history.json?point=plc/power&since=-1h&until=-2h"))
    assert status == 400 and b"must be before until" in body
    status, _, body = http_get(outpost.url("/history.json?point=plc/nothing"))
    assert status == 200 and json.loads(body)["series"][0]["error"] == "unknown point"
    unknown = cli(state, "plc/nothing")
    assert unknown.returncode == 1 and "plc/nothing: unknown point" in unknown.stderr
    bad = cli(state, "plc/power", "--since=yesterday")
    assert bad.returncode == 2 and "since: 'yesterday' is not a time" in bad.stderr

    stepper.stop()
    assert outpost.stop() == 0  # the last flush happens on the way out: nothing is lost
    everything = published(watcher, "devices/plc/power")
    door = published(watcher, "devices/plc/door")
    final = json.loads(cli(state, "plc/power", "plc/door", f"--since={since}",
                           "--until=now", "--max-points", "100000", "--json").stdout)
    power_series, door_series = final["series"]
    assert list(zip(power_series["t"], power_series["value"], strict=True)) == [
        (t, v) for t, v in everything if t >= since]
    assert list(zip(door_series["t"], door_series["value"], strict=True)) == [
        (t, float(v)) for t, v in door if t >= since]


def test_kill_9_loses_at_most_the_last_flush_interval(
        running: tuple[Outpost, Watcher, Stepper, Path]) -> None:
    outpost, watcher, _stepper, state = running
    reader = HistoryReader(state / "history.db")

    def stored() -> int:
        with reader.view() as view:
            point = view.point("plc/power")
            return 0 if point is None else len(view.raw(point, 0, 2 ** 62).ts)

    wait_for(lambda: stored() >= 30, 20, message="a few flushes are committed")
    killed_ms = int(time.time() * 1000)
    outpost.process.kill()
    outpost.process.wait(10)
    sent = published(watcher, "devices/plc/power")
    with reader.view() as view:
        point = view.point("plc/power")
        assert point is not None
        raw = view.raw(point, 0, 2 ** 62)
    kept = set(zip(raw.ts, raw.values, strict=True))
    lost = [(t, v) for t, v in sent if (t, v) not in kept]
    # What was committed is what was sent (nothing invented), and what is missing is only the
    # values of the last flush interval (plus the flush that was being written).
    assert kept <= set(sent)
    assert len(kept) >= 30
    bound = killed_ms - 2 * FLUSH_S * 1000
    assert [t for t, _ in lost if t < bound] == [], (
        f"{len(lost)} of {len(sent)} lost, some older than two flush intervals")
