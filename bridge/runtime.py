"""The device bridge on the gateway's event loop: buses, pollers, serial readers, one link.

How this works: `Bridge.start` attaches to the broker through one in-process `Link`
(gateway/links.py), publishes every device's retained status as `offline`, subscribes to
`<prefix>/+/+/set`, and starts one supervised task per Modbus device and per serial device plus
one diagnostics task. Devices publish point values through the link; a device's first answer
flips its status to `online`.

Status and crashes: there is no will per device (one link, many devices), so the bridge keeps
the retained status honest itself:
- at start every status is set to `offline` before the first poll, which also corrects an
  `online` left behind by a gateway that was killed (a persistent retained store restores it);
- a device task that dies of an unexpected exception is logged, its status is set to `offline`
  and it is restarted after 5 s;
- `stop` (gateway shutdown) sets every status to `offline` before the link is closed.
LAN clients see a gateway crash directly: the broker they are connected to is gone.

The composition root also finds two optional hooks here: `status()` (the "devices" section of
`outpost status` and the status page) and `reload(config)` (SIGHUP with a changed `[bridge]`:
every device task is stopped and started again from the new configuration on the same link).

Writes arrive as `<prefix>/<device>/<point>/set` with `{"id": ..., "value": ...}`; each runs
as its own task (the bus serialises it with the polls) and answers on `.../set/result` with
`{"id", "ok", "error"}` at QoS 1.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable, Coroutine
from typing import Any

from bridge.config import BridgeConfig
from bridge.modbus.bus import Counters, ModbusBus
from bridge.modbus.poller import DevicePoller, WriteError
from bridge.report import OFFLINE, ONLINE, diagnostics_payload
from bridge.serial.reader import CommandError, SerialLineDevice
from gateway.broker import Broker
from gateway.links import Link
from gateway.message import Message

log = logging.getLogger("outpost.bridge")
CLIENT_ID = "outpost-bridge"
RESTART_DELAY = 5.0


class Bridge:
    """All configured devices, attached to a broker."""

    def __init__(self, config: BridgeConfig, broker: Broker,
                 wallclock: Callable[[], float] = time.time) -> None:
        self.broker = broker
        self.wallclock = wallclock
        self.link: Link | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._writes: set[asyncio.Task[None]] = set()
        self._reloading: asyncio.Task[None] | None = None
        self.published = 0
        self.restart_delay = RESTART_DELAY
        self._configure(config)

    def _configure(self, config: BridgeConfig) -> None:
        self.config = config
        self.prefix = config.prefix
        self.buses = {bus.name: ModbusBus(bus) for bus in config.buses}
        self.pollers: dict[str, DevicePoller] = {}
        self.serial: dict[str, SerialLineDevice] = {}

    @property
    def device_names(self) -> list[str]:
        return [*self.pollers, *self.serial]

    async def start(self) -> None:
        """Attach to the broker and start polling."""
        loop = asyncio.get_running_loop()
        if self.link is None:
            self.link = Link(self.broker, CLIENT_ID, loop.time, self._on_message)
        for device in self.config.devices:
            self.pollers[device.name] = DevicePoller(
                device, self.buses[device.bus], self.prefix, self._publish_point,
                self._publish_status, self.wallclock)
        for serial_device in self.config.serial:
            self.serial[serial_device.name] = SerialLineDevice(
                serial_device, self.prefix, self._publish_point, self._publish_status,
                self.wallclock)
        for name in self.device_names:
            self._publish_status(name, False)
        self.link.subscribe(f"{self.prefix}/+/+/set", qos=1)
        for name, poller in self.pollers.items():
            self._spawn(name, poller.run)
        for name, reader in self.serial.items():
            self._spawn(name, reader.run)
        if self.config.diagnostics_interval > 0 and self.device_names:
            self._tasks.append(asyncio.create_task(self._diagnostics(), name="bridge-diag"))
        log.info("bridge: %d Modbus device(s) on %d bus(es), %d serial device(s)",
                 len(self.pollers), len(self.buses), len(self.serial))

    async def stop(self, detach: bool = True) -> None:
        """Stop polling, publish every device offline, detach."""
        tasks = [*self._tasks, *self._writes]
        if detach and self._reloading is not None:
            tasks.append(self._reloading)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._tasks.clear()
        for bus in self.buses.values():
            bus.channel.close()
        for reader in self.serial.values():
            reader.close()
        if self.link is not None:
            for name in self.device_names:
                self._publish_status(name, False)
            if detach:
                self.link.unsubscribe(f"{self.prefix}/+/+/set")
                self.link.close()
                self.link = None
            else:
                self.link.unsubscribe(f"{self.prefix}/+/+/set")

    def reload(self, config: Any) -> None:
        """Apply a changed `[bridge]` section (called by the reloader with the new Config)."""
        new: BridgeConfig = getattr(config, "bridge", config)
        if new == self.config:
            return
        self._reloading = asyncio.get_running_loop().create_task(self._restart(new))

    async def _restart(self, config: BridgeConfig) -> None:
        await self.stop(detach=False)
        self._configure(config)
        await self.start()
        log.info("bridge: reloaded")

    def status(self) -> dict[str, Any]:
        """The "devices" section of the gateway status (cheap: no I/O)."""
        now = asyncio.get_running_loop().time()
        devices: list[dict[str, Any]] = []
        for name, online, counters, reporters in [
            *((n, p.online, p.counters, [r.reporter for r in p.points.values()])
              for n, p in self.pollers.items()),
            *((n, r.online, r.counters, [rep for _, _, rep in r.points])
              for n, r in self.serial.items()),
        ]:
            points = {rep.topic.rsplit("/", 1)[1]: last for rep in reporters
                      if (last := rep.last(now)) is not None}
            ages = [p["age_s"] for p in points.values()]
            devices.append({
                "name": name, "online": online, "requests": counters.requests,
                "errors": counters.timeouts + counters.crc_errors + counters.exceptions,
                "counters": {"requests": counters.requests, "timeouts": counters.timeouts,
                             "crc_errors": counters.crc_errors,
                             "exceptions": counters.exceptions,
                             "stale_frames": counters.stale_frames},
                "last_value_age_s": min(ages) if ages else None,  # type: ignore[type-var]
                "points": points,
            })
        return {"devices": devices}

    def _spawn(self, name: str, run: Callable[[], Coroutine[Any, Any, None]]) -> None:
        self._tasks.append(asyncio.create_task(self._supervise(name, run),
                                               name=f"bridge-{name}"))

    async def _supervise(self, name: str, run: Callable[[], Coroutine[Any, Any, None]]) -> None:
        while True:
            try:
                await run()
                return
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("bridge: device %s crashed; restarting in %.1f s", name,
                              self.restart_delay)
                self._publish_status(name, False)
                poller = self.pollers.get(name)
                if poller is not None:
                    poller.online = None
                await asyncio.sleep(self.restart_delay)

    def _publish_point(self, topic: str, payload: bytes) -> None:
        if self.link is not None:
            self.published += 1
            self.link.publish(topic, payload, self.config.qos, self.config.retain)

    def _publish_status(self, device: str, online: bool) -> None:
        if self.link is not None:
            self.link.publish(f"{self.prefix}/{device}/status", ONLINE if online else OFFLINE,
                              1, True)

    async def _diagnostics(self) -> None:
        interval = self.config.diagnostics_interval
        while True:
            await asyncio.sleep(interval)
            ts_ms = int(self.wallclock() * 1000)
            counters: dict[str, Counters] = {n: p.counters for n, p in self.pollers.items()}
            counters.update((n, r.counters) for n, r in self.serial.items())
            for name, c in counters.items():
                payload = diagnostics_payload(ts_ms, c.requests, c.timeouts, c.crc_errors,
                                              c.exceptions, c.stale_frames, c.take_latency())
                if self.link is not None:
                    self.link.publish(f"{self.prefix}/{name}/diagnostics", payload, 0, False)

    # -- writes ----------------------------------------------------------------------------

    def _on_message(self, message: Message, qos: int, retain: bool) -> None:
        if retain:
            return  # a retained command is old news: never act on it
        parts = message.topic[len(self.prefix) + 1:].split("/")
        if len(parts) != 3 or parts[2] != "set":
            return
        device, point = parts[0], parts[1]
        result_topic = message.topic + "/result"
        try:
            request = json.loads(message.payload)
        except (ValueError, UnicodeDecodeError):
            self._result(result_topic, None, "payload is not JSON")
            return
        if not isinstance(request, dict) or "value" not in request:
            self._result(result_topic, None, 'expected {"id": ..., "value": ...}')
            return
        ident = request.get("id")
        task = asyncio.get_running_loop().create_task(
            self._write(device, point, request["value"], ident, result_topic))
        self._writes.add(task)
        task.add_done_callback(self._writes.discard)

    async def _write(self, device: str, point: str, value: object, ident: object,
                     result_topic: str) -> None:
        try:
            if device in self.pollers:
                await self.pollers[device].write(point, value)
            elif device in self.serial:
                self.serial[device].command(point, value)
            else:
                raise WriteError(f"unknown device {device!r}")
        except (WriteError, CommandError) as exc:
            log.info("bridge: write %s/%s = %r failed: %s", device, point, value, exc)
            self._result(result_topic, ident, str(exc))
            return
        self._result(result_topic, ident, None)

    def _result(self, topic: str, ident: object, error: str | None) -> None:
        if self.link is not None:
            payload = json.dumps({"id": ident, "ok": error is None, "error": error})
            self.link.publish(topic, payload.encode(), 1, False)
