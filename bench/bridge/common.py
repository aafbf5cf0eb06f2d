"""The run the polled-device benchmarks share (S7, BACnet/IP, EtherNet/IP): points/s, CPU per
1,000 points/s, the read plan, values again after a restart.

How this works: `run` pins this process to `--load-cpu` (so the device it starts, a process of
its own, runs there too) and starts the family's test device; then `outpost run` (its own
process, pinned to `--gateway-cpu`, logging at INFO into a temporary directory) with the
configuration of `config_text`: one device that reads every point every `--poll-interval`
(0.01 s by default: as fast as it goes) with every value published (`report = "poll"`).
A raw MQTT subscriber in this process counts the point messages and notes the device's
status and each point's quality (bench/bridge/opcua.py's `StatusSubscriber`).

Figures, once every point has published and after `--warmup` seconds:
- over `--duration` seconds: points published per second, the gateway's CPU (user + system
  seconds per second) and its CPU per 1,000 points/s (goals: >= 10,000 points/s, <= 0.05 cores
  per 1,000 points/s), and the device's CPU (which side limits the rate: a device near 1.0
  core is the limit, not the gateway);
- the requests per poll: the plan the gateway logged when it reached the device (the family's
  `plan_pattern`, shown with its `plan_format`), and the gateway's RSS;
- values again after a restart: the device is killed (SIGKILL) and started again; seconds from
  its start (READY, or taking connections) to the device's `online` status and to every point
  good again (the reconnect backoff is `reconnect_initial` 0.5 s doubling to `reconnect_max`
  2 s).

Exit status 1 when a goal is missed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import tempfile
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from bench.bridge.opcua import Gateway, Restartable, measured_window, restart_times
from bench.procstat import rss_kib

GOAL_POINTS_PER_S = 10_000
GOAL_CPU_PER_1000 = 0.05


@dataclass(frozen=True)
class Family:
    """What differs between the families' runs."""

    slug: str  # the temporary directory's prefix: bench-<slug>-
    device_key: str  # the figure of the device's CPU: plc_cpu_cores, device_cpu_cores
    plan_key: str  # the figure of the plan: pdu_and_plan, ...
    plan_pattern: str  # the plan in the gateway's log, as groups ...
    plan_format: str  # ... put into this (str.format)


class Device(Restartable, Protocol):
    """A test device as a process: killed and started again (start: when it is ready)."""

    @property
    def pid(self) -> int:
        """Its process id (0 while it is not running)."""


class Peer(Protocol):
    """A test suite's device process (tests/bridge/*/support.py): start, kill, its process."""

    @property
    def process(self) -> subprocess.Popen[Any] | None: ...

    def start(self) -> object: ...

    def kill(self) -> None: ...


class SuitePeer:
    """A test suite's device process as a benchmark's `Device` (its start() returns when the
    device is ready: the time of that)."""

    def __init__(self, peer: Peer) -> None:
        self.peer = peer

    @property
    def pid(self) -> int:
        return self.peer.process.pid if self.peer.process is not None else 0

    def start(self) -> float:
        self.peer.start()
        return time.monotonic()

    def kill(self) -> None:
        self.peer.kill()


def config_text(family: str, keys: Sequence[str], points: Iterable[str]) -> str:
    """`[bridge]` with one `[[bridge.<family>]]` device named plc: its `keys` (TOML lines),
    reconnecting after 0.5 s doubling to 2 s, every value of every poll published, and a point
    per inline table in `points` (without the braces)."""
    lines = ["[bridge]", "diagnostics_interval = 1.0", "", f"[[bridge.{family}]]",
             'name = "plc"', *keys, "reconnect_initial = 0.5", "reconnect_max = 2.0",
             'report = "poll"  # every value of every poll is published', "points = ["]
    lines += [f"  {{ {point} }}," for point in points]
    lines += ["]", ""]
    return "\n".join(lines)


def parser(description: str, points_help: str, hz_help: str | None) -> argparse.ArgumentParser:
    """The options every family takes (`--hz` only where the device changes its values)."""
    found = argparse.ArgumentParser(description=description)
    found.add_argument("--points", type=int, default=1000, help=points_help)
    if hz_help is not None:
        found.add_argument("--hz", type=float, default=10.0, help=hz_help)
    found.add_argument("--poll-interval", type=float, default=0.01)
    found.add_argument("--warmup", type=float, default=3.0)
    found.add_argument("--duration", type=float, default=10.0)
    found.add_argument("--gateway-cpu", default="0")
    found.add_argument("--load-cpu", default="1")
    found.add_argument("--json", type=Path)
    return found


def run(opts: argparse.Namespace, family: Family, device: Device, config: str) -> int:
    """Measure, print the figures and the goals' verdict; the exit status."""
    if opts.load_cpu != "none" and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {int(c) for c in opts.load_cpu.split(",")})
    workdir = Path(tempfile.mkdtemp(prefix=f"bench-{family.slug}-"))
    device.start()
    result: dict[str, object] = {"points": opts.points, "poll_interval_s": opts.poll_interval}
    gateway: Gateway | None = None
    try:
        gateway = Gateway(workdir, config, opts.gateway_cpu, log_level="INFO")
        gateway.wait_points(opts.points, 60)
        result |= measured_window(gateway.sub, (gateway.proc.pid, device.pid), opts.warmup,
                                  opts.duration, family.device_key)
        found = re.search(family.plan_pattern, gateway.log.read_text())
        result |= {
            family.plan_key: family.plan_format.format(*found.groups()) if found else "?",
            "gateway_rss_mib": round(rss_kib(gateway.proc.pid) / 1024, 1),
        }

        # values again after a restart of the device
        online, good = restart_times(gateway.sub, device, opts.points)
        result |= {"restart_to_online_s": online, "restart_to_all_points_good_s": good}
    finally:
        if gateway is not None:
            gateway.stop()
        device.kill()
    for key, value in result.items():
        print(f"{key:>30}: {value}")
    rate, per_1000 = result.get("points_per_s"), result.get("cpu_per_1000_points_per_s")
    ok = isinstance(rate, int) and rate >= GOAL_POINTS_PER_S and \
        isinstance(per_1000, float) and per_1000 <= GOAL_CPU_PER_1000
    print(f"{'goals (10,000 points/s, 5 %)':>30}: {'PASS' if ok else 'MISS'}")
    if opts.json:
        opts.json.write_text(json.dumps(result, indent=2))
    return 0 if ok else 1
