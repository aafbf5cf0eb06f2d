"""One OPC UA server as a bridge device: session, subscription or polling, loss and recovery.

How this works: `OpcUaDevice.run` loops over sessions. Each session
1. connects (bridge/opcua/connect.py: security, identity, trust) and resolves every point's
   node (NodeId, or browse path from the Objects folder) and reads their DataTypes in one
   request; a point whose node does not exist or whose DataType does not fit its declared
   `type` is published once as null / bad with the reason logged, the others go on;
2. creates one subscription (publishing_interval) with a monitored item per point (sampling
   interval, queue size, an absolute deadband filter where set), or with `mode = "poll"`
   reads every point each `poll_interval`;
3. is online from then on: every data change is offered to the point's `Reporter`
   (bridge/report.py) with the server's SourceTimestamp as `ts` and the StatusCode mapped to
   the quality (bridge/opcua/values.py);
4. ends when the connection is lost: asyncua's watchdog probes the server every `keepalive`
   seconds, so a server restart (socket closed), a network drop (probe times out) and a
   session the server timed out (probe answered BadSessionIdInvalid) all end up here, as does
   a subscription the server reports as timed out.
When a session ends, or a connection attempt fails, the device goes `offline` at once and
every point is published once as null / bad: nothing stays "good" while it is stale. The
next session starts after a backoff (`reconnect_initial` doubling up to `reconnect_max`) and
creates a new subscription, whose first notifications publish fresh values. A server whose
certificate is not trusted is retried on the same backoff. The loop and the outage are
bridge/sessions.py's, shared with S7 and EtherNet/IP.

The journal gets one line per change, not one per attempt: a WARNING when the server goes
away (with the reason), an INFO when a session is back (with how long it was away), an ERROR
when a server is refused (untrusted certificate, no such endpoint) and again only when the
reason changes; every failed attempt in between is a DEBUG line. asyncua's own lines about the
same outage are kept out (bridge/opcua/connect.py).

Writes check the point (writable, known, resolved) and the value against the node's DataType
and the point's min/max/enum (values.encode), then write the Value attribute without
timestamps (many servers refuse client timestamps); a Bad result (BadUserAccessDenied,
BadNotWritable, BadTypeMismatch, ...) is the write's error. The new value arrives through the
subscription like any other change.

Counters: `requests` counts data changes and poll reads, `timeouts` lost connections and
failed connection attempts, `exceptions` Bad write results and points that could not be set
up.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

from asyncua import Client, Node, ua
from asyncua.common.subscription import DataChangeEvent, StatusChangeEvent, Subscription

from bridge.driver import DeviceContext, WriteError
from bridge.opcua import values
from bridge.opcua.config import OpcUaDeviceConfig, OpcUaPointConfig
from bridge.opcua.connect import SecurityError, close_quietly, open_client
from bridge.opcua.nodes import resolve
from bridge.opcua.pki import Pki, UntrustedServerError
from bridge.report import Reporter, point_reporter
from bridge.sessions import SessionDevice

log = logging.getLogger("outpost.bridge.opcua")
# What a lost or refused connection raises (asyncua wraps most in UaError / OSError; a
# connection torn down halfway may raise nearly anything from inside asyncua, which the
# session loop treats as a lost connection too, with the traceback at debug level).
CONNECTION_ERRORS = (OSError, TimeoutError, ConnectionError, ua.UaError, SecurityError,
                     UntrustedServerError, asyncio.IncompleteReadError)
_QUEUE = 100_000  # buffered data changes between asyncua and the reporters


@dataclass(slots=True)
class PointState:
    """A point with what the current session knows about its node."""

    config: OpcUaPointConfig
    reporter: Reporter
    node: Node | None = None
    variant: ua.VariantType | None = None
    error: str | None = None  # why the point is not served in this session


@dataclass(slots=True)
class SessionState:
    """The live parts of one session."""

    client: Client
    lost: asyncio.Event = field(default_factory=asyncio.Event)
    reason: str = "connection lost"


class OpcUaDevice(SessionDevice[SessionState]):
    """One OPC UA server and its points (a `bridge.driver.Device`)."""

    log = log
    expected = CONNECTION_ERRORS

    def __init__(self, config: OpcUaDeviceConfig, context: DeviceContext,
                 pki: Pki | None) -> None:
        super().__init__(config.name, config.endpoint, context, config.reconnect_initial,
                         config.reconnect_max)
        self.config = config
        self.pki = pki
        self.wallclock = context.wallclock
        self.session: SessionState | None = None
        self.points: dict[str, PointState] = {}
        for point in config.points:
            reporter = point_reporter(context.topic(config.name, point.name), point,
                                      config.report, config.heartbeat)
            self.points[point.name] = PointState(point, reporter)
        self._by_handle: dict[int, PointState] = {}

    # -- sessions (the loop and the outage: bridge/sessions.py) ------------------------------

    async def connect(self) -> SessionState:
        """A session with the device's security and identity."""
        return SessionState(await open_client(self.config, self.pki))

    async def disconnect(self, session: SessionState) -> None:
        """Close the session."""
        self.session = None
        await close_quietly(session.client)

    def failure(self, exc: BaseException) -> tuple[str, bool]:
        """The reason; an untrusted server or an unusable security setting is a refusal."""
        return _reason(exc), isinstance(exc, UntrustedServerError | SecurityError)

    async def serve(self, session: SessionState) -> None:
        """Set up the points on a fresh session and keep them flowing until it is lost."""
        self.session = session
        client = session.client

        async def lost(exc: Exception) -> None:
            session.reason = _reason(exc)
            session.lost.set()

        client.connection_lost_callback = lost
        await self._resolve(client)
        if self.config.mode == "poll":
            feeder = asyncio.create_task(self._poll(session))
        else:
            subscription = await self._subscribe(client)
            feeder = asyncio.create_task(self._consume(session, subscription))
        served = len([p for p in self.points.values() if p.error is None])
        self.connected(f"{served} of {len(self.points)} point(s) served")
        try:
            waiter = asyncio.create_task(session.lost.wait())
            done, _ = await asyncio.wait({feeder, waiter}, return_when=asyncio.FIRST_COMPLETED)
            if feeder in done:
                feeder.result()  # a failed poll or a dead subscription: raise its reason
        finally:
            for task in (feeder, waiter):
                task.cancel()
            await asyncio.gather(feeder, waiter, return_exceptions=True)
        raise ConnectionError(session.reason)

    async def _resolve(self, client: Client) -> None:
        """Find every point's node and DataType; a point that fails is bad on its own."""
        states = list(self.points.values())
        for state, found in zip(states, await resolve(client, [s.config for s in states]),
                                strict=True):
            state.node, state.variant, state.error = found.node, found.variant, found.error
            if state.error is not None:
                self._point_failed(state, state.error)

    async def _subscribe(self, client: Client) -> Subscription:
        """One subscription with a monitored item per served point."""
        config = self.config
        params = ua.CreateSubscriptionParameters()
        params.RequestedPublishingInterval = config.publishing_interval * 1000
        params.RequestedLifetimeCount = 10000
        params.RequestedMaxKeepAliveCount = client.get_keepalive_count(
            config.publishing_interval * 1000)
        params.MaxNotificationsPerPublish = 10000
        params.PublishingEnabled = True
        subscription = await client.create_subscription(params, None, queue_maxsize=_QUEUE)
        requests, served = [], []
        self._by_handle = {}
        for handle, state in enumerate(self.points.values(), start=1):
            if state.node is None or state.error is not None:
                continue
            requests.append(self._item_request(handle, state))
            served.append(state)
            self._by_handle[handle] = state
        results = await subscription.create_monitored_items(requests) if requests else []
        for state, result in zip(served, results, strict=True):
            if isinstance(result, ua.StatusCode):
                state.error = f"cannot monitor the node ({result.name})"
                self._point_failed(state, state.error)
        return subscription

    def _item_request(self, handle: int, state: PointState) -> ua.MonitoredItemCreateRequest:
        point, config = state.config, self.config
        item = ua.ReadValueId()
        item.NodeId = state.node.nodeid if state.node is not None else ua.NodeId()
        item.AttributeId = ua.AttributeIds.Value
        parameters = ua.MonitoringParameters()
        parameters.ClientHandle = handle
        sampling = point.sampling_interval
        parameters.SamplingInterval = (config.sampling_interval if sampling is None
                                       else sampling) * 1000
        parameters.QueueSize = point.queue_size or config.queue_size
        parameters.DiscardOldest = True
        if point.filter_deadband is not None:
            change = ua.DataChangeFilter()
            change.Trigger = ua.DataChangeTrigger.StatusValue
            change.DeadbandType = ua.DeadbandType.Absolute
            change.DeadbandValue = point.filter_deadband
            parameters.Filter = change
        request = ua.MonitoredItemCreateRequest()
        request.ItemToMonitor = item
        request.MonitoringMode = ua.MonitoringMode.Reporting
        request.RequestedParameters = parameters
        return request

    async def _consume(self, session: SessionState, subscription: Subscription) -> None:
        """Offer every data change to its point's reporter until the session ends."""
        async for event in subscription:
            if isinstance(event, DataChangeEvent):
                state = self._by_handle.get(event.data.monitored_item.ClientHandle)
                if state is not None:
                    self.counters.requests += 1
                    self._offer(state, event.data.monitored_item.Value)
            elif isinstance(event, StatusChangeEvent):
                status = event.notification.Status
                if not status.is_good():  # e.g. BadTimeout: the server dropped it
                    session.reason = f"subscription ended ({status.name})"
                    session.lost.set()
                    return

    async def _poll(self, session: SessionState) -> None:
        """Read every served point each poll_interval until the session ends."""
        loop = asyncio.get_running_loop()
        served = [s for s in self.points.values() if s.node is not None and s.error is None]
        nodes = [s.node for s in served if s.node is not None]
        due = loop.time()
        while not session.lost.is_set():
            started = loop.time()
            answers = await session.client.read_attributes(nodes) if nodes else []
            self.counters.requests += 1
            self.counters.latency_sum += loop.time() - started
            self.counters.latency_count += 1
            for state, answer in zip(served, answers, strict=True):
                self._offer(state, answer)
            due = max(due + self.config.poll_interval, loop.time())
            await asyncio.sleep(due - loop.time())

    # -- points and status ------------------------------------------------------------------

    def _offer(self, state: PointState, data: ua.DataValue) -> None:
        value, quality = values.point_value(state.config, data)
        now_ms = int(self.wallclock() * 1000)
        payload = state.reporter.offer(value, quality, asyncio.get_running_loop().time(),
                                       values.timestamp_ms(data, now_ms))
        if payload is not None:
            self.context.publish(state.reporter.topic, payload)

    def _point_failed(self, state: PointState, why: str) -> None:
        self.counters.exceptions += 1
        log.warning("%s: point %s (%s): %s", self.name, state.config.name, state.config.node,
                    why, extra={"device": self.name})
        self.publish_bad(state.reporter)

    # -- writes -----------------------------------------------------------------------------

    async def write(self, name: str, value: object) -> tuple[object, list[int] | None]:
        """Write a point's node; returns the value written (as the node's type has it)."""
        state = self.points.get(name)
        if state is None:
            raise WriteError(f"unknown point {name!r}")
        if not state.config.writable:
            raise WriteError(f"point {name!r} is not writable")
        session = self.session
        if session is None or self.online is not True:
            raise WriteError("device offline")
        if state.node is None or state.variant is None or state.error is not None:
            raise WriteError(f"point {name!r} is not available: {state.error}")
        variant = values.encode(state.config, state.variant, value)
        try:
            await state.node.write_attribute(ua.AttributeIds.Value, ua.DataValue(variant))
        except ua.UaStatusCodeError as exc:
            self.counters.exceptions += 1
            raise WriteError(f"the server refused the write: {ua.StatusCode(exc.code).name}"
                             ) from None
        except CONNECTION_ERRORS as exc:
            raise WriteError(f"write failed: {_reason(exc)}") from None
        written = values.to_json(variant.Value)
        if state.config.enum is not None and isinstance(written, int):
            written = state.config.enum.get(written, written)
        return written, None


def _reason(exc: BaseException) -> str:
    """A short reason for a failure, with the exception's type when it says nothing."""
    text = str(exc)
    if isinstance(exc, ua.UaStatusCodeError):
        return ua.StatusCode(exc.code).name
    return text or type(exc).__name__
