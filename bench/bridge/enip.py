"""Benchmark of the EtherNet/IP (Logix) bridge: points/s, CPU per 1,000 points/s, values again
after a restart.

How this works: cpppo's Logix simulator (`python -m cpppo.server.enip`, in its own process,
pinned to `--load-cpu`; started by the tests' `LogixSimulator`, tests/bridge/enip/support.py)
serves `--points` REAL tags `T0`, `T1`, ... (cpppo keeps them at zero: its tags change only
when written, so there is no `--hz`); `outpost run` (its own process, pinned to
`--gateway-cpu`) has one `[[bridge.enip]]` device reading them all every `--poll-interval`
(default 0.01 s: as fast as it goes) with every value published (`report = "poll"`); a raw
MQTT subscriber in this process counts the point messages.

Figures:
- points published per second over the measured window, the gateway's CPU (user + system
  seconds per second) and its CPU per 1,000 points/s (goals: >= 10,000 points/s, <= 0.05
  cores per 1,000 points/s; compare with `python -m bench.bridge.run`, Modbus, in the same
  session), and the simulator's CPU (which side limits the rate: cpppo, pure Python, takes
  about 1.5 ms per tag, docs/bridge.md);
- the Multiple Service Packets per poll (the device's plan for the connection size the
  simulator granted to the Large Forward Open, 4,000 bytes) and the gateway's RSS;
- values again after a controller restart: the simulator is killed (SIGKILL) and started again
  on the same port; measured from the moment it takes connections to the device's `online`
  status and to every point good again (the reconnect backoff is `reconnect_initial` 0.5 s
  doubling to `reconnect_max` 2 s).

The run itself (the window, the figures, the restart, the goals) is bench/bridge/common.py's.

Run from the repository root: `.venv/bin/python -m bench.bridge.enip` (cpppo is in the dev
extras). Exit status 1 when a goal is missed.
"""

from __future__ import annotations

from bench.bridge import common
from tests.bridge.enip.support import LogixSimulator

ENIP = common.Family(
    "enip", "plc_cpu_cores", "connection_and_plan",
    r"connection size (\d+), (\d+) request",
    "connection size {} bytes, {} Multiple Service Packet(s) per poll")


def config_text(port: int, points: int, poll_interval: float) -> str:
    """One Logix device with a REAL tag per point, every poll published."""
    return common.config_text(
        "enip", ['host = "127.0.0.1"', f"port = {port}", f"poll_interval = {poll_interval}"],
        (f'name = "t{i}", tag = "T{i}", type = "REAL"' for i in range(points)))


def main(argv: list[str] | None = None) -> int:
    opts = common.parser("EtherNet/IP bridge benchmark", "REAL tags read every poll",
                         None).parse_args(argv)
    simulator = LogixSimulator(tags=[f"T{i}=REAL" for i in range(opts.points)])
    return common.run(opts, ENIP, common.SuitePeer(simulator),
                      config_text(simulator.port, opts.points, opts.poll_interval))


if __name__ == "__main__":
    raise SystemExit(main())
