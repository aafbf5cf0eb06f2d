"""Benchmark of the BACnet/IP bridge: points/s, CPU per 1,000 points/s, values again after a
restart.

How this works: the BACnet test devices (tests/bridge/bacnet/node_device/device.js,
@bacnet-js/client in its own node process, pinned to `--load-cpu`; started by the tests'
`NodeDevice`, tests/bridge/bacnet/support.py) serve `--points` analog-values (AV:1000 ...) on
device 1001 that change at `--hz`; `outpost run` (its own process, pinned to
`--gateway-cpu`) has one `[[bridge.bacnet]]` device with `mode = "poll"` (no COV: every
object is read with ReadPropertyMultiple, present-value and status-flags) reading them all
every `--poll-interval` (default 0.01 s: as fast as it goes) with every value published
(`report = "poll"`); a raw MQTT subscriber in this process counts the point messages.

Figures:
- points published per second over the measured window, the gateway's CPU (user + system
  seconds per second) and its CPU per 1,000 points/s (goals: >= 10,000 points/s, <= 0.05
  cores per 1,000 points/s; compare with `python -m bench.bridge.run`, Modbus, in the same
  session), and the device's CPU (which side limits the rate);
- the ReadPropertyMultiple requests per poll (the device's plan for the APDU size the device
  accepts: 1,476 bytes hold the worst-case answer for 58 objects, so 1,000 objects are 18
  requests) and the gateway's RSS;
- values again after a device restart: the node process is killed (SIGKILL) and started
  again on the same address; measured from its READY line to the device's `online` status and
  to every point good again (the reconnect backoff is `reconnect_initial` 0.5 s doubling to
  `reconnect_max` 2 s; the device counts as gone after `retries` 1 more try of `timeout` 2 s).

The run itself (the window, the figures, the restart, the goals) is bench/bridge/common.py's.

Run from the repository root: `.venv/bin/python -m bench.bridge.bacnet` (needs `make
node-packages`). Exit status 1 when a goal is missed.
"""

from __future__ import annotations

from bench.bridge import common
from tests.bridge.bacnet.support import NodeDevice

BACNET = common.Family(
    "bacnet", "device_cpu_cores", "apdu_and_plan",
    r"max APDU (\d+), \d+ point\(s\) subscribed, \d+ polled with (\d+) request",
    "max APDU {} bytes, {} ReadPropertyMultiple request(s) per poll")
DEVICE_ID = 1001  # the test device on the IP network itself, the one with the bench objects
FIRST = 1000  # device.js's first bench analog-value


def config_text(address: str, points: int, poll_interval: float) -> str:
    """One BACnet device polling an analog-value per point, every poll published."""
    return common.config_text(
        "bacnet", [f"device_id = {DEVICE_ID}", f'address = "{address}"',
                   'mode = "poll"  # ReadPropertyMultiple for every point, no COV',
                   f"poll_interval = {poll_interval}"],
        (f'name = "av{i}", object = "AV:{FIRST + i}"' for i in range(points)))


def main(argv: list[str] | None = None) -> int:
    opts = common.parser("BACnet/IP bridge benchmark", "analog-values read every poll",
                         "changes per second on the device").parse_args(argv)
    node = NodeDevice(count=opts.points, hz=opts.hz)
    return common.run(opts, BACNET, common.SuitePeer(node),
                      config_text(node.address, opts.points, opts.poll_interval))


if __name__ == "__main__":
    raise SystemExit(main())
