"""Benchmark of the S7 bridge: points/s, CPU per 1,000 points/s, values again after a restart.

How this works: the node-snap7 test PLC (tests/bridge/s7/node_server/server.js, snap7's C
server in its own process, pinned to `--load-cpu`) serves `--points` REALs in DB3 that change
at `--hz`; `outpost run` (its own process, pinned to `--gateway-cpu`) has one `[[bridge.s7]]`
device reading them all every `--poll-interval` (default 0.01 s: as fast as it goes) with
every value published (`report = "poll"`); a raw MQTT subscriber in this process counts the
point messages (bench/bridge/run.py's `Subscriber`).

Figures:
- points published per second over the measured window, the gateway's CPU (user + system
  seconds per second) and its CPU per 1,000 points/s (goals: >= 10,000 points/s, <= 0.05
  cores per 1,000 points/s; compare with `python -m bench.bridge.run`, Modbus, in the same
  session), and the PLC's CPU (which side limits the rate);
- the read requests per poll (the device's plan for the PDU the server agreed to: 1,000 REALs
  are 4,000 bytes, nine answers of 480 bytes) and the gateway's RSS;
- values again after a PLC restart: the server is killed (SIGKILL) and started again; measured
  from its READY line to the device's `online` status and to every point good again (the
  reconnect backoff is `reconnect_initial` 0.5 s doubling to `reconnect_max` 2 s).

Run from the repository root: `.venv/bin/python -m bench.bridge.s7` (needs `make
node-packages`). Exit status 1 when a goal is missed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.bridge.opcua import StatusSubscriber, restart_times, wait_line
from bench.bridge.run import free_port, pinned
from bench.procstat import cpu_seconds, rss_kib

ROOT = Path(__file__).resolve().parents[2]
NODE_SERVER = ROOT / "tests" / "bridge" / "s7" / "node_server"
GOAL_POINTS_PER_S = 10_000
GOAL_CPU_PER_1000 = 0.05


def config_text(port: int, points: int, poll_interval: float) -> str:
    """One S7 device with a REAL point per 4 bytes of DB3, every poll published."""
    lines = ["[bridge]", "diagnostics_interval = 1.0", "", "[[bridge.s7]]", 'name = "plc"',
             'host = "127.0.0.1"', f"port = {port}", f"poll_interval = {poll_interval}",
             "reconnect_initial = 0.5", "reconnect_max = 2.0",
             'report = "poll"  # every value of every poll is published', "points = ["]
    lines += [f'  {{ name = "r{i}", address = "DB3.DBD{4 * i}", type = "REAL" }},'
              for i in range(points)]
    lines += ["]", ""]
    return "\n".join(lines)


class Server:
    """The node-snap7 PLC with `points` changing REALs, killable and restartable."""

    def __init__(self, points: int, hz: float, cpu: str) -> None:
        self.port, self.points, self.hz, self.cpu = free_port(), points, hz, cpu
        self.proc: subprocess.Popen[str] | None = None

    def start(self) -> float:
        """Start it; returns the monotonic time it said READY."""
        self.proc = subprocess.Popen(
            pinned(self.cpu, ["node", "server.js", str(self.port), str(self.points),
                              str(self.hz)]),
            cwd=NODE_SERVER, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        wait_line(self.proc, r"^READY", 30)
        return time.monotonic()

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()
            self.proc = None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="S7 bridge benchmark")
    parser.add_argument("--points", type=int, default=1000, help="REALs read every poll")
    parser.add_argument("--hz", type=float, default=10.0, help="changes per second on the PLC")
    parser.add_argument("--poll-interval", type=float, default=0.01)
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--gateway-cpu", default="0")
    parser.add_argument("--load-cpu", default="1")
    parser.add_argument("--json", type=Path)
    opts = parser.parse_args(argv)
    if opts.load_cpu != "none" and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {int(c) for c in opts.load_cpu.split(",")})
    workdir = Path(tempfile.mkdtemp(prefix="bench-s7-"))
    server = Server(opts.points, opts.hz, opts.load_cpu)
    server.start()
    result: dict[str, object] = {"points": opts.points, "poll_interval_s": opts.poll_interval}
    gateway: subprocess.Popen[str] | None = None
    try:
        config = workdir / "outpost.toml"
        config.write_text(config_text(server.port, opts.points, opts.poll_interval))
        gateway = subprocess.Popen(
            pinned(opts.gateway_cpu, [sys.executable, "-m", "outpost", "--log-level", "INFO",
                                      "run", "--listen", "127.0.0.1:0", "--config",
                                      str(config)]),
            cwd=ROOT, stdout=subprocess.PIPE, stderr=(workdir / "gateway.log").open("a"),
            text=True)
        ready = wait_line(gateway, r"listening on ([0-9.]+):(\d+)", 60)
        sub = StatusSubscriber(ready.group(1), int(ready.group(2)))
        deadline = time.monotonic() + 60
        while sub.points < opts.points:
            if time.monotonic() > deadline:
                raise RuntimeError(f"only {sub.points} point messages came")
            sub.pump(time.monotonic() + 0.2)
        sub.pump(time.monotonic() + opts.warmup)
        pids = (gateway.pid, server.proc.pid if server.proc else 0)
        points0, cpu0, t0 = sub.points, [cpu_seconds(p) for p in pids], time.monotonic()
        sub.pump(t0 + opts.duration)
        points1, cpu1, t1 = sub.points, [cpu_seconds(p) for p in pids], time.monotonic()
        elapsed = t1 - t0
        rate = (points1 - points0) / elapsed
        cpu, server_cpu = ((b - a) / elapsed for a, b in zip(cpu0, cpu1, strict=True))
        log = (workdir / "gateway.log").read_text()
        found = re.search(r"PDU (\d+) bytes, (\d+) request", log)
        plan = f"PDU {found[1]} bytes, {found[2]} request(s) per poll" if found else "?"
        result |= {
            "window_s": round(elapsed, 2), "points_per_s": round(rate),
            "gateway_cpu_cores": round(cpu, 3),
            "cpu_per_1000_points_per_s": round(cpu / rate * 1000, 4) if rate else None,
            "plc_cpu_cores": round(server_cpu, 3),
            "pdu_and_plan": plan,
            "gateway_rss_mib": round(rss_kib(gateway.pid) / 1024, 1),
        }

        # values again after a PLC restart
        online, good = restart_times(sub, server, opts.points)
        result |= {"restart_to_online_s": online, "restart_to_all_points_good_s": good}
    finally:
        if gateway is not None:
            gateway.kill()
            gateway.wait()
        server.kill()
    for key, value in result.items():
        print(f"{key:>30}: {value}")
    per_1000 = result.get("cpu_per_1000_points_per_s")
    ok = int(str(result.get("points_per_s", 0))) >= GOAL_POINTS_PER_S and \
        isinstance(per_1000, float) and per_1000 <= GOAL_CPU_PER_1000
    print(f"{'goals (10,000 points/s, 5 %)':>30}: {'PASS' if ok else 'MISS'}")
    if opts.json:
        opts.json.write_text(json.dumps(result, indent=2))
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
