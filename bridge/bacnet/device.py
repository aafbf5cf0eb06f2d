"""One BACnet/IP device as a bridge device: reads, COV subscriptions, polling, loss, writes.

How this works: `BacnetDevice.run` loops over sessions. Each session
1. opens a UDP endpoint (bridge/bacnet/endpoint.py) and reads the device object's
   max-APDU-length-accepted: the device is reached (its answer, even a refusal, says so) and
   the size every ReadPropertyMultiple is planned for (bridge/bacnet/plan.py) is known;
2. reads every point once (present-value, status-flags and, for analog objects, units) with
   the planned ReadPropertyMultiple requests; a point whose object or property the device
   does not have is published once as null / bad with the reason (the BACnet error class and
   code) logged, the others go on; the device is online from then on;
3. subscribes to changes of value (SubscribeCOV, unconfirmed notifications, `cov_lifetime`
   seconds, a subscriber process id of its own per session) for the points in COV mode; a
   point the device refuses to subscribe (no COV support, or not for that object) is polled
   instead, with the reason logged once;
4. polls the other points every `poll_interval` with the planned requests, renews every
   subscription at half its lifetime and, when every point is subscribed, reads the device
   object every `check_interval` to notice a device that went away (notifications alone
   cannot say so); COV notifications are offered to their points as they come;
5. ends when the device stops answering: a request without an answer after `retries` more
   tries of `timeout` seconds each (a peer that answers junk is one that does not answer).
When a session ends, or the device cannot be reached, the device goes `offline` at once and
every point is published once as null / bad; the next session comes after a backoff
(`reconnect_initial` doubling up to `reconnect_max`, `reconnect_initial` again after a
session that was online) with fresh reads and fresh subscriptions. The journal gets a
WARNING when the device goes away and an INFO when it is back, DEBUG lines in between.

Writes check the point and value (bridge/bacnet/values.py) and write present-value at the
point's priority with WriteProperty; `null` relinquishes that priority. The device's refusal
(error class and code, reject or abort reason) is the write's error. A polled point is read
again at once, a subscribed one gets its notification.

Counters: `requests` counts requests and COV notifications, `timeouts` lost sessions and
failed attempts, `crc_errors` datagrams that are not BACnet, `stale_frames` answers to
nothing pending, `exceptions` refusals (of points, subscriptions and writes).
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
from dataclasses import dataclass
from typing import Any

from bridge.bacnet import values, wire
from bridge.bacnet.config import BacnetDeviceConfig, BacnetPointConfig
from bridge.bacnet.endpoint import Endpoint, RefusedError, error_text
from bridge.bacnet.names import unit_text
from bridge.bacnet.plan import Read, plan_reads
from bridge.bacnet.tags import DecodeError
from bridge.driver import Counters, DeviceContext, WriteError
from bridge.point import BAD
from bridge.report import Reporter, point_reporter

log = logging.getLogger("outpost.bridge.bacnet")
LOST = (TimeoutError, OSError, ConnectionError, DecodeError)
POLL = (wire.PRESENT_VALUE, wire.STATUS_FLAGS)
SETUP = (*POLL, wire.UNITS)
_SUBSCRIBING = 16  # SubscribeCOV requests in flight at once


@dataclass(slots=True)
class PointState:
    """A point and what the current session knows about it."""

    config: BacnetPointConfig
    reporter: Reporter
    kind: str  # analog, binary, multi-state
    ref: tuple[int, int]
    subscribed: bool = False
    error: str | None = None  # why it failed, as last logged
    unit: str | None = None  # from the device when the point names none


class BacnetDevice:
    """One BACnet device and its points (a `bridge.driver.Device`)."""

    def __init__(self, config: BacnetDeviceConfig, context: DeviceContext) -> None:
        self.config = config
        self.context = context
        self.online: bool | None = None
        self.counters = Counters()
        self.last_error: str | None = None
        self.sessions = 0
        self.offline_since: float | None = None
        host, port = config.host_port
        self.route = wire.Route(host, port, config.network,
                                bytes.fromhex(config.mac) if config.mac else b"")
        self.endpoint: Endpoint | None = None
        self.max_apdu = config.max_apdu
        self.plan: list[Read] = []
        self.process = 0  # the subscriber process id of the session
        self.points: dict[str, PointState] = {}
        self.by_ref: dict[tuple[int, int], PointState] = {}
        for point in config.points:
            reporter = point_reporter(context.topic(config.name, point.name), point,
                                      config.report, config.heartbeat)
            state = PointState(point, reporter, point.kind, point.ref, unit=point.unit)
            self.points[point.name] = state
            self.by_ref[state.ref] = state
        self._wake = asyncio.Event()
        self._cov_refusal = ""  # the COV refusals last logged

    @property
    def name(self) -> str:
        return self.config.name

    def reporters(self) -> list[Reporter]:
        """The reporters of the device's points."""
        return [state.reporter for state in self.points.values()]

    def adopt(self, previous: object) -> None:
        """A restarted device starts afresh: its status is published at its first session."""

    def close(self) -> None:
        """Release the socket (the run task has ended)."""
        if self.endpoint is not None:
            self.endpoint.close()
            self.endpoint = None

    # -- sessions ---------------------------------------------------------------------------

    async def run(self) -> None:
        """Open sessions one after the other until cancelled."""
        backoff = self.config.reconnect_initial
        while True:
            endpoint = Endpoint(self.config.timeout, self.config.retries, self._notified,
                                self.counters)
            sessions = self.sessions
            try:
                await endpoint.open(*self.config.local)
                self.endpoint = endpoint
                await self._serve(endpoint)
                reason = "session ended"  # (not reached: a session ends by a loss)
            except LOST as exc:
                reason = _reason(exc)
            finally:
                endpoint.close()
                self.endpoint = None
            self._lost(reason)
            was_online = self.sessions > sessions
            backoff = self.config.reconnect_initial if was_online else backoff
            await asyncio.sleep(backoff)
            if not was_online:
                backoff = min(backoff * 2, self.config.reconnect_max)

    async def connect(self, endpoint: Endpoint) -> None:
        """Reach the device and learn its APDU size; plan the reads for it."""
        try:
            answer = await endpoint.request(self.route, wire.READ_PROPERTY, wire.read_property(
                wire.DEVICE, self.config.device_id, wire.MAX_APDU))
            size = wire.parse_read_property(answer)
            if isinstance(size, int) and size >= 50:
                self.max_apdu = min(self.config.max_apdu, size)
        except RefusedError as exc:  # it answered: reached, with the configured size
            log.debug("%s: max-apdu-length-accepted: %s", self.name, exc)
        self.replan(self.max_apdu)

    def replan(self, max_apdu: int) -> None:
        """The polls' plan: every point not subscribed."""
        self.max_apdu = max_apdu
        self.plan = plan_reads([(s.ref[0], s.ref[1], POLL) for s in self.points.values()
                                if not s.subscribed], max_apdu)

    async def _serve(self, endpoint: Endpoint) -> None:
        """A session: reach, read, subscribe, poll until the device is lost (raises)."""
        await self.connect(endpoint)
        self.process = random.getrandbits(22) | 1
        for state in self.points.values():
            state.subscribed = False
        setup = plan_reads([(s.ref[0], s.ref[1], SETUP if s.kind == "analog" else POLL)
                            for s in self.points.values()], self.max_apdu)
        await self.read(endpoint, setup)
        self.sessions += 1
        self.last_error = None
        self._set_online(True)
        await self._subscribe(endpoint)
        self.replan(self.max_apdu)
        subscribed = sum(s.subscribed for s in self.points.values())
        if self.offline_since is None:
            log.info("%s: device %d at %s (max APDU %d, %d point(s) subscribed, %d polled "
                     "with %d request(s))", self.name, self.config.device_id, self.route,
                     self.max_apdu, subscribed, len(self.points) - subscribed, len(self.plan),
                     extra={"device": self.name})
        else:
            log.info("%s: device %d at %s back after %.1f s (session %d)", self.name,
                     self.config.device_id, self.route,
                     asyncio.get_running_loop().time() - self.offline_since, self.sessions,
                     extra={"device": self.name})
            self.offline_since = None
        loop = asyncio.get_running_loop()
        renew = loop.time() + self.config.cov_lifetime / 2
        due = loop.time() + self.config.poll_interval
        while True:
            self._wake.clear()
            try:
                async with asyncio.timeout(max(0.0, due - loop.time())):
                    await self._wake.wait()  # a write asks for a poll now
            except TimeoutError:
                pass
            if loop.time() >= renew:
                await self._subscribe(endpoint)
                renew = loop.time() + self.config.cov_lifetime / 2
            if self.plan:
                await self.read(endpoint, self.plan)
                due = max(due + self.config.poll_interval, loop.time())
            else:  # every point subscribed: is the device still there?
                await self.connect(endpoint)
                due = loop.time() + self.config.check_interval

    async def read(self, endpoint: Endpoint, plan: list[Read]) -> None:
        """Read the plan's objects once and offer their values."""
        loop = asyncio.get_running_loop()
        for request in plan:
            started = loop.time()
            try:
                answer = await endpoint.request(
                    self.route, wire.READ_PROPERTY_MULTIPLE,
                    wire.read_property_multiple(list(request.objects)), self.max_apdu)
                results = wire.parse_read_property_multiple(answer)
            except RefusedError as exc:
                self.counters.exceptions += 1
                too_large = "buffer-overflow" in str(exc) or "segmentation" in str(exc)
                if too_large and self.max_apdu > 50:
                    self.replan(max(50, self.max_apdu // 2))
                    log.info("%s: answers too large: reads planned for %d bytes", self.name,
                             self.max_apdu, extra={"device": self.name})
                    return
                for kind, instance, _ in request.objects:
                    self._point_failed(self.by_ref[kind, instance], f"read refused: {exc}")
                continue
            self.counters.requests += 1
            self.counters.latency_sum += loop.time() - started
            self.counters.latency_count += 1
            for kind, instance, props in results:
                state = self.by_ref.get((kind, instance))
                if state is not None:
                    self._offer(state, props)

    async def _subscribe(self, endpoint: Endpoint) -> None:
        """SubscribeCOV for the points in COV mode (again: a renewal); refusals are polled."""
        wanted = [s for s in self.points.values() if s.error is None and (
            s.config.cov if s.config.cov is not None else self.config.mode == "cov")]
        refused: dict[str, list[str]] = {}
        unsupported = False

        async def one(state: PointState) -> None:
            nonlocal unsupported
            if unsupported:
                return
            try:
                await endpoint.request(self.route, wire.SUBSCRIBE_COV, wire.subscribe_cov(
                    self.process, *state.ref, self.config.cov_lifetime))
            except RefusedError as exc:
                self.counters.exceptions += 1
                state.subscribed = False
                refused.setdefault(str(exc), []).append(state.config.name)
                # class services (or an unknown service): no COV at all, ask no more
                unsupported = unsupported or exc.error_class == 5 \
                    or "unrecognized-service" in str(exc)
                return
            state.subscribed = True

        for at in range(0, len(wanted), _SUBSCRIBING):
            await asyncio.gather(*(one(s) for s in wanted[at:at + _SUBSCRIBING]))
        if unsupported:
            for state in wanted:
                state.subscribed = False
        text = "; ".join(f"{reason} ({len(names)} point(s): {', '.join(names[:5])}"
                         f"{', ...' if len(names) > 5 else ''})"
                         for reason, names in sorted(refused.items()))
        if text and text != self._cov_refusal:
            log.info("%s: polled instead of subscribed: %s", self.name,
                     "the device does not support COV: " + text if unsupported else text,
                     extra={"device": self.name})
        self._cov_refusal = text
        self.replan(self.max_apdu)

    def _notified(self, packet: wire.Packet, source: tuple[str, int]) -> None:
        """A COV notification (or another unconfirmed request) from the endpoint."""
        if packet.service not in (wire.UNCONFIRMED_COV_NOTIFICATION,
                                  wire.CONFIRMED_COV_NOTIFICATION):
            return
        if source != (self.route.host, self.route.port) or packet.network != self.route.network:
            return
        try:
            process, kind, instance, _, props = wire.parse_cov(packet)
        except DecodeError:
            self.counters.crc_errors += 1
            return
        state = self.by_ref.get((kind, instance))
        if process != self.process or state is None or self.online is not True:
            self.counters.stale_frames += 1
            return
        self.counters.requests += 1
        self._offer(state, props)

    # -- points and status ------------------------------------------------------------------

    def _offer(self, state: PointState, props: dict[int, Any]) -> None:
        present = props.get(wire.PRESENT_VALUE)
        if isinstance(present, wire.PropertyError):
            self._point_failed(state, error_text(present.error_class, present.error_code))
            return
        units = props.get(wire.UNITS)
        if state.config.unit is None and isinstance(units, int):
            unit = unit_text(units)
            if unit != state.unit:
                state.unit = state.reporter.unit = unit  # published with the values
                state.reporter.unit_json = json.dumps(unit)
        if state.error is not None:
            log.info("%s: point %s (%s) answers again", self.name, state.config.name,
                     state.config.object, extra={"device": self.name})
            state.error = None
        value, quality = values.point_value(state.config, state.kind, present,
                                            props.get(wire.STATUS_FLAGS))
        payload = state.reporter.offer(value, quality, asyncio.get_running_loop().time(),
                                       int(self.context.wallclock() * 1000))
        if payload is not None:
            self.context.publish(state.reporter.topic, payload)

    def _point_failed(self, state: PointState, why: str) -> None:
        if state.error != why:
            state.error = why
            self.counters.exceptions += 1
            log.warning("%s: point %s (%s): %s", self.name, state.config.name,
                        state.config.object, why, extra={"device": self.name})
        self._publish_bad(state)

    def _publish_bad(self, state: PointState) -> None:
        if state.reporter.quality == BAD:
            return
        payload = state.reporter.offer(None, BAD, asyncio.get_running_loop().time(),
                                       int(self.context.wallclock() * 1000), force=True)
        if payload is not None:
            self.context.publish(state.reporter.topic, payload)

    def _lost(self, reason: str) -> None:
        """A session ended or the device could not be reached: offline, every point bad once."""
        self.counters.timeouts += 1
        self.last_error = reason
        if self.online is not False:
            log.warning("%s: device %d at %s unreachable: %s", self.name,
                        self.config.device_id, self.route, reason,
                        extra={"device": self.name})
        else:
            log.debug("%s: still unreachable: %s", self.name, reason)
        if self.offline_since is None:
            self.offline_since = asyncio.get_running_loop().time()
        self._set_online(False)
        for state in self.points.values():
            state.subscribed = False
            self._publish_bad(state)

    def _set_online(self, online: bool) -> None:
        if self.online is not online:
            self.online = online
            self.context.status(self.name, online)

    # -- writes -----------------------------------------------------------------------------

    async def write(self, name: str, value: object) -> tuple[object, list[int] | None]:
        """Write a point's present-value at its priority (null: relinquish it)."""
        state = self.points.get(name)
        if state is None:
            raise WriteError(f"unknown point {name!r}")
        point = state.config
        if not point.writable:
            raise WriteError(f"point {name!r} is not writable")
        data, written = values.encode(point, value)
        endpoint = self.endpoint
        if endpoint is None or self.online is not True:
            raise WriteError("device offline")
        priority = point.priority or self.config.write_priority
        try:
            await endpoint.request(self.route, wire.WRITE_PROPERTY, wire.write_property(
                *state.ref, wire.PRESENT_VALUE, data, priority))
        except RefusedError as exc:
            self.counters.exceptions += 1
            raise WriteError(f"the device refused the write: {exc}") from None
        except LOST as exc:
            raise WriteError(f"write failed: {_reason(exc)}") from None
        if not state.subscribed:
            self._wake.set()
        return written, None


def _reason(exc: BaseException) -> str:
    """A short reason for a failure, with the exception's type when it says nothing."""
    return str(exc) or type(exc).__name__
