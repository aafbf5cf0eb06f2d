"""The device bridge on the gateway's event loop: every device family's devices, one link.

How this works: `Bridge.start` attaches to the broker through one in-process `Link`
(gateway/broker/engine/links.py), publishes every device's retained status as `offline`,
subscribes to `<prefix>/+/+/set`, and starts one supervised task per device plus one
diagnostics task. Devices come from the families of the driver interface (bridge/driver.py:
Modbus, serial, OPC UA, S7), which the bridge treats alike. Devices publish point values through
the link; a device's first answer flips its status to `online`.

Status and crashes: there is no will per device (one link, many devices), so the bridge keeps
the retained status honest itself:
- at start every status is set to `offline` before the first poll, which also corrects an
  `online` left behind by a gateway that was killed (a persistent retained store restores it);
- a device task that dies of an unexpected exception is logged, its status is set to `offline`
  (the device's own idea of it becomes "unknown", so its next answer publishes `online`) and
  it is restarted after 5 s;
- `stop` (gateway shutdown) sets every status to `offline` before the link is closed.
LAN clients see a gateway crash directly: the broker they are connected to is gone.
A device configured with `enabled = false` is never opened: its retained status is `offline`
(so Sparkplug never births it and Home Assistant shows it unavailable) and `status()` lists it
with `"disabled": true` (the status page and the console say "disabled").

The composition root also finds two optional hooks here: `status()` (the "devices" section of
`outpost status` and the status page) and `reload(config)` (SIGHUP with a changed `[bridge]`,
applied on the same link). A reload restarts only what changed, so unchanged devices never
flap `offline` -> `online` upstream:
- a device whose own configuration or whose family's environment of it (a Modbus device's bus)
  changed is stopped and started again (a changed bus is closed and opened again); it
  publishes no `offline` for the restart: a Modbus or OPC UA device publishes its status at
  its first answer (or failure), a serial device keeps the state it had until the new reader
  says otherwise (`Device.adopt`);
- a removed device is stopped and its status set to `offline` (it is gone);
- a new device is started like at start: status `offline` until its first answer;
- a device set to `enabled = false` is stopped like a removed one (status `offline`), one set
  back to `enabled = true` is started like a new one; neither touches any other device;
- an unchanged device on an unchanged bus keeps running and publishes no status at all;
- `qos` / `retain` apply to the next publish, a changed `diagnostics_interval` restarts only
  the diagnostics task; a changed `prefix` (every topic moves) restarts everything.
Reloads run one after the other, each against the configuration the previous one left.

Observers (`observers`, e.g. the Sparkplug edge node) see every point value and status the
bridge publishes, right after it was published, and may write through `write`.

Aggregates (`aggregates`, bridge/aggregate/publisher.py): every point value and status also
feeds the windows of the points configured with `aggregate`; closed windows are published on
`<prefix>/<device>/<point>/agg/<window>` through the same link, and observers see them as they
see points. A point with `aggregate_send = "instead"` is not published on the link (neither LAN
clients nor the uplink see its raw values); observers and its windows still get every value.

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
from pathlib import Path
from typing import Any, Protocol

from bridge.aggregate.publisher import AggregatePublisher
from bridge.config import BridgeConfig
from bridge.driver import Device, DeviceContext, Family, WriteError
from bridge.families import ModbusFamily, registered
from bridge.modbus.bus import ModbusBus
from bridge.modbus.poller import DevicePoller
from bridge.report import OFFLINE, ONLINE, diagnostics_payload
from bridge.serial.reader import SerialLineDevice
from gateway.broker.core.message import Message
from gateway.broker.engine.broker import Broker
from gateway.broker.engine.links import Link

log = logging.getLogger("outpost.bridge")
CLIENT_ID = "outpost-bridge"
RESTART_DELAY = 5.0


def _enabled(family: Family[Any, BridgeConfig], config: BridgeConfig) -> list[Any]:
    """The family's devices the bridge runs: those not configured with `enabled = false`."""
    return [d for d in family.configs(config) if d.enabled]


class BridgeObserver(Protocol):
    """Sees what the bridge publishes (called on the event loop; must not block)."""

    def point(self, topic: str, payload: bytes) -> None:
        """A point value was published on `<prefix>/<device>/<point>` (or withheld by
        `aggregate_send = "instead"`), or a point's closed window on
        `<prefix>/<device>/<point>/agg/<window>` (bridge/aggregate/points.py)."""

    def device_status(self, device: str, online: bool) -> None:
        """A device's status was published."""


class Bridge:
    """All configured devices, attached to a broker.

    `state_dir` holds what a family keeps between runs (the OPC UA client's certificate and
    the server certificates it trusts); None: the families that need it say so at start.
    """

    def __init__(self, config: BridgeConfig, broker: Broker,
                 wallclock: Callable[[], float] = time.time,
                 state_dir: Path | None = None) -> None:
        self.broker = broker
        self.wallclock = wallclock
        self.state_dir = state_dir
        self.link: Link | None = None
        self._tasks: dict[str, asyncio.Task[None]] = {}  # device name -> its supervised task
        self._diag: asyncio.Task[None] | None = None
        self._writes: dict[asyncio.Task[None], str] = {}  # write task -> device name
        self._reloading: asyncio.Task[None] | None = None
        self._target: BridgeConfig | None = None  # the configuration the last reload asked for
        self._limbo: set[str] = set()  # devices a reload is stopping right now
        self.published = 0
        self.observers: list[BridgeObserver] = []
        self.restart_delay = RESTART_DELAY
        self.aggregates = AggregatePublisher(self._publish_aggregate, wallclock, state_dir)
        self._configure(config)

    def _configure(self, config: BridgeConfig) -> None:
        self.config = config
        self.prefix = config.prefix
        self.aggregates.configure(config)
        self.families: list[Family[Any, BridgeConfig]] = registered(self.state_dir)
        self.modbus = next(f for f in self.families if isinstance(f, ModbusFamily))
        for family in self.families:
            family.configure(config)
        self.devices: dict[str, Device] = {}
        self._family: dict[str, Family[Any, BridgeConfig]] = {}  # device name -> its family

    @property
    def device_names(self) -> list[str]:
        return list(self.devices)

    @property
    def disabled(self) -> list[str]:
        """The devices configured with `enabled = false` (never opened)."""
        return [d.name for d in self.config.device_configs() if not d.enabled]

    @property
    def buses(self) -> dict[str, ModbusBus]:
        """The Modbus buses."""
        return self.modbus.buses

    @property
    def pollers(self) -> dict[str, DevicePoller]:
        """The Modbus devices."""
        return {n: d for n, d in self.devices.items() if isinstance(d, DevicePoller)}

    @property
    def serial(self) -> dict[str, SerialLineDevice]:
        """The serial line devices."""
        return {n: d for n, d in self.devices.items() if isinstance(d, SerialLineDevice)}

    def _context(self) -> DeviceContext:
        return DeviceContext(self.prefix, self._publish_point, self._publish_status,
                             self.wallclock)

    def _open(self, family: Family[Any, BridgeConfig], settings: Any) -> Device:
        self._family[settings.name] = family
        return family.open(settings, self._context())

    async def start(self) -> None:
        """Attach to the broker and start every device."""
        loop = asyncio.get_running_loop()
        if self.link is None:
            self.link = Link(self.broker, CLIENT_ID, loop.time, self._on_message)
        self.aggregates.start()  # saved windows back before any value or status
        for family in self.families:
            for settings in _enabled(family, self.config):
                self.devices[settings.name] = self._open(family, settings)
        for name in [*self.device_names, *self.disabled]:  # a disabled device is offline too
            self._publish_status(name, False)
        self.link.subscribe(f"{self.prefix}/+/+/set", qos=1)
        for name in self.device_names:
            self._spawn(name)
        self._start_diagnostics()
        counts = ", ".join(f"{len(_enabled(family, self.config))} {family.kind}"
                           for family in self.families)
        log.info("bridge: %d device(s) (%s), %d disabled, %d Modbus bus(es)",
                 len(self.devices), counts, len(self.disabled), len(self.buses))

    async def stop(self, detach: bool = True) -> None:
        """Stop every device, publish every device offline, detach."""
        if detach and self._reloading is not None:
            self._reloading.cancel()
            await asyncio.gather(self._reloading, return_exceptions=True)
            self._reloading = None
        tasks = [*self._tasks.values(), *self._writes]
        if self._diag is not None:
            tasks.append(self._diag)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._tasks.clear()
        self._diag = None
        for device in self.devices.values():
            device.close()
        for family in self.families:
            family.close()
        if self.link is not None:
            for name in [*self.device_names, *sorted(self._limbo - set(self.device_names))]:
                self._publish_status(name, False)
            self._limbo.clear()
            self.link.unsubscribe(f"{self.prefix}/+/+/set")
            if detach:
                await self.aggregates.stop()  # saved: they go on after the restart
                self.link.close()
                self.link = None

    def reload(self, new: BridgeConfig) -> None:
        """Apply a changed `[bridge]` section (SIGHUP, through the appliance's reloader)."""
        if new == (self._target or self.config):
            return
        self._target = new
        previous = self._reloading
        self._reloading = asyncio.get_running_loop().create_task(self._apply(new, previous),
                                                                 name="bridge-reload")

    async def _apply(self, config: BridgeConfig, previous: asyncio.Task[None] | None) -> None:
        if previous is not None:
            await asyncio.gather(previous, return_exceptions=True)
        if config == self.config:
            return
        try:
            await self._apply_changes(config)
        except Exception:
            log.exception("bridge: reload failed")
            if self._target == config:
                self._target = None  # the same file again is worth another try

    def _unchanged(self, config: BridgeConfig) -> set[str]:
        """The devices a reload to `config` keeps running: same family, same configuration,
        same environment (a Modbus device's bus)."""
        old = self.config
        kept: set[str] = set()
        for family in self.families:
            before = {d.name: d for d in _enabled(family, old)}
            kept |= {d.name for d in _enabled(family, config)
                     if before.get(d.name) == d
                     and family.environment(d, config) == family.environment(d, old)}
        return kept

    async def _apply_changes(self, config: BridgeConfig) -> None:
        if config.prefix != self.config.prefix:  # every topic moves: start from scratch
            await self.stop(detach=False)
            self._configure(config)
            await self.start()
            log.info("bridge: reloaded (prefix changed: every device restarted)")
            return
        old = self.config
        self.aggregates.configure(config)
        kept = self._unchanged(config)
        new_names = {d.name for family in self.families for d in _enabled(family, config)}
        stopping = [name for name in self.device_names if name not in kept]
        stopped = {name: (self.devices.pop(name), self._family.pop(name)) for name in stopping}
        self._limbo.update(stopping)
        await self._stop_devices(stopping)
        for device, _ in stopped.values():
            device.close()
        for name in stopping:
            if name not in new_names:
                self._publish_status(name, False)

        self.config = config
        for family in self.families:
            family.configure(config)
        devices: dict[str, Device] = {}
        started: list[str] = []
        for family in self.families:
            for settings in _enabled(family, config):
                name = settings.name
                if name in kept:
                    devices[name] = self.devices[name]
                    continue
                devices[name] = self._open(family, settings)
                started.append(name)
                if name in stopped and stopped[name][1] is family:  # restarted in place
                    devices[name].adopt(stopped[name][0])
                else:  # new here: unknown until it answers
                    self._publish_status(name, False)
        self.devices = devices
        self._limbo.clear()
        for name in started:
            self._spawn(name)
        if (config.diagnostics_interval != old.diagnostics_interval
                or (self._diag is None) == self._wants_diagnostics()):
            if self._diag is not None:
                self._diag.cancel()
                await asyncio.gather(self._diag, return_exceptions=True)
                self._diag = None
            self._start_diagnostics()
        log.info("bridge: reloaded (%d device(s) unchanged, %d restarted, %d new, %d removed)",
                 len(kept), len([n for n in started if n in stopping]),
                 len([n for n in started if n not in stopping]),
                 len([n for n in stopping if n not in new_names]))

    async def _stop_devices(self, names: list[str]) -> None:
        """Cancel the tasks of these devices and their writes in flight, and wait for them."""
        tasks = [self._tasks.pop(name) for name in names if name in self._tasks]
        tasks += [task for task, device in self._writes.items() if device in names]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _wants_diagnostics(self) -> bool:
        return self.config.diagnostics_interval > 0 and bool(self.device_names)

    def _start_diagnostics(self) -> None:
        if self._wants_diagnostics():
            self._diag = asyncio.create_task(self._diagnostics(), name="bridge-diag")

    def status(self) -> dict[str, Any]:
        """The "devices" section of the gateway status (cheap: no I/O)."""
        now = asyncio.get_running_loop().time()
        devices: list[dict[str, Any]] = []
        for name, device in self.devices.items():
            counters = device.counters
            points = {rep.topic.rsplit("/", 1)[1]: last for rep in device.reporters()
                      if (last := rep.last(now)) is not None}
            ages = [p["age_s"] for p in points.values()]
            devices.append({
                "name": name, "online": device.online, "requests": counters.requests,
                "errors": counters.timeouts + counters.crc_errors + counters.exceptions,
                "counters": {"requests": counters.requests, "timeouts": counters.timeouts,
                             "crc_errors": counters.crc_errors,
                             "exceptions": counters.exceptions,
                             "stale_frames": counters.stale_frames},
                "last_value_age_s": min(ages) if ages else None,  # type: ignore[type-var]
                "points": points,
            })
        devices += [{"name": name, "online": False, "disabled": True, "requests": 0,
                     "errors": 0, "last_value_age_s": None, "points": {}}
                    for name in self.disabled]
        return {"devices": devices}

    def _spawn(self, name: str) -> None:
        self._tasks[name] = asyncio.create_task(self._supervise(name, self.devices[name].run),
                                                name=f"bridge-{name}")

    async def _supervise(self, name: str, run: Callable[[], Coroutine[Any, Any, None]]) -> None:
        while True:
            try:
                await run()
                return
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("bridge: device %s crashed; restarting in %.1f s", name,
                              self.restart_delay, extra={"device": name})
                self._publish_status(name, False)
                device = self.devices.get(name)
                if device is not None:
                    device.online = None  # its next answer (or failure) publishes its status
                await asyncio.sleep(self.restart_delay)

    def _publish_point(self, topic: str, payload: bytes) -> None:
        if self.link is not None:
            self.published += 1
            if topic not in self.aggregates.withheld:  # aggregate_send = "instead"
                self.link.publish(topic, payload, self.config.qos, self.config.retain)
            self.aggregates.point(topic, payload)
            for observer in self.observers:
                observer.point(topic, payload)

    def _publish_aggregate(self, topic: str, payload: bytes) -> None:
        """A closed window (`<prefix>/<device>/<point>/agg/<window>`), published like a point."""
        if self.link is not None:
            self.link.publish(topic, payload, self.config.qos, self.config.retain)
            for observer in self.observers:
                observer.point(topic, payload)

    def _publish_status(self, device: str, online: bool) -> None:
        if self.link is not None:
            self.link.publish(f"{self.prefix}/{device}/status", ONLINE if online else OFFLINE,
                              1, True)
            self.aggregates.device_status(device, online)
            for observer in self.observers:
                observer.device_status(device, online)

    async def _diagnostics(self) -> None:
        interval = self.config.diagnostics_interval
        while True:
            await asyncio.sleep(interval)
            ts_ms = int(self.wallclock() * 1000)
            for name, device in self.devices.items():
                c = device.counters
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
            self._refused(device, point, message.payload[:64], None, result_topic,
                          'payload is not JSON (expected {"id": ..., "value": ...})')
            return
        if not isinstance(request, dict) or "value" not in request:
            self._refused(device, point, request, None, result_topic,
                          'expected {"id": ..., "value": ...} ("id" is optional)')
            return
        ident = request.get("id")
        task = asyncio.get_running_loop().create_task(
            self._write(device, point, request["value"], ident, result_topic))
        self._writes[task] = device
        task.add_done_callback(self._write_done)

    def _write_done(self, task: asyncio.Task[None]) -> None:
        self._writes.pop(task, None)

    async def _write(self, device: str, point: str, value: object, ident: object,
                     result_topic: str) -> None:
        try:
            written, registers = await self.write(device, point, value)
        except WriteError as exc:
            self._refused(device, point, value, ident, result_topic, str(exc))
            return
        log.info("bridge: write %s/%s = %r done (wrote %r, registers %s)", device, point, value,
                 written, registers, extra={"device": device})
        self._result(result_topic, ident, None, written, registers)

    async def write(self, device: str, point: str,
                    value: object) -> tuple[object, list[int] | None]:
        """Write a point of a device: what was written (after scaling and rounding) and the
        registers it took (None for a serial command or an OPC UA node); WriteError (serial:
        its subclass CommandError) with the reason."""
        target = self.devices.get(device)
        if target is None:
            if device in self.disabled:
                raise WriteError(f"device {device!r} is disabled (enabled = false)")
            raise WriteError(f"unknown device {device!r}")
        return await target.write(point, value)

    def _refused(self, device: str, point: str, value: object, ident: object, topic: str,
                 reason: str) -> None:
        # WARNING: a refused write is a command that did not happen; operators filter on it.
        log.warning("bridge: write %s/%s = %r refused: %s", device, point, value, reason,
                    extra={"device": device})
        self._result(topic, ident, reason)

    def _result(self, topic: str, ident: object, error: str | None, value: object = None,
                registers: list[int] | None = None) -> None:
        """`{"id", "ok", "error", "value", "registers"}`: what was written, after scaling and
        rounding (`value`), and the registers (bits for coils) it took; null when refused."""
        if self.link is not None:
            payload = json.dumps({"id": ident, "ok": error is None, "error": error,
                                  "value": value if error is None else None,
                                  "registers": registers if error is None else None})
            self.link.publish(topic, payload.encode(), 1, False)
