"""One Logix controller as a bridge device: planned polls, loss and recovery, writes.

How this works: `EnipDevice` is a `SessionDevice` (bridge/sessions.py: the reconnect loop and
the outage). Each session
1. connects (bridge/enip/session.py) and learns the connection size the controller granted;
2. plans the reads of every point for that size (bridge/enip/plan.py) and is online from then
   on;
3. every `poll_interval` sends the plan's Multiple Service Packets one after the other, and
   offers every point its value (decoded by bridge/enip/values.py, checked against the
   point's type) or, for a read the controller refused (a tag that does not exist, a type
   that is not the point's), `bad` with the reason logged once. An answer that is a partial
   transfer (status 0x06: larger than one answer) is continued with Read Tag Fragmented from
   its end until the whole tag is in;
4. ends when the connection is lost: no answer within twice `timeout`, a closed socket, an
   answer that is not the answer to the request.

Writes check the point (known, writable, one element) and the value against its Logix type,
`min`/`max` and `enum` (values.encode), then send one Write Tag with the type the controller
answered the point's read with (a Logix STRING structure or a CIP STRING). The controller's
refusal is the write's error; the next poll is sent at once, so the new value is published.

Counters: `requests` counts requests sent, `timeouts` lost connections and failed connection
attempts, `exceptions` reads the controller refused and refused writes.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from bridge.driver import DeviceContext, WriteError
from bridge.enip import values, wire
from bridge.enip.config import EnipDeviceConfig, EnipPointConfig
from bridge.enip.plan import Read, Request, limit, plan_reads
from bridge.enip.session import CONNECTION_ERRORS, Session, open_session
from bridge.enip.tags import tag_path
from bridge.report import Reporter, point_reporter
from bridge.sessions import SessionDevice, reason_of

log = logging.getLogger("outpost.bridge.enip")


@dataclass(slots=True)
class PointState:
    """A point and what the current session knows about it."""

    config: EnipPointConfig
    reporter: Reporter
    read: Read
    answered: tuple[int, int | None] | None = None  # the controller's type of the tag
    error: str | None = None  # why it failed, as last logged
    mismatch: bool = False  # the controller's type of the tag is not the point's


def point_read(point: EnipPointConfig) -> Read:
    """The Read Tag of a point."""
    return Read(point.name, point.tag, tag_path(point.tag), point.elements,
                values.reply_size(point.type, point.elements))


class EnipDevice(SessionDevice[Session]):
    """One Logix controller and its points (a `bridge.driver.Device`)."""

    log = log
    expected = CONNECTION_ERRORS
    caught = CONNECTION_ERRORS

    def __init__(self, config: EnipDeviceConfig, context: DeviceContext) -> None:
        super().__init__(config.name, f"{config.host}:{config.port}", context,
                         config.reconnect_initial, config.reconnect_max)
        self.config = config
        self.session: Session | None = None
        self.plan: list[Request] = []
        self.points: dict[str, PointState] = {}
        for point in config.points:
            reporter = point_reporter(context.topic(config.name, point.name), point,
                                      config.report, config.heartbeat)
            self.points[point.name] = PointState(point, reporter, point_read(point))
        self._wake = asyncio.Event()
        self._lost_session = asyncio.Event()

    # -- sessions (the loop and the outage: bridge/sessions.py) ------------------------------

    async def connect(self) -> Session:
        """A connected session along the device's route."""
        return await open_session(self.config)

    async def disconnect(self, session: Session) -> None:
        """Close the session."""
        self.session = None
        await session.close()

    def replan(self, connection_size: int) -> None:
        """The plan for a connection size."""
        self.plan = plan_reads([s.read for s in self.points.values()], connection_size)

    async def serve(self, session: Session) -> None:
        """Poll every point each poll_interval until the connection is lost."""
        self.session = session
        self._lost_session.clear()
        self.replan(session.connection_size)
        self.connected(f"{session.product}, connection size {session.connection_size}, "
                       f"{len(self.plan)} request(s) per poll for {len(self.points)} point(s)")
        loop = asyncio.get_running_loop()
        due = loop.time()
        while not self._lost_session.is_set():
            await self.poll(session)
            due = max(due + self.config.poll_interval, loop.time())
            self._wake.clear()
            try:
                async with asyncio.timeout(due - loop.time()):
                    await self._wake.wait()  # a write asks for the next poll now
            except TimeoutError:
                pass
        raise ConnectionError("connection lost during a write")

    async def _send(self, session: Session, services: list[bytes]) -> list[wire.Reply]:
        loop = asyncio.get_running_loop()
        started = loop.time()
        replies = await session.exchange(services)
        self.counters.requests += 1
        self.counters.latency_sum += loop.time() - started
        self.counters.latency_count += 1
        return replies

    async def poll(self, session: Session) -> None:
        """Read every point once and offer the values (one pass over the plan)."""
        now_ms = int(self.context.wallclock() * 1000)
        for request in self.plan:
            replies = await self._send(session, request.services)
            for read, reply in zip(request.reads, replies, strict=True):
                data: bytes | None = reply.data
                if reply.status == 0x06:  # partial: the rest in fragments
                    data = await self._rest(session, read, reply.data)
                elif not reply.ok:
                    self.counters.exceptions += 1
                    self._point_failed(self.points[read.key], reply.reason())
                    continue
                if data is not None:
                    self._offer(self.points[read.key], data, now_ms)

    async def _rest(self, session: Session, read: Read, first: bytes) -> bytes | None:
        """The whole answer of a read larger than one answer (None: failed, logged)."""
        data = bytearray(first)
        body = len(first) - (4 if first[:2] == b"\xa0\x02" else 2)  # bytes after the type
        most = limit(session.connection_size)
        while True:
            fragment = wire.read_fragment(read.path, read.elements, body)
            reply = (await self._send(session, [fragment]))[0]
            if reply.status not in (0, 0x06) or len(reply.data) <= 2:
                self.counters.exceptions += 1
                reason = reply.reason() if not reply.ok else "an empty fragment"
                self._point_failed(self.points[read.key], reason)
                return None
            chunk = reply.data[4:] if reply.data[:2] == b"\xa0\x02" else reply.data[2:]
            data += chunk
            body += len(chunk)
            if reply.status == 0 or len(data) > read.answer + most:
                return bytes(data)

    def _offer(self, state: PointState, data: bytes, now_ms: int) -> None:
        point = state.config
        try:
            decoded = values.decode(point.type, point.elements, data)
            code, handle, _ = values.split_type(data)
        except ValueError as exc:
            self.counters.exceptions += 1
            state.mismatch = isinstance(exc, values.TypeMismatchError)
            self._point_failed(state, str(exc))
            return
        state.answered, state.mismatch = (code, handle), False
        if state.error is not None:
            log.info("%s: point %s (%s) answers again", self.name, point.name, point.tag,
                     extra={"device": self.name})
            state.error = None
        value: object = decoded if point.elements > 1 else decoded[0]
        if point.enum is not None and isinstance(value, int):
            value = point.enum.get(value, value)
        payload = state.reporter.offer(value, "good",  # type: ignore[arg-type]
                                       asyncio.get_running_loop().time(), now_ms)
        if payload is not None:
            self.context.publish(state.reporter.topic, payload)

    def _point_failed(self, state: PointState, why: str) -> None:
        if state.error != why:
            state.error = why
            log.warning("%s: point %s (%s): %s", self.name, state.config.name,
                        state.config.tag, why, extra={"device": self.name})
        self.publish_bad(state.reporter)

    # -- writes -----------------------------------------------------------------------------

    async def write(self, name: str, value: object) -> tuple[object, list[int] | None]:
        """Write a point; returns the value written (as it will read back)."""
        state = self.points.get(name)
        if state is None:
            raise WriteError(f"unknown point {name!r}")
        point = state.config
        if not point.writable:
            raise WriteError(f"point {name!r} is not writable")
        try:
            kind, count, data, written = values.encode(point.type, value, state.answered,
                                                       point.min, point.max, point.enum)
        except ValueError as exc:
            raise WriteError(str(exc)) from None
        session = self.session
        if session is None or self.online is not True:
            raise WriteError("device offline")
        if state.mismatch:  # the controller said what the tag is: not what a write would send
            raise WriteError(f"point {name!r} is not available: {state.error}")
        try:
            reply = (await self._send(session, [wire.write_tag(state.read.path, kind, count,
                                                               data)]))[0]
        except CONNECTION_ERRORS as exc:
            self._lost_session.set()
            self._wake.set()
            raise WriteError(f"write failed: {reason_of(exc)}") from None
        if not reply.ok:
            self.counters.exceptions += 1
            raise WriteError(f"the controller refused the write: {reply.reason()}")
        self._wake.set()
        return written, None
