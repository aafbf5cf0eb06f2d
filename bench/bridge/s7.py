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

The run itself (the window, the figures, the restart, the goals) is bench/bridge/common.py's,
shared with bench.bridge.bacnet and bench.bridge.enip.

Run from the repository root: `.venv/bin/python -m bench.bridge.s7` (needs `make
node-packages`). Exit status 1 when a goal is missed.
"""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

from bench.bridge import common
from bench.bridge.opcua import wait_line
from bench.bridge.run import free_port, pinned

ROOT = Path(__file__).resolve().parents[2]
NODE_SERVER = ROOT / "tests" / "bridge" / "s7" / "node_server"
S7 = common.Family("s7", "plc_cpu_cores", "pdu_and_plan", r"PDU (\d+) bytes, (\d+) request",
                   "PDU {} bytes, {} request(s) per poll")


def config_text(port: int, points: int, poll_interval: float) -> str:
    """One S7 device with a REAL point per 4 bytes of DB3, every poll published."""
    return common.config_text(
        "s7", ['host = "127.0.0.1"', f"port = {port}", f"poll_interval = {poll_interval}"],
        (f'name = "r{i}", address = "DB3.DBD{4 * i}", type = "REAL"' for i in range(points)))


class Server:
    """The node-snap7 PLC with `points` changing REALs, killable and restartable."""

    def __init__(self, points: int, hz: float, cpu: str) -> None:
        self.port, self.points, self.hz, self.cpu = free_port(), points, hz, cpu
        self.proc: subprocess.Popen[str] | None = None

    @property
    def pid(self) -> int:
        return self.proc.pid if self.proc is not None else 0

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
    opts = common.parser("S7 bridge benchmark", "REALs read every poll",
                         "changes per second on the PLC").parse_args(argv)
    server = Server(opts.points, opts.hz, opts.load_cpu)
    return common.run(opts, S7, server, config_text(server.port, opts.points,
                                                       opts.poll_interval))


if __name__ == "__main__":
    raise SystemExit(main())
