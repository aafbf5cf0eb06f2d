"""`outpost bacnet discover|probe`: find devices, and check one before configuring it.

- `discover` sends one global Who-Is (every network, so routers pass it on) to a broadcast
  address, takes the I-Am answers for `wait` seconds (routed devices answer with their
  network number and MAC, several of them from one router address), then asks each device
  for its name, vendor and model, and prints one line per device with the keys that
  configure it.
- `probe` reaches a device as the bridge would (its max APDU, the ReadPropertyMultiple plan
  for it) and reads every point once: value, unit and quality, or the device's error.
  `explore` is the same for the console, as rows.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from bridge.bacnet import wire
from bridge.bacnet.config import BacnetDeviceConfig
from bridge.bacnet.device import SETUP, BacnetDevice
from bridge.bacnet.endpoint import Endpoint, RefusedError
from bridge.bacnet.plan import plan_reads
from bridge.bacnet.tags import DecodeError
from bridge.driver import Exploration
from bridge.probe import ProbeRun, point_lines


@dataclass(frozen=True, slots=True)
class Discovered:
    """A device that answered Who-Is."""

    device_id: int
    route: wire.Route
    max_apdu: int
    vendor_id: int
    name: str | None = None
    vendor: str | None = None
    model: str | None = None

    def keys(self) -> str:
        """The `[[bridge.bacnet]]` keys that reach it."""
        keys = f'device_id = {self.device_id}, address = "{self.route.host}:{self.route.port}"'
        if self.route.network is not None:
            keys += f', network = {self.route.network}, mac = "{self.route.mac.hex()}"'
        return keys


async def discover(bind: tuple[str, int], target: tuple[str, int], wait: float,
                   low: int | None = None, high: int | None = None,
                   timeout: float = 1.0) -> list[Discovered]:
    """The devices that answer a global Who-Is sent to `target` within `wait` seconds."""
    found: dict[tuple[int, wire.Route], Discovered] = {}

    def heard(packet: wire.Packet, source: tuple[str, int]) -> None:
        if packet.kind != wire.UNCONFIRMED or packet.service != wire.I_AM:
            return
        try:
            device, max_apdu, _, vendor = wire.parse_i_am(packet)
        except DecodeError:
            return
        route = wire.Route(source[0], source[1], packet.network, packet.mac)
        found.setdefault((device, route), Discovered(device, route, max_apdu, vendor))

    endpoint = await Endpoint(timeout, 1, heard).open(*bind)
    try:
        endpoint.broadcast(wire.who_is(low, high), target)
        await asyncio.sleep(wait)  # I-Am answers come when they come: discovery is a window
        named = await asyncio.gather(*(_describe(endpoint, d) for d in found.values()))
    finally:
        endpoint.close()
    return sorted(named, key=lambda d: d.device_id)


async def _describe(endpoint: Endpoint, device: Discovered) -> Discovered:
    texts: list[str | None] = []
    for prop in (wire.OBJECT_NAME, wire.VENDOR_NAME, wire.MODEL_NAME):
        try:
            answer = await endpoint.request(device.route, wire.READ_PROPERTY, wire.read_property(
                wire.DEVICE, device.device_id, prop))
            value = wire.parse_read_property(answer)
            texts.append(value if isinstance(value, str) else None)
        except (RefusedError, TimeoutError, DecodeError):
            texts.append(None)
    return Discovered(device.device_id, device.route, device.max_apdu, device.vendor_id,
                      *texts)


def format_discovered(devices: list[Discovered]) -> list[str]:
    """One line per device, then how many."""
    lines = []
    for d in devices:
        what = ", ".join(f"{label} {text!r}" for label, text in (
            ("name", d.name), ("vendor", d.vendor), ("model", d.model)) if text)
        lines.append(f"device {d.device_id} at {d.route}: max APDU {d.max_apdu}, vendor id "
                     f"{d.vendor_id}{', ' + what if what else ''}")
        lines.append(f"  {d.keys()}")
    lines.append(f"{len(devices)} device(s) answered")
    return lines


async def explore(config: BacnetDeviceConfig) -> Exploration:
    """The device reached (its max APDU), the ReadPropertyMultiple plan for it, and every point
    read once with it (`BacnetFamily.explore`, the console's probe): value, unit (the
    point's, else the device's own) and quality, or the device's error."""
    logging.getLogger("outpost.bridge.bacnet").setLevel(logging.CRITICAL)  # the rows say it
    run = ProbeRun()
    device = BacnetDevice(config, run.context)
    endpoint = await Endpoint(config.timeout, config.retries).open(*config.local)
    try:
        await device.connect(endpoint)
        plan = plan_reads([(s.ref[0], s.ref[1], SETUP) for s in device.points.values()],
                          device.max_apdu)
        lines = [f"device {config.device_id} at {device.route}: max APDU {device.max_apdu}",
                 f"plan: {len(device.plan)} ReadPropertyMultiple request(s) per poll for "
                 f"{len(config.points)} point(s)"]
        for i, read in enumerate(device.plan, start=1):
            lines.append(f"request {i}: {len(read.objects)} object(s), answer at most "
                         f"{read.answer_bytes} of {device.max_apdu} bytes")
        await device.read(endpoint, plan)
    finally:
        endpoint.close()
    return Exploration(tuple(lines), run.rows(device.points.values(),
                                              lambda point: point.object))


async def probe(config: BacnetDeviceConfig) -> tuple[list[str], int]:
    """The device reached, its plan, and every point read once; (lines, points that failed)."""
    exploration = await explore(config)
    lines, failed = point_lines(exploration.points, (("point", 24), ("object", 26)))
    return [*exploration.lines, *lines], failed
