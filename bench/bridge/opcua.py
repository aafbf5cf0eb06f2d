"""Benchmark of the OPC UA bridge: points/s, CPU per 1,000 points/s, memory, re-subscribe time.

How this works: the node-opcua test PLC (tests/bridge/opcua/node_server/server.js, its own
process, pinned to `--load-cpu`) serves `--items` Double variables that all change at `--hz`;
`outpost run` (its own process, pinned to `--gateway-cpu`) has one `[[bridge.opcua]]` device
with a monitored item per variable (sampling and publishing intervals of 1/hz, every change
published: `report = "poll"`); a raw MQTT subscriber in this process counts the point messages
(bench/bridge/run.py's `Subscriber`).

Figures:
- points published per second over the measured window, the gateway's CPU (user + system
  seconds per second) and its CPU per 1,000 points/s (compare with `python -m bench.bridge.run`,
  Modbus, in the same session);
- memory per 1,000 monitored items: the gateway's RSS with `--items` items minus its RSS with
  one item (a second, short gateway run against the same server), per 1,000 items;
- time to re-subscribe after a server restart: the server is killed (SIGKILL) and started
  again; measured from its READY line to the device's `online` status and to every item
  having published a good value again (the reconnect backoff is `reconnect_initial` 0.5 s).

Run from the repository root: `.venv/bin/python -m bench.bridge.opcua` (needs `make
node-packages`). Exit status 1 when the server's rate is not delivered (points/s below 90 % of
items x hz).
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
from typing import Protocol

from bench import wire
from bench.bridge.run import Subscriber, free_port, pinned
from bench.procstat import cpu_seconds, rss_kib

ROOT = Path(__file__).resolve().parents[2]
NODE_SERVER = ROOT / "tests" / "bridge" / "opcua" / "node_server"


def config_text(port: int, items: int, hz: float) -> str:
    """One OPC UA device with a monitored item per variable, every change published."""
    period = round(1.0 / hz, 3)
    lines = ["[bridge]", "diagnostics_interval = 1.0", "", "[[bridge.opcua]]", 'name = "plc"',
             f'endpoint = "opc.tcp://127.0.0.1:{port}/UA/Plc"',
             f"publishing_interval = {period}", f"sampling_interval = {period}",
             "reconnect_initial = 0.5", "reconnect_max = 2.0", "keepalive = 1.0",
             'report = "poll"  # every change is published', "points = ["]
    lines += [f'  {{ name = "l{i}", node = "ns=1;s=Load.{i}" }},' for i in range(items)]
    lines += ["]", ""]
    return "\n".join(lines)


def wait_line(proc: subprocess.Popen[str], pattern: str, timeout: float) -> re.Match[str]:
    """The first line of `proc`'s stdout that matches (node-opcua prints notices first)."""
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if match := re.search(pattern, line):
            return match
        if not line and proc.poll() is not None:
            break
    proc.kill()
    raise RuntimeError(f"{proc.args!r} did not print {pattern!r}")


class Server:
    """The node-opcua PLC with `items` changing variables, killable and restartable."""

    def __init__(self, pki: Path, items: int, hz: float, cpu: str) -> None:
        self.port, self.pki, self.items, self.hz, self.cpu = free_port(), pki, items, hz, cpu
        self.proc: subprocess.Popen[str] | None = None

    def start(self) -> float:
        """Start it; returns the monotonic time it said READY."""
        self.proc = subprocess.Popen(
            pinned(self.cpu, ["node", "server.js", str(self.port), str(self.pki),
                              str(self.items), str(self.hz)]),
            cwd=NODE_SERVER, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        wait_line(self.proc, r"^READY", 180)  # the first start makes a certificate
        return time.monotonic()

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()
            self.proc = None


class StatusSubscriber(Subscriber):
    """Also notes when devices/plc/status changes and which items published good values."""

    def __init__(self, host: str, port: int) -> None:
        super().__init__(host, port)
        self.statuses: list[tuple[float, str]] = []
        self.good: set[bytes] = set()

    def _walk(self) -> None:  # the parent's walk, plus status and per-item quality
        buf, pos = self.buffer, 0
        while (found := wire.split_packet(buf, pos)) is not None:
            first, body, end = found
            if first >> 4 == wire.PUBLISH:
                topic = wire.publish_topic(buf, body)
                payload = bytes(buf[body + 2 + len(topic):end])
                leaf = topic.rsplit(b"/", 1)[1]
                if leaf == b"status":
                    self.statuses.append((time.monotonic(), payload.decode()))
                elif leaf != b"diagnostics":
                    self.points += 1
                    if b'"quality":"good"' in payload:
                        self.good.add(leaf)
                    else:
                        self.good.discard(leaf)
            pos = end
        del buf[:pos]


class Gateway:
    """`outpost run` with a configuration, and a subscriber counting its points."""

    def __init__(self, workdir: Path, text: str, cpu: str, name: str = "outpost.toml",
                 log_level: str = "WARNING") -> None:
        config = workdir / name
        config.write_text(text)
        self.log = workdir / "gateway.log"
        self.proc = subprocess.Popen(
            pinned(cpu, [sys.executable, "-m", "outpost", "--log-level", log_level, "run",
                         "--listen", "127.0.0.1:0", "--config", str(config)]),
            cwd=ROOT, stdout=subprocess.PIPE, stderr=self.log.open("a"), text=True)
        ready = wait_line(self.proc, r"listening on ([0-9.]+):(\d+)", 60)
        self.sub = StatusSubscriber(ready.group(1), int(ready.group(2)))

    def wait_points(self, count: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while self.sub.points < count:
            if time.monotonic() > deadline:
                raise RuntimeError(f"only {self.sub.points} of {count} point messages came")
            self.sub.pump(time.monotonic() + 0.2)

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()


def measured_window(sub: StatusSubscriber, pids: tuple[int, int], warmup: float,
                    duration: float, device_key: str) -> dict[str, object]:
    """After `warmup` seconds, `duration` seconds of points published per second, the gateway's
    CPU (`pids[0]`: user + system seconds per second) and CPU per 1,000 points/s, and the
    device's (`pids[1]`) CPU as `device_key`."""
    sub.pump(time.monotonic() + warmup)
    points0, cpu0, t0 = sub.points, [cpu_seconds(p) for p in pids], time.monotonic()
    sub.pump(t0 + duration)
    points1, cpu1, t1 = sub.points, [cpu_seconds(p) for p in pids], time.monotonic()
    elapsed = t1 - t0
    rate = (points1 - points0) / elapsed
    cpu, device_cpu = ((b - a) / elapsed for a, b in zip(cpu0, cpu1, strict=True))
    return {
        "window_s": round(elapsed, 2), "points_per_s": round(rate),
        "gateway_cpu_cores": round(cpu, 3),
        "cpu_per_1000_points_per_s": round(cpu / rate * 1000, 4) if rate else None,
        device_key: round(device_cpu, 3),
    }


class Restartable(Protocol):
    """A server process that can be killed and started again (start: when it said READY)."""

    def kill(self) -> None: ...

    def start(self) -> float: ...


def restart_times(sub: StatusSubscriber, server: Restartable, points: int) -> tuple[float, float]:
    """Kill the server, wait for the device's `offline`, start it again: seconds from its READY
    to the device's `online` and to all `points` good again."""
    server.kill()
    deadline = time.monotonic() + 30
    while not (sub.statuses and sub.statuses[-1][1] == "offline"):
        if time.monotonic() > deadline:
            raise RuntimeError("the device did not go offline")
        sub.pump(time.monotonic() + 0.2)
    sub.good.clear()
    ready = server.start()
    deadline = time.monotonic() + 60
    while len(sub.good) < points:
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {len(sub.good)} points came back good")
        sub.pump(time.monotonic() + 0.02)
    back = time.monotonic()
    online = next(t for t, s in sub.statuses if s == "online" and t >= ready)
    return round(online - ready, 2), round(back - ready, 2)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="OPC UA bridge benchmark")
    parser.add_argument("--items", type=int, default=1000, help="monitored items")
    parser.add_argument("--hz", type=float, default=10.0, help="changes per item per second")
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--gateway-cpu", default="0")
    parser.add_argument("--load-cpu", default="1")
    parser.add_argument("--json", type=Path)
    opts = parser.parse_args(argv)
    if opts.load_cpu != "none" and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {int(c) for c in opts.load_cpu.split(",")})
    workdir = Path(tempfile.mkdtemp(prefix="bench-opcua-"))
    server = Server(workdir / "pki", opts.items, opts.hz, opts.load_cpu)
    server.start()
    result: dict[str, object] = {"items": opts.items, "hz": opts.hz}
    try:
        # memory: a gateway with one item first
        small = Gateway(workdir, config_text(server.port, 1, opts.hz), opts.gateway_cpu,
                        "outpost-1.toml")
        small.wait_points(3, 60)
        rss_one = rss_kib(small.proc.pid)
        small.stop()

        gateway = Gateway(workdir, config_text(server.port, opts.items, opts.hz),
                          opts.gateway_cpu, f"outpost-{opts.items}.toml")
        sub = gateway.sub
        gateway.wait_points(opts.items, 120)
        pids = (gateway.proc.pid, server.proc.pid if server.proc else 0)
        result |= measured_window(sub, pids, opts.warmup, opts.duration, "server_cpu_cores")
        rss_many = rss_kib(gateway.proc.pid)
        result |= {
            "gateway_rss_mib": round(rss_many / 1024, 1),
            "rss_mib_per_1000_items": round((rss_many - rss_one) / 1024
                                            / max(opts.items - 1, 1) * 1000, 2),
        }

        # re-subscribe after a server restart
        online, good = restart_times(sub, server, opts.items)
        result |= {"restart_to_online_s": online, "restart_to_all_items_good_s": good}
        gateway.stop()
    finally:
        server.kill()
    for key, value in result.items():
        print(f"{key:>28}: {value}")
    ok = isinstance(result.get("points_per_s"), int) and \
        int(str(result["points_per_s"])) >= 0.9 * opts.items * opts.hz
    print(f"{'points/s >= 90 % of offered':>28}: {'PASS' if ok else 'MISS'}")
    if opts.json:
        opts.json.write_text(json.dumps(result, indent=2))
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
