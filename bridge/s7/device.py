"""One S7 PLC as a bridge device: planned polls, loss and recovery, writes.

How this works: `S7Device.run` loops over sessions (bridge/s7/session.py). Each session
1. connects with the device's TSAPs and learns the PDU size the PLC agreed to;
2. plans the reads of every point for that PDU (bridge/s7/plan.py) and is online from then on;
3. every `poll_interval` sends the plan's requests one after the other (bridge/s7/wire.py),
   takes each item's bytes or return code, and offers every point its value (decoded by
   bridge/s7/values.py) or, for an item the PLC refused (a DB that does not exist, an address
   past a DB's end, access denied), `bad` with the reason logged once. An item refused as out
   of range that carried several points is planned again with those points apart, so only
   the points that are really past the end stay bad;
4. ends when the connection is lost: a read that gets no answer within `timeout`, a closed
   socket, an answer that is not the answer to the request.
When a session ends, or a connection attempt fails, the device goes `offline` at once and
every point is published once as null / bad; it connects again after a backoff and reads
every point afresh (bridge/sessions.py, shared with OPC UA and EtherNet/IP).

Writes check the point (known, writable) and the value against its S7 type, `min`/`max` and
`enum` (values.encode), then write it with one "write var" request (a BOOL as a single bit,
so its neighbours are untouched; a string longer than one PDU in several); the PLC's refusal
is the write's error. The next poll is sent at once, so the new value is published.

Counters: `requests` counts read requests, `timeouts` lost connections and failed connection
attempts, `exceptions` items the PLC refused and refused writes.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from bridge.driver import DeviceContext, WriteError
from bridge.report import Reporter, point_reporter
from bridge.s7 import values, wire
from bridge.s7.config import S7DeviceConfig, S7PointConfig
from bridge.s7.plan import Item, Request, Span, item_limit, plan_reads
from bridge.s7.session import CONNECTION_ERRORS, Session, open_session
from bridge.sessions import SessionDevice, reason_of

log = logging.getLogger("outpost.bridge.s7")
LOST = (*CONNECTION_ERRORS, wire.ProtocolError)


@dataclass(slots=True)
class PointState:
    """A point and what the current session knows about it."""

    config: S7PointConfig
    reporter: Reporter
    span: Span
    error: str | None = None  # why it failed, as last logged


def point_span(point: S7PointConfig) -> Span:
    """The bytes a point takes (a timer or counter n: bytes 2 n and 2 n + 1)."""
    where = point.where
    start = where.start * 2 if where.area in ("T", "C") else where.start
    return Span(point.name, where.area, where.db, start, point.size)


class S7Device(SessionDevice[Session]):
    """One S7 PLC and its points (a `bridge.driver.Device`)."""

    log = log
    expected = LOST
    caught = LOST

    def __init__(self, config: S7DeviceConfig, context: DeviceContext) -> None:
        super().__init__(config.name, f"{config.host}:{config.port}", context,
                         config.reconnect_initial, config.reconnect_max)
        self.config = config
        self.zone = config.zone
        self.session: Session | None = None
        self.plan: list[Request] = []
        self.alone: frozenset[str] = frozenset()  # points read on their own (see step 3)
        self.points: dict[str, PointState] = {}
        for point in config.points:
            reporter = point_reporter(context.topic(config.name, point.name), point,
                                      config.report, config.heartbeat)
            self.points[point.name] = PointState(point, reporter, point_span(point))
        self._wake = asyncio.Event()
        self._lost_session = asyncio.Event()

    # -- sessions (the loop and the outage: bridge/sessions.py) ------------------------------

    async def connect(self) -> Session:
        """A connected session with the device's TSAPs."""
        return await open_session(self.config)

    async def disconnect(self, session: Session) -> None:
        """Close the session."""
        self.session = None
        await session.close()

    def replan(self, pdu: int) -> None:
        """The plan for a PDU size (the session's, or the configured one before a session)."""
        self.plan = plan_reads([s.span for s in self.points.values()], pdu,
                               self.config.max_gap, self.alone)

    async def serve(self, session: Session) -> None:
        """Poll every point each poll_interval until the connection is lost."""
        self.session = session
        self._lost_session.clear()
        self.replan(session.pdu)
        self.connected(f"PDU {session.pdu} bytes, {len(self.plan)} request(s) per poll for "
                       f"{len(self.points)} point(s)")
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

    async def poll(self, session: Session) -> None:
        """Read every point once and offer the values (one pass over the plan)."""
        loop = asyncio.get_running_loop()
        chunks: dict[str, dict[int, bytes]] = {}  # point -> {offset in point: bytes}
        failed: dict[str, str] = {}
        split: set[str] = set()
        for request in self.plan:
            sequence = session.sequence()
            started = loop.time()
            try:
                answer = await session.exchange(wire.encode_read(request, sequence))
                results: list[bytes | wire.ItemError] | str = wire.parse_read(
                    answer, request, sequence)
            except wire.RefusedError as exc:
                results = str(exc)
            self.counters.requests += 1
            self.counters.latency_sum += loop.time() - started
            self.counters.latency_count += 1
            for index, item in enumerate(request.items):
                result = results if isinstance(results, str) else results[index]
                if isinstance(result, bytes):
                    for span in item.spans:
                        low, high = max(span.start, item.start), min(span.end, item.end)
                        chunks.setdefault(span.key, {})[low - span.start] = \
                            result[low - item.start:high - item.start]
                    continue
                self.counters.exceptions += 1
                reason = result if isinstance(result, str) else result.reason(item)
                if isinstance(result, wire.ItemError) and result.code == 0x05 \
                        and len(item.spans) > 1:
                    split.update(span.key for span in item.spans)
                    reason = f"{reason} (read again point by point)"
                for span in item.spans:
                    failed[span.key] = reason
        now = loop.time()
        now_ms = int(self.context.wallclock() * 1000)
        for name, state in self.points.items():
            if name in failed:
                self._point_failed(state, failed[name])
                continue
            pieces = chunks.get(name, {})
            data = b"".join(pieces[offset] for offset in sorted(pieces))
            if len(data) != state.span.size:
                continue  # (not in the plan: cannot happen)
            if state.error is not None:
                log.info("%s: point %s (%s) answers again", self.name, name,
                         state.config.address, extra={"device": self.name})
                state.error = None
            where = state.config.where
            value, quality = values.decode(state.config.kind, data, where.bit, self.zone)
            value, quality = values.labelled(value, quality, state.config.enum)
            payload = state.reporter.offer(value, quality, now, now_ms)
            if payload is not None:
                self.context.publish(state.reporter.topic, payload)
        if split - self.alone:
            self.alone = self.alone | split
            self.replan(session.pdu)

    # -- points and status ------------------------------------------------------------------

    def _point_failed(self, state: PointState, why: str) -> None:
        if state.error != why:
            state.error = why
            log.warning("%s: point %s (%s): %s", self.name, state.config.name,
                        state.config.address, why, extra={"device": self.name})
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
        data, written = values.encode(point.kind, point.length or 254, value, self.zone,
                                      point.min, point.max, point.enum)
        session = self.session
        if session is None or self.online is not True:
            raise WriteError("device offline")
        where = point.where
        bit = where.bit if point.kind == "BOOL" else None
        piece = item_limit(session.pdu) - 10  # a write request carries its data in the PDU
        try:
            for at in range(0, len(data), piece):
                sequence = session.sequence()
                answer = await session.exchange(wire.encode_write(
                    where.area, where.db, where.start + at, bit, data[at:at + piece], sequence))
                refused = wire.parse_write(answer, sequence)
                if refused is not None:
                    self.counters.exceptions += 1
                    item = Item(where.area, where.db, state.span.start + at,
                                min(piece, len(data) - at), (state.span,))
                    raise WriteError(f"the PLC refused the write: {refused.reason(item)}")
        except wire.RefusedError as exc:
            self.counters.exceptions += 1
            raise WriteError(str(exc)) from None
        except LOST as exc:
            self._lost_session.set()
            self._wake.set()
            raise WriteError(f"write failed: {reason_of(exc)}") from None
        self._wake.set()
        return written, None

