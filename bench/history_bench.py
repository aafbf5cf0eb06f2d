"""What point history costs a gateway: bytes written to flash per point stored, and CPU.

How this works: for each rate (1,000 and 10 points/s by default) it runs a real `outpost run`
fed by the pymodbus simulator (bench/bridge/simulator.py): `devices` Modbus TCP units of up to
100 holding registers each, every register a point, polled once a second, `report = "poll"`,
so every poll is a stored value. A thread moves every register like a sensor (a slow sine per
register plus noise) so the values compress as real ones do, not as constants. The daemon
runs with `[history]` at its defaults (flush every 30 s, compaction every 10 min unless
`--compact-interval` says otherwise) and, for the baseline, with `[history] enabled = false`;
point values are not retained (`[bridge] retain = false`) so the broker's own store writes
next to nothing and the baseline is small.

Measured over the window after the warm-up: the daemon's `/proc/PID/io` `write_bytes` and its
CPU seconds (all threads), and the recorder's `received` count from `/status`. The WAL pages
not yet checkpointed at the end of the window would be written again by a later checkpoint:
the benchmark checkpoints the history file itself at the end of the window and adds what that
wrote (its own `write_bytes`), so the figure includes the checkpoint of everything the window
wrote. bytes/point = (history run's bytes - baseline bytes) / values stored; CPU % = (history
run's CPU seconds - baseline's) / window.

    .venv/bin/python -m bench.history_bench            # ~12 min: 2 rates x (history, baseline)
    .venv/bin/python -m bench.history_bench --rates 1000 --duration 120 --compact-interval 60
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import re
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from bench.bridge.simulator import Simulator
from bench.procstat import cpu_seconds
from bench.storage.common import write_bytes

ROOT = Path(__file__).resolve().parents[1]
GOALS = {1000: 64.0, 10: 512.0}  # bytes written per point stored (docs/history.md)
CPU_GOAL = 5.0  # % of a core at 1,000 points/s
PER_DEVICE = 100


def config(port: int, devices: int, per_device: int, history: bool,
           compact_interval: float | None) -> str:
    text = f"""
[status]
bind = "127.0.0.1:0"

[history]
enabled = {"true" if history else "false"}
{f"compact_interval = {compact_interval}" if compact_interval else ""}

[bridge]
retain = false
diagnostics_interval = 60

[[bridge.buses]]
name = "line"
type = "tcp"
host = "127.0.0.1"
port = {port}
timeout = 1.0
"""
    for unit in range(1, devices + 1):
        points = ", ".join(f'{{ name = "r{i}", address = {i}, scale = 0.1, unit = "degC" }}'
                           for i in range(per_device))
        text += f"""
[[bridge.devices]]
name = "dev{unit}"
bus = "line"
unit_id = {unit}
address_base = 0
poll_interval = 1.0
report = "poll"
points = [{points}]
"""
    return text


class Sensors:
    """Moves every register of every unit like a sensor, ten times a second."""

    def __init__(self, sim: Simulator, units: int, per_device: int) -> None:
        self.sim, self.units, self.per_device = sim, units, per_device
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        rng = random.Random(1)
        start = time.monotonic()
        while not self.done.wait(0.1):
            t = time.monotonic() - start
            for unit in range(1, self.units + 1):
                values = [int(2000 + 300 * math.sin(t / 300 + i) + rng.gauss(0, 2))
                          for i in range(self.per_device)]
                self.sim.set_registers(unit, "holding", 0, values)

    def stop(self) -> None:
        self.done.set()
        self.thread.join(2)


def _status(url: str) -> dict[str, Any]:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(url + "status", timeout=10) as response:
        answer: dict[str, Any] = json.loads(response.read())
    return answer


def _checkpoint(path: Path) -> int:
    """Checkpoints the history file's WAL from this process; the bytes that wrote."""
    if not path.exists():
        return 0
    before = write_bytes(os.getpid())
    conn = sqlite3.connect(path)
    try:
        conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
    finally:
        conn.close()
    return write_bytes(os.getpid()) - before


def run_case(rate: int, history: bool, warmup: float, duration: float,
             compact_interval: float | None) -> dict[str, Any]:
    """One daemon at `rate` points/s; the window's bytes, CPU and values stored."""
    devices = max(1, rate // PER_DEVICE)
    per_device = rate // devices
    sim = Simulator(range(1, devices + 1), "tcp", size=PER_DEVICE)
    port = sim.start()
    sensors = Sensors(sim, devices, per_device)
    with tempfile.TemporaryDirectory(prefix="history-bench-") as work:
        workdir = Path(work)
        (workdir / "outpost.toml").write_text(
            config(port, devices, per_device, history, compact_interval), encoding="utf-8")
        process = subprocess.Popen(
            [sys.executable, "-m", "outpost", "--log-level", "WARNING", "run", "--config",
             str(workdir / "outpost.toml"), "--state-dir", str(workdir / "state"),
             "--listen", "127.0.0.1:0"], cwd=ROOT, stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL, text=True)
        try:
            assert process.stdout is not None
            url = None
            for line in process.stdout:
                found = re.search(r"status on (\S+)", line)
                if found:
                    url = found.group(1)
                    break
            assert url is not None, "the daemon printed no status URL"
            time.sleep(warmup)
            received0 = _status(url).get("point_history", {}).get("received", 0)
            w0, c0, t0 = write_bytes(process.pid), cpu_seconds(process.pid), time.monotonic()
            time.sleep(duration)
            w1, c1, t1 = write_bytes(process.pid), cpu_seconds(process.pid), time.monotonic()
            status = _status(url)
            received1 = status.get("point_history", {}).get("received", 0)
            checkpoint = _checkpoint(workdir / "state" / "history.db") if history else 0
        finally:
            process.terminate()
            process.wait(30)
            sensors.stop()
            sim.stop()
    window = t1 - t0
    return {"rate": rate, "history": history, "window_s": round(window, 1),
            "write_bytes": w1 - w0, "checkpoint_bytes": checkpoint,
            "cpu_s": round(c1 - c0, 3), "values": received1 - received0,
            "values_per_s": round((received1 - received0) / window, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rates", default="1000,10", help="points per second, comma separated")
    parser.add_argument("--warmup", type=float, default=20.0)
    parser.add_argument("--duration", type=float, default=150.0,
                        help="measured window (s): several flush intervals")
    parser.add_argument("--compact-interval", type=float, default=None,
                        help="override [history] compact_interval (s); shorter than the "
                        "default 600 makes compaction cost more per value (a pessimistic "
                        "figure) but lets a short window include it")
    parser.add_argument("--json", type=Path, help="write the results here too")
    args = parser.parse_args()
    results = []
    for rate in (int(r) for r in args.rates.split(",")):
        with_history = run_case(rate, True, args.warmup, args.duration, args.compact_interval)
        baseline = run_case(rate, False, args.warmup, args.duration, args.compact_interval)
        values = max(1, with_history["values"])
        extra = (with_history["write_bytes"] + with_history["checkpoint_bytes"]
                 - baseline["write_bytes"] * with_history["window_s"] / baseline["window_s"])
        per_point = extra / values
        cpu = 100 * (with_history["cpu_s"] / with_history["window_s"]
                     - baseline["cpu_s"] / baseline["window_s"])
        goal = GOALS.get(rate)
        row = {"rate": rate, "values_per_s": with_history["values_per_s"],
               "bytes_per_point": round(per_point, 1), "goal_bytes": goal,
               "cpu_percent_of_core": round(cpu, 2), "history": with_history,
               "baseline": baseline}
        results.append(row)
        verdict = "" if goal is None else (" PASS" if per_point <= goal else " MISS")
        print(f"{rate:>5} points/s: {with_history['values_per_s']} stored/s, "
              f"{per_point:.1f} bytes written per point (goal {goal}){verdict}; "
              f"history CPU {cpu:.2f} % of a core"
              + (f" (goal {CPU_GOAL} %: {'PASS' if cpu <= CPU_GOAL else 'MISS'})"
                 if rate >= 1000 else "")
              + f"; process writes {with_history['write_bytes']} B + checkpoint "
                f"{with_history['checkpoint_bytes']} B, baseline {baseline['write_bytes']} B",
              flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2), encoding="utf-8")


if __name__ == "__main__":
    main()
