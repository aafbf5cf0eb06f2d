"""Polling one Modbus device: its poll groups, its availability, its writes.

How this works: `DevicePoller.run` loops over the device's poll groups, each with its own
interval; a group's poll executes the group's planned reads (bridge/modbus/plan.py) on the
shared bus, decodes every point (convert.py) and offers it to the point's `Reporter`.

Availability: a read that gets no usable answer (timeout, CRC error, the line is down) ends
the cycle at once, so a dead device costs one timeout per cycle, not one per read. After
`offline_after` consecutive failures the device is offline: its retained status says so, its
points are published once as null / bad, and instead of polling it the poller sends a single
probe read (no retries) every backoff period (`backoff_initial` doubling up to `backoff_max`).
The bus lock is FIFO, so healthy devices keep their turn and an offline device takes at most
one timeout per backoff period. An exception response is an answer: the device stays online
and only the points of that read turn bad; an "illegal data address" for a read that bridges a
gap is re-planned without gaps (some devices refuse holes in the register map).

Writes (`write`) encode through convert.py, use FC 5 / 6 / 16 (a bit of a register is
read-modify-write), then optionally read back and compare the registers.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from bridge.driver import Publish, StatusChange, WriteError
from bridge.modbus import convert
from bridge.modbus.bus import ModbusBus, TransactionError
from bridge.modbus.config import DeviceConfig, PointConfig
from bridge.modbus.frames import Request
from bridge.modbus.plan import Read, Span, split_gaps
from bridge.point import Value
from bridge.report import Reporter, point_reporter

log = logging.getLogger("outpost.bridge.modbus")
__all__ = ["DevicePoller", "PointRuntime", "WriteError"]


@dataclass(slots=True)
class PointRuntime:
    """A point with what polling it needs."""

    config: PointConfig
    spec: convert.ValueSpec
    span: Span
    reporter: Reporter


class DevicePoller:
    """Polls one device on its bus and publishes its points (a `bridge.driver.Device`)."""

    def __init__(self, device: DeviceConfig, bus: ModbusBus, prefix: str, publish: Publish,
                 status: StatusChange, wallclock: Callable[[], float] = time.time) -> None:
        self.device = device
        self.bus = bus
        self.publish = publish
        self.status = status
        self.wallclock = wallclock
        self.online: bool | None = None
        self.failures = 0
        self.cycles = 0
        self.counters = bus.counters_for(device.unit_id)
        self.points: dict[str, PointRuntime] = {}
        for point in device.points:
            reporter = point_reporter(f"{prefix}/{device.name}/{point.name}", point,
                                      device.report, device.heartbeat)
            self.points[point.name] = PointRuntime(point, device.value_spec(point),
                                                   device.span(point), reporter)
        self.plan: dict[str, list[Read]] = device.read_plan()

    def reporters(self) -> list[Reporter]:
        """The reporters of the device's points."""
        return [point.reporter for point in self.points.values()]

    def adopt(self, previous: object) -> None:
        """A restarted poller starts afresh: its status is published at its first answer."""

    def close(self) -> None:
        """Drop the device's counters from its bus: a restarted device counts from zero."""
        if self.bus.counters.get(self.device.unit_id) is self.counters:
            self.bus.counters.pop(self.device.unit_id)

    async def run(self) -> None:
        """Poll forever (cancel to stop)."""
        loop = asyncio.get_running_loop()
        if not self.plan:  # a device without points: nothing to poll, writes only
            await asyncio.Event().wait()
        due = dict.fromkeys(self.plan, loop.time())
        while True:
            if self.online is False:
                await self._recover(loop)
                due = dict.fromkeys(self.plan, loop.time())
                continue
            group = min(due, key=due.__getitem__)
            wait = due[group] - loop.time()
            await asyncio.sleep(max(wait, 0.0))
            await self.poll_group(group)
            due[group] = max(due[group] + self.device.interval(group), loop.time())

    async def poll_group(self, group: str) -> bool:
        """One poll of a group; False when the device did not answer."""
        reads = self.plan[group]
        index = 0
        while index < len(reads):
            read = reads[index]
            try:
                response = await self.bus.execute(
                    Request(self.device.unit_id, read.function, read.address, read.count))
            except TransactionError as exc:
                if exc.kind != "exception":
                    self._failed(exc)
                    return False
                if exc.response and exc.response.exception == 2 and read.unused:
                    log.info("%s: %s refused across a gap; reading without gaps",
                             self.device.name, exc, extra={"device": self.device.name})
                    reads[index:index + 1] = split_gaps(read)
                    continue
                self._answered()
                self._mark_bad(read.spans, str(exc))
                index += 1
                continue
            self._answered()
            self._publish_read(read, response.values)
            index += 1
        self.cycles += 1
        return True

    def _publish_read(self, read: Read, values: tuple[int, ...], force: bool = False) -> None:
        now = asyncio.get_running_loop().time()
        ts_ms = int(self.wallclock() * 1000)
        publish = self.publish
        for span in read.spans:
            point = self.points[span.key]
            start = span.address - read.address
            value, quality = convert.decode(point.spec, values[start:start + span.size])
            payload = point.reporter.offer(value, quality, now, ts_ms, force)
            if payload is not None:
                publish(point.reporter.topic, payload)

    def _mark_bad(self, spans: tuple[Span, ...] | list[Span], why: str) -> None:
        now = asyncio.get_running_loop().time()
        ts_ms = int(self.wallclock() * 1000)
        for span in spans:
            reporter = self.points[span.key].reporter
            if reporter.quality != "bad":
                payload = reporter.offer(None, "bad", now, ts_ms, force=True)
                if payload is not None:
                    self.publish(reporter.topic, payload)
        log.debug("%s: %d point(s) bad: %s", self.device.name, len(spans), why)

    def _answered(self) -> None:
        self.failures = 0
        if self.online is not True:
            self.online = True
            log.info("%s: online", self.device.name, extra={"device": self.device.name})
            self.status(self.device.name, True)

    def _failed(self, exc: TransactionError) -> None:
        self.failures += 1
        log.debug("%s: %s (%d in a row)", self.device.name, exc, self.failures)
        if self.failures >= self.device.offline_after and self.online is not False:
            self.online = False
            log.warning("%s: offline after %d failures (%s)", self.device.name,
                        self.failures, exc, extra={"device": self.device.name})
            self.status(self.device.name, False)
            self._mark_bad([p.span for p in self.points.values()], "device offline")

    async def _recover(self, loop: asyncio.AbstractEventLoop) -> None:
        """Probe an offline device with backoff until it answers."""
        backoff = self.device.backoff_initial
        first = next((reads[0] for reads in self.plan.values() if reads), None)
        while self.online is False:
            await asyncio.sleep(backoff)
            if first is None:
                self._answered()
                return
            try:
                await self.bus.execute(
                    Request(self.device.unit_id, first.function, first.address, first.count),
                    retries=0)
            except TransactionError as exc:
                if exc.kind == "exception":
                    self._answered()
                    return
                backoff = min(backoff * 2, self.device.backoff_max)
                log.debug("%s: still offline (%s); next probe in %.1f s", self.device.name,
                          exc, backoff)
                continue
            self._answered()

    async def write(self, name: str, value: object) -> tuple[Value, list[int]]:
        """Write a point; returns what was written: the value after scaling and rounding, as
        it reads back from the registers, and the registers. Raises WriteError with a message
        for `.../set/result`."""
        point = self.points.get(name)
        if point is None:
            raise WriteError(f"unknown point {name!r}")
        if not point.config.writable:
            raise WriteError(f"point {name!r} is not writable")
        if self.online is False:
            raise WriteError("device offline")
        try:
            words = convert.encode(point.spec, value)
        except convert.ConvertError as exc:
            raise WriteError(str(exc)) from None
        unit, span, spec = self.device.unit_id, point.span, point.spec
        try:
            if span.table == "coil":
                request = Request(unit, 5, span.address, 1, (words[0],))
            elif spec.type == "bit":
                current = await self.bus.execute(Request(unit, 3, span.address, 1))
                new = convert.set_bit(current.values[0], spec.bit or 0, bool(words[0]))
                request = self._register_write(span.address, [new])
            else:
                request = self._register_write(span.address, words)
            await self.bus.execute(request)
            written = bool(words[0]) if spec.type == "bit" else convert.decode(spec, words)[0]
            registers = list(request.values)
            if not point.config.readback:
                return written, registers
            read = Read(span.table, span.address, span.size, (span,))
            response = await self.bus.execute(
                Request(unit, read.function, span.address, span.size))
        except TransactionError as exc:
            raise WriteError(str(exc)) from None
        got = convert.decode(spec, response.values)[0]
        if got != written:
            raise WriteError(f"read-back mismatch: wrote {written!r}, read {got!r}")
        self._publish_read(read, response.values, force=True)
        return written, registers

    def _register_write(self, address: int, words: list[int]) -> Request:
        if len(words) == 1 and self.device.single_register_write == "fc6":
            return Request(self.device.unit_id, 6, address, 1, (words[0],))
        return Request(self.device.unit_id, 16, address, len(words), tuple(words))
