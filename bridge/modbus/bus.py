"""One Modbus line: exactly one transaction in flight, and only matching answers accepted.

How this works: `ModbusBus.execute(request)` takes the bus lock (so devices sharing an RS-485
port, or a TCP gateway, never interleave requests), waits out the inter-request gap, discards
whatever is sitting in the receive buffer (counted as stale frames: nothing may be pending
before a request is sent), writes the frame and feeds the bytes that arrive to the pure
`frames.scan_rtu` / `frames.scan_tcp` until the frame that answers *this* request is there or
the timeout passes. Frames that do not answer it (other unit, other function, other size, other
MBAP transaction id) are skipped and counted as stale; noise and CRC failures make the attempt a
CRC error rather than a timeout.

RTU has no transaction id, so an answer to an earlier request of the same shape (same unit,
function and count) cannot be told apart by its bytes. Three rules keep it out:
1. after a failed attempt the bus stays quiet for `quiet_after_timeout` and then discards
   everything that arrived (the late answer usually lands here);
2. before every request the receive buffer is discarded;
3. while an answer is still owed (a request timed out and nothing stale was seen since), a
   matching frame is held for a settle window (`quiet_after_timeout`, at least two RTU
   silences): if a second matching frame follows, the first was the late one and is discarded.
Modbus TCP needs none of that: the MBAP transaction id names the request.

Counters are kept per unit id, so each device's diagnostics count its own faults; a stale frame
is charged to the unit that sent it when that unit is on this bus.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Literal

from bridge.driver import Counters
from bridge.modbus.config import BusConfig
from bridge.modbus.frames import (
    Request,
    Response,
    Scan,
    rtu_adu,
    rtu_silence,
    scan_rtu,
    scan_tcp,
    tcp_adu,
)
from bridge.transport import Channel, SerialChannel, TcpChannel

log = logging.getLogger("outpost.bridge.modbus")
FailureKind = Literal["timeout", "crc", "exception", "unavailable"]
_NOBODY = Request(unit=-1, function=0, address=0)  # matches nothing: everything is stale


class TransactionError(Exception):
    """A request got no usable answer (`kind`), or an exception response."""

    def __init__(self, kind: FailureKind, message: str,
                 response: Response | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.response = response


class ModbusBus:
    """A serial RTU line, a Modbus TCP connection or an RTU-over-TCP connection."""

    def __init__(self, config: BusConfig) -> None:
        self.config = config
        self.rtu = config.type != "tcp"
        self.channel: Channel = self._make_channel(config)
        self.counters: dict[int, Counters] = {}
        self._lock = asyncio.Lock()
        self._tid = 0
        self._owed = 0  # RTU: timed-out requests whose late answer has not been seen
        self._last_end = 0.0
        silence = rtu_silence(config.baudrate) if config.type == "rtu" else 0.0
        self._gap = max(config.request_delay, silence)
        self._settle = max(config.quiet_after_timeout, 2 * silence, 0.005)
        self._backoff = 0.0
        self._next_open = 0.0

    @staticmethod
    def _make_channel(config: BusConfig) -> Channel:
        if config.type == "rtu":
            rs485 = config.rs485.model_dump() if config.rs485 else None
            return SerialChannel(config.device or "", config.baudrate, config.bytesize,
                                 config.parity, config.stopbits, rs485)
        return TcpChannel(config.host or "", config.port, config.connect_timeout)

    def counters_for(self, unit: int) -> Counters:
        """The counters of one unit (created on first use)."""
        return self.counters.setdefault(unit, Counters())

    async def execute(self, request: Request, retries: int | None = None) -> Response:
        """Send `request` and return its answer; raise `TransactionError` otherwise."""
        async with self._lock:
            loop = asyncio.get_running_loop()
            try:
                return await self._transact(loop, request, retries)
            finally:
                self._last_end = loop.time()

    async def _transact(self, loop: asyncio.AbstractEventLoop, request: Request,
                        retries: int | None) -> Response:
        counters = self.counters_for(request.unit)
        await self._ensure_open(loop)
        wait = self._last_end + self._gap - loop.time()
        if wait > 0:
            await asyncio.sleep(wait)
        attempts = (self.config.retries if retries is None else retries) + 1
        kind: FailureKind = "timeout"
        for _ in range(attempts):
            self._discard()
            self._tid = self._tid % 0xFFFF + 1
            frame = rtu_adu(request) if self.rtu else tcp_adu(request, self._tid)
            started = loop.time()
            try:
                self.channel.write(frame)
            except ConnectionError as exc:
                raise self._unavailable(exc) from None
            counters.requests += 1
            try:
                scan = await self._receive(loop, request, frame, started + self.config.timeout)
            except asyncio.CancelledError:
                # The device was stopped (a reload) with its answer still owed: on RTU it may
                # arrive during the next device's transaction, so settle-check like a timeout.
                if self.rtu:
                    self._owed += 1
                raise
            if scan.response is not None:
                counters.latency_sum += loop.time() - started
                counters.latency_count += 1
                if scan.response.exception is not None:
                    counters.exceptions += 1
                    raise TransactionError("exception", scan.response.exception_name,
                                           scan.response)
                return scan.response
            if not self.channel.is_open:
                raise self._unavailable(self.channel.lost)
            if scan.corrupt or scan.noise or scan.desync or len(self.channel.buffer):
                counters.crc_errors += 1
                kind = "crc"
            else:
                counters.timeouts += 1
                kind = "timeout"
            if scan.desync:  # a TCP stream that cannot be framed: start a new connection
                self.channel.close()
                raise TransactionError("crc", f"{request.describe()}: unframeable data")
            if self.rtu:
                self._owed += 1
                await asyncio.sleep(self.config.quiet_after_timeout)
                self._discard()
        word = "CRC/framing error" if kind == "crc" else "no response"
        raise TransactionError(kind, f"{request.describe()}: {word} after {attempts} attempt(s)")

    async def _receive(self, loop: asyncio.AbstractEventLoop, request: Request, frame: bytes,
                       deadline: float) -> Scan:
        channel = self.channel
        echo = frame if self.config.local_echo else b""
        while True:
            if echo and len(channel.buffer) >= len(echo) and channel.buffer.startswith(echo):
                del channel.buffer[:len(echo)]
                echo = b""
            if echo and len(channel.buffer) < len(echo) and echo.startswith(channel.buffer):
                scan = Scan()
            else:
                scan = self._scan(bytes(channel.buffer), request)
            if scan.response is not None:
                if self._owed:
                    scan = await self._settle_check(loop, request, scan)
                self._count_stale(scan, request.unit)
                del channel.buffer[:scan.end]
                return scan
            if scan.desync or not await channel.wait(deadline):
                scan = self._scan(bytes(channel.buffer), request)
                if scan.response is None:
                    self._count_stale(scan, request.unit)
                    del channel.buffer[:scan.resolved]
                    return scan

    async def _settle_check(self, loop: asyncio.AbstractEventLoop, request: Request,
                            first: Scan) -> Scan:
        """An answer is owed: a second matching frame right behind the first wins."""
        deadline = loop.time() + self._settle
        while True:
            rest = scan_rtu(bytes(self.channel.buffer[first.end:]), request)
            if rest.response is not None:
                log.info("%s: discarded a late answer to an earlier request",
                         request.describe())
                rest.stale_units = [*first.stale_units, request.unit, *rest.stale_units]
                rest.end += first.end
                rest.noise += first.noise
                self._owed = 0
                return rest
            if not await self.channel.wait(deadline):
                self._owed = 0
                return first

    def _scan(self, data: bytes, request: Request) -> Scan:
        return scan_rtu(data, request) if self.rtu else scan_tcp(data, request, self._tid)

    def _discard(self) -> None:
        """Drop what is buffered before a request; complete frames in it are stale."""
        if not self.channel.buffer:
            return
        data = self.channel.take()
        scan = scan_rtu(data, _NOBODY) if self.rtu else scan_tcp(data, _NOBODY, -1)
        self._count_stale(scan, None)
        log.debug("%s: discarded %d byte(s) before a request (%d stale frame(s))",
                  self.config.name, len(data), scan.stale)

    def _count_stale(self, scan: Scan, unit: int | None) -> None:
        for stale_unit in scan.stale_units:
            owner = stale_unit if stale_unit in self.counters else unit
            if owner is not None:
                self.counters_for(owner).stale_frames += 1
        if scan.stale_units and self.rtu:
            self._owed = max(0, self._owed - len(scan.stale_units))

    def _unavailable(self, exc: BaseException | None) -> TransactionError:
        self.channel.close()
        return TransactionError("unavailable", f"{self.channel.name}: {exc or 'not open'}")

    async def _ensure_open(self, loop: asyncio.AbstractEventLoop) -> None:
        if self.channel.is_open:
            return
        now = loop.time()
        if now < self._next_open:
            raise TransactionError("unavailable", f"{self.channel.name}: not connected "
                                   f"(next attempt in {self._next_open - now:.1f} s)")
        try:
            await self.channel.open()
        except (OSError, TimeoutError) as exc:
            self._backoff = min(max(self._backoff * 2, 0.5), self.config.reconnect_max)
            self._next_open = loop.time() + self._backoff
            log.warning("%s: cannot open (%s); retrying in %.1f s", self.channel.name, exc,
                        self._backoff)
            raise TransactionError("unavailable", f"{self.channel.name}: {exc}") from None
        if self._backoff:
            log.info("%s: open again", self.channel.name)
        self._backoff = 0.0
        self._owed = 0

    async def close(self) -> None:
        """Close the line (waits for the transaction in flight)."""
        async with self._lock:
            self.channel.close()
