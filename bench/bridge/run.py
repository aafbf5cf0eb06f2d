"""Benchmark of the Modbus bridge: points per second, requests per cycle, CPU per 1,000 points/s.

How this works: a pymodbus TCP simulator (`bench.bridge.simulator`, its own process) holds
`--devices` units; `outpost run` (its own process, pinned to `--gateway-cpu`) polls them as fast
as the bus allows (poll_interval 0, deadband off: every point every poll) with `--points`
points per device of mixed types; this process, pinned to `--load-cpu` together with the
simulator, subscribes to `devices/#` over a raw MQTT socket and counts what arrives.

Figures, over a measured window after a warm-up:
- points published per second: point messages received by the subscriber per second;
- requests per poll cycle: per device, the increase of `requests` between two diagnostics
  messages divided by the poll cycles completed in between (the number of times the device's
  first point arrived), next to the planner's minimum for the same configuration;
- gateway CPU: user + system seconds of the `outpost run` process per second of window, and per
  1,000 points/s.

With `--sparkplug` the same invocation measures twice, the edge node off and then on
(`[sparkplug]` publishing DDATA to the gateway's own listener, every point every poll), and
adds the bytes per point on the wire: a JSON point's whole PUBLISH packet against a DDATA
packet's size divided by its metrics (docs/sparkplug.md).

Run from the repository root: `.venv/bin/python -m bench.bridge.run` (see docs/bridge.md).
Exit status 1 when a target (points/s, requests per cycle) is missed, 0 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

from bench import wire
from bench.procstat import cpu_seconds
from bridge.sparkplug.sparkplug_b_pb2 import Payload

ROOT = Path(__file__).resolve().parents[2]
LAYOUT = (("uint16", 1, 0.4), ("int16", 1, 0.2), ("float32", 2, 0.2), ("int32", 2, 0.2))


def point_table(points: int) -> list[tuple[str, str, int]]:
    """(name, type, address) of one device's points: 40 % uint16, 20 % int16, float32, int32."""
    table: list[tuple[str, str, int]] = []
    address = 0
    for kind, size, share in LAYOUT:
        for _ in range(round(points * share)):
            table.append((f"p{len(table)}", kind, address))
            address += size
    return table[:points]


def config_text(port: int, devices: int, points: int, interval: float,
                connections: int = 1, sparkplug_port: int | None = None) -> str:
    """The outpost.toml of the run: `connections` TCP buses to the simulator, devices spread
    over them round-robin; a Sparkplug edge node publishing to `sparkplug_port` if given."""
    lines = []
    if sparkplug_port is not None:
        lines += ["[sparkplug]", "enabled = true", f'addresses = ["127.0.0.1:{sparkplug_port}"]',
                  ""]
    lines += ["[bridge]", "diagnostics_interval = 1.0", ""]
    for bus in range(connections):
        lines += ["[[bridge.buses]]", f'name = "sim{bus}"', 'type = "tcp"',
                  'host = "127.0.0.1"', f"port = {port}", "timeout = 1.0", ""]
    for unit in range(1, devices + 1):
        bus = (unit - 1) % connections
        lines += ["[[bridge.devices]]", f'name = "d{unit}"', f'bus = "sim{bus}"',
                  f"unit_id = {unit}",
                  "address_base = 0", f"poll_interval = {interval}",
                  'report = "poll"  # deadband off: every point, every poll', "points = ["]
        lines += [f'  {{ name = "{name}", type = "{kind}", address = {address} }},'
                  for name, kind, address in point_table(points)]
        lines += ["]", ""]
    return "\n".join(lines)


def pinned(cpu: str, args: list[str]) -> list[str]:
    if cpu == "none" or shutil.which("taskset") is None:
        return args
    return ["taskset", "-c", cpu, *args]


def start(args: list[str], pattern: str, log: Path) -> tuple[subprocess.Popen[str], re.Match[str]]:
    """Start a process and wait for the line that says it is ready."""
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=log.open("w"), text=True,
                            cwd=ROOT)
    assert proc.stdout is not None
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        match = re.search(pattern, line)
        if match:
            return proc, match
        if not line and proc.poll() is not None:
            break
    proc.kill()
    raise RuntimeError(f"{args[0]} did not start: {log.read_text()[-2000:]}")


class Subscriber:
    """A raw MQTT 3.1.1 subscriber that counts point messages and keeps diagnostics."""

    def __init__(self, host: str, port: int, sparkplug: bool = False) -> None:
        self.sock = socket.create_connection((host, port))
        self.sock.sendall(wire.connect("bench-bridge") + wire.subscribe(1, "devices/#", 0)
                          + (wire.subscribe(2, "spBv1.0/#", 0) if sparkplug else b""))
        self.buffer = bytearray()
        self.points = 0
        self.json_bytes = 0  # PUBLISH packets of point values
        self.sparkplug_metrics = 0  # metrics in DDATA
        self.sparkplug_bytes = 0  # DDATA PUBLISH packets
        self.cycles: dict[str, int] = {}
        # per device: (received at, requests, cycles seen so far)
        self.diagnostics: dict[str, list[tuple[float, int, int]]] = {}

    def pump(self, until: float) -> None:
        self.sock.settimeout(0.2)
        while time.monotonic() < until:
            try:
                data = self.sock.recv(1 << 20)
            except TimeoutError:
                continue
            if not data:
                raise RuntimeError("gateway closed the connection")
            self.buffer += data
            self._walk()

    def _walk(self) -> None:
        buf, pos = self.buffer, 0
        while (found := wire.split_packet(buf, pos)) is not None:
            first, body, end = found
            if first >> 4 == wire.PUBLISH:
                topic = wire.publish_topic(buf, body)
                if topic.startswith(b"spBv1.0/"):
                    if b"/DDATA/" in topic:
                        data = bytes(buf[body + 2 + len(topic):end])
                        self.sparkplug_metrics += len(Payload.FromString(data).metrics)
                        self.sparkplug_bytes += end - pos
                    pos = end
                    continue
                leaf = topic.rsplit(b"/", 1)[1]
                device = topic.split(b"/")[1].decode()
                if leaf == b"diagnostics":
                    payload = json.loads(bytes(buf[body + 2 + len(topic):end]))
                    self.diagnostics.setdefault(device, []).append(
                        (time.monotonic(), payload["requests"], self.cycles.get(device, 0)))
                elif leaf == b"p0":
                    self.cycles[device] = self.cycles.get(device, 0) + 1
                    self.points += 1
                    self.json_bytes += end - pos
                elif leaf != b"status":
                    self.points += 1
                    self.json_bytes += end - pos
            pos = end
        del buf[:pos]


def free_port() -> int:
    """A TCP port that was free on 127.0.0.1 a moment ago (the edge node must know it)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def run(opts: argparse.Namespace, sparkplug: bool = False) -> dict[str, object]:
    """One measured run; returns the figures."""
    from bridge.config import BridgeConfig

    workdir = Path(tempfile.mkdtemp(prefix="bench-bridge-"))
    units = ",".join(str(u) for u in range(1, opts.devices + 1))
    sim, match = start(pinned(opts.load_cpu, [sys.executable, "-m", "bench.bridge.simulator",
                                              "--port", "0", "--units", units, "--size", "1000"]),
                       r"listening on (\d+)", workdir / "simulator.log")
    gateway = None
    try:
        listen = free_port() if sparkplug else 0
        text = config_text(int(match.group(1)), opts.devices, opts.points, opts.interval,
                           opts.connections, listen if sparkplug else None)
        (workdir / "outpost.toml").write_text(text)
        plan_minimum = {d.name: sum(len(r) for r in d.read_plan().values()) for d in
                        BridgeConfig.model_validate(tomllib.loads(text)["bridge"]).devices}
        gateway, ready = start(
            pinned(opts.gateway_cpu, [sys.executable, "-m", "outpost", "--log-level", "WARNING",
                                      "run", "--listen", f"127.0.0.1:{listen}", "--config",
                                      str(workdir / "outpost.toml")]),
            r"listening on ([0-9.]+):(\d+)", workdir / "gateway.log")
        if opts.load_cpu != "none" and hasattr(os, "sched_setaffinity"):
            os.sched_setaffinity(0, {int(c) for c in opts.load_cpu.split(",")})
        sub = Subscriber(ready.group(1), int(ready.group(2)), sparkplug)
        sub.pump(time.monotonic() + opts.warmup)
        pids = (gateway.pid, sim.pid, os.getpid())
        points0, cpu0, t0 = sub.points, [cpu_seconds(p) for p in pids], time.monotonic()
        wire0 = (sub.json_bytes, sub.sparkplug_metrics, sub.sparkplug_bytes)
        sub.pump(t0 + opts.duration)
        points1, cpu1, t1 = sub.points, [cpu_seconds(p) for p in pids], time.monotonic()
        json_bytes, sp_metrics, sp_bytes = (b - a for a, b in zip(
            wire0, (sub.json_bytes, sub.sparkplug_metrics, sub.sparkplug_bytes), strict=True))
    finally:
        for proc in (gateway, sim):
            if proc is not None:
                proc.kill()
                proc.wait()
    elapsed = t1 - t0
    rate = (points1 - points0) / elapsed
    cpu, sim_cpu, sub_cpu = ((b - a) / elapsed for a, b in zip(cpu0, cpu1, strict=True))
    per_cycle = {}
    for device, samples in sub.diagnostics.items():
        inside = [sample for sample in samples if t0 <= sample[0] <= t1]
        if len(inside) >= 2 and inside[-1][2] > inside[0][2]:
            per_cycle[device] = (inside[-1][1] - inside[0][1]) / (inside[-1][2] - inside[0][2])
    wire_sizes: dict[str, object] = {
        "json_bytes_per_point": round(json_bytes / (points1 - points0), 1)
        if points1 > points0 else None}
    if sparkplug:
        wire_sizes.update({
            "sparkplug_metrics_per_s": round(sp_metrics / elapsed),
            "sparkplug_bytes_per_point": round(sp_bytes / sp_metrics, 1) if sp_metrics else None})
    return {
        "sparkplug": sparkplug, **wire_sizes,
        "devices": opts.devices, "points_per_device": opts.points,
        "tcp_connections": opts.connections, "window_s": round(elapsed, 2),
        "points_per_s": round(rate), "gateway_cpu_cores": round(cpu, 3),
        "cpu_per_1000_points_per_s": round(cpu / rate * 1000, 4) if rate else None,
        "simulator_cpu_cores": round(sim_cpu, 3), "subscriber_cpu_cores": round(sub_cpu, 3),
        "requests_per_cycle": {d: round(v, 3) for d, v in sorted(per_cycle.items())},
        "plan_minimum": plan_minimum,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Modbus bridge benchmark")
    parser.add_argument("--devices", type=int, default=5)
    parser.add_argument("--points", type=int, default=200)
    parser.add_argument("--interval", type=float, default=0.0, help="poll interval (0: flat out)")
    parser.add_argument("--connections", type=int, default=1,
                        help="TCP connections (buses) to the simulator, devices spread over them")
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--gateway-cpu", default="0")
    parser.add_argument("--load-cpu", default="1")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--sparkplug", action="store_true",
                        help="measure twice: Sparkplug edge node off, then on")
    opts = parser.parse_args(argv)
    result = run(opts)
    for key, value in result.items():
        print(f"{key:>28}: {value}")
    if opts.sparkplug:
        with_sparkplug = run(opts, sparkplug=True)
        print()
        for key, value in with_sparkplug.items():
            print(f"{key:>28}: {value}")
        result = {**result, "with_sparkplug": with_sparkplug}
    per_cycle, minimum, rate = (result["requests_per_cycle"], result["plan_minimum"],
                                result["points_per_s"])
    assert isinstance(per_cycle, dict) and isinstance(minimum, dict) and isinstance(rate, int)
    # every device of the plan must have been measured (no measurement is a MISS, not a PASS)
    ok = bool(minimum) and all(d in per_cycle and abs(per_cycle[d] - n) < 0.05
                               for d, n in minimum.items())
    rate_ok = rate >= 20000
    print(f"{'points/s >= 20000':>28}: {'PASS' if rate_ok else 'MISS'}")
    print(f"{'requests/cycle == plan':>28}: {'PASS' if ok else 'MISS'}")
    if opts.json:
        opts.json.write_text(json.dumps(result, indent=2))
    return 0 if ok and rate_ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
