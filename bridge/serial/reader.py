"""Reading one serial line device: open, frame, parse, publish; reopen when it comes back.

How this works: `SerialLineDevice.run` opens the port, feeds every received chunk to the framer
(framing.py), parses each frame (parse.py) and offers the configured fields to the points'
reporters. The device is online from its first valid frame until the port goes away (read
returns EOF/EIO: a USB adapter pulled, a pty closed) or, with `silence_timeout`, until no valid
frame arrived for that long. A vanished port is reopened with backoff (`reopen_initial`
doubling up to `reopen_max`), so unplugging and replugging needs no restart.

Diagnostics reuse the Modbus counters: `requests` counts frames received, `crc_errors` frames
that did not parse (bad NMEA checksum, no regex match, wrong size) plus garbage bursts the
framer dropped, `timeouts` silence periods; `exceptions` counts failed command writes.
"""

from __future__ import annotations

import asyncio
import logging
import re
import struct
import time
from collections.abc import Callable

from bridge.driver import Counters, Publish, StatusChange, WriteError
from bridge.modbus.convert import ValueSpec
from bridge.report import Reporter, point_reporter
from bridge.serial.config import SerialDeviceConfig, SerialPointConfig
from bridge.serial.framing import make_framer
from bridge.serial.parse import (
    ParseError,
    Record,
    parse_nmea,
    parse_regex,
    parse_struct,
    point_value,
)
from bridge.transport import ChannelClosedError, SerialChannel

log = logging.getLogger("outpost.bridge.serial")


class CommandError(WriteError):
    """A command could not be sent; the message goes to `.../set/result`."""


class SerialLineDevice:
    """One serial device: frames in, points out, commands back (a `bridge.driver.Device`)."""

    def __init__(self, config: SerialDeviceConfig, prefix: str, publish: Publish,
                 status: StatusChange, wallclock: Callable[[], float] = time.time) -> None:
        self.config = config
        self.publish = publish
        self.status = status
        self.wallclock = wallclock
        # The runtime publishes offline at start; a restarted reader carries over (`adopt`).
        self.online: bool | None = False
        self.counters = Counters()
        self.channel = SerialChannel(config.device, config.baudrate, config.bytesize,
                                     config.parity, config.stopbits)
        delimiter, start, end = config.framing_bytes()
        self.framer = make_framer(config.framing, delimiter, config.length, start, end,
                                  config.max_frame)
        self._pattern = re.compile(config.pattern or "") if config.parser == "regex" else None
        self._layout = struct.Struct(config.struct or "") if config.parser == "struct" else None
        self.points: list[tuple[SerialPointConfig, ValueSpec, Reporter]] = []
        for point in config.points:
            spec = ValueSpec("float64" if point.type != "int" else "int64", scale=point.scale,
                             offset=point.offset, precision=point.precision, minimum=point.min,
                             maximum=point.max)
            self.points.append((point, spec, point_reporter(
                f"{prefix}/{config.name}/{point.name}", point, config.report, config.heartbeat)))

    async def run(self) -> None:
        """Read forever, reopening the port whenever it vanishes (cancel to stop)."""
        loop = asyncio.get_running_loop()
        backoff = self.config.reopen_initial
        while True:
            try:
                await self.channel.open()
            except OSError as exc:
                log.debug("%s: cannot open %s (%s); retry in %.1f s", self.config.name,
                          self.config.device, exc, backoff, extra={"device": self.config.name})
                self._set_online(False)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, self.config.reopen_max)
                continue
            log.info("%s: %s open", self.config.name, self.config.device,
                     extra={"device": self.config.name})
            backoff = self.config.reopen_initial
            self.framer.reset()
            poller = asyncio.create_task(self._poll()) if self.config.poll else None
            try:
                await self._read(loop)
            finally:
                if poller is not None:
                    poller.cancel()
                self.channel.close()
            log.warning("%s: %s went away (%s); reopening", self.config.name,
                        self.config.device, self.channel.lost, extra={"device": self.config.name})
            self._set_online(False)
            await asyncio.sleep(backoff)

    async def _read(self, loop: asyncio.AbstractEventLoop) -> None:
        silence = self.config.silence_timeout
        last_frame = loop.time()
        while self.channel.is_open:
            deadline = loop.time() + (silence if silence is not None else 3600.0)
            if not await self.channel.wait(deadline):
                if self.channel.lost is not None:
                    return
                if silence is not None and loop.time() - last_frame >= silence and self.online:
                    self.counters.timeouts += 1
                    log.warning("%s: silent for %.1f s", self.config.name, silence,
                                extra={"device": self.config.name})
                    self._set_online(False)
                continue
            dropped = self.framer.dropped
            frames = self.framer.feed(self.channel.take())
            if self.framer.dropped > dropped:
                self.counters.crc_errors += 1
            for frame in frames:
                if self.handle_frame(frame, loop.time()):
                    last_frame = loop.time()

    def handle_frame(self, frame: bytes, now: float) -> bool:
        """Parse one frame and publish its points; False when it does not parse."""
        self.counters.requests += 1
        try:
            record = self._parse(frame)
        except ParseError as exc:
            self.counters.crc_errors += 1
            log.debug("%s: dropped frame %r: %s", self.config.name, frame[:80], exc)
            return False
        ts_ms = int(self.wallclock() * 1000)
        matched = False
        for point, spec, reporter in self.points:
            result = point_value(record, point.field, point.type, spec)
            if result is None:
                continue
            matched = True
            payload = reporter.offer(result[0], result[1], now, ts_ms)
            if payload is not None:
                self.publish(reporter.topic, payload)
        if matched or not self.points:
            self._set_online(True)
        return True

    def _parse(self, frame: bytes) -> Record:
        if self._pattern is not None:
            return parse_regex(self._pattern, frame, self.config.encoding)
        if self._layout is not None:
            return parse_struct(self._layout, self.config.fields, frame)
        return parse_nmea(frame)

    def _set_online(self, online: bool) -> None:
        if self.online is not online:
            self.online = online
            self.status(self.config.name, online)

    async def _poll(self) -> None:
        data = (self.config.poll or "").encode("latin-1")
        while self.channel.is_open:
            try:
                self.channel.write(data)
            except ChannelClosedError:
                return
            await asyncio.sleep(self.config.poll_interval)

    def command(self, name: str, value: object) -> None:
        """Write a command template with `value` filled in."""
        template = self.config.commands.get(name)
        if template is None:
            raise CommandError(f"unknown command {name!r} (commands: "
                               f"{', '.join(sorted(self.config.commands)) or 'none'})")
        try:
            data = template.format(value=value).encode("latin-1")
        except UnicodeEncodeError:
            raise CommandError("the command has characters beyond U+00FF") from None
        try:
            self.channel.write(data)
        except ChannelClosedError as exc:
            self.counters.exceptions += 1
            raise CommandError(f"port not open: {exc}") from None

    def reporters(self) -> list[Reporter]:
        """The reporters of the device's points."""
        return [reporter for _, _, reporter in self.points]

    def adopt(self, previous: object) -> None:
        """A reader restarted by a reload keeps the state it had until the new one knows."""
        if isinstance(previous, SerialLineDevice):
            self.online = previous.online

    async def write(self, name: str, value: object) -> tuple[object, list[int] | None]:
        """A write is a command: `value` filled into its template."""
        self.command(name, value)
        return value, None

    def close(self) -> None:
        """Close the port."""
        self.channel.close()
