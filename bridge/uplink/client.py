"""The uplink link to one remote broker: connect, drain the outbox, take inbound commands.

How this works: `RemoteLink.run` keeps a connection to the remote (aiomqtt), trying its
addresses in order and backing off with full jitter after a full round of failures. While
connected, the drain loop reads committed outbox records per rule (in the rule's order), waits
for the rate limiters, and publishes at QoS 1 with at most `inflight` unacknowledged; a record is
deleted only when its PUBACK arrived with a success code. A failure code, a timeout or a lost
connection leaves the record in the outbox: it is sent again after the reconnect (duplicates are
expected and removed downstream by the message id). Every record read from the outbox is either
deleted (acknowledged) or released (refused, failed, abandoned, or read but never sent), so the
outbox knows which records are in flight when its cap removes some. Inbound rules subscribe on
the remote and publish locally through an in-process link whose client id marks the messages as
inbound, so the outbox hook never sends them back.

Gateway status: unless the remote's `status_topic` is "", every connection carries a retained
QoS 1 will `offline` on that topic (published by the remote when the link breaks without a
DISCONNECT: the gateway crashed, was killed, lost power or network). After each successful
connect the link publishes a retained `online` there before it drains, and when a session ends
on the gateway's side (a clean shutdown, or an error that makes the link reconnect) it publishes
a retained `offline` before its DISCONNECT, which makes the remote discard the will. On MQTT 5
remotes the status (and the will) carries user properties `gateway`, `epoch` and `topic`
(`$SYS/outpost/status`), plus `received_ms` when the gateway itself publishes it, but no `seq`:
the cloud lands it and tells the gateway's outages from its devices' by it.

Gateway status subtopics: other parts of the gateway (the remote update trigger) report on
`<status_topic>/<subtopic>` through `offer_status`. Retained ones are kept (the latest per
subtopic) and published again after every connect, so the remote always holds the current
value; one-off events wait in a bounded queue while the link is down. They are sent after the
`online` status, each at QoS 1, by a task next to the drain.

Forward rules are the configured ones plus the built-in rule that forwards the uplink's own
diagnostics (`UplinkConfig.forward_rules`). `attempted` is set once the first connection attempt
ended either way, so the first diagnostics report says how that attempt went.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import ssl
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import aiomqtt
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties as PahoProperties

from bridge.uplink.batch import encode, plan
from bridge.uplink.config import (
    STATUS_LOCAL_TOPIC,
    BatchConfig,
    ForwardRule,
    RemoteConfig,
    TlsConfig,
    UplinkConfig,
)
from bridge.uplink.envelope import (
    PROP_EPOCH,
    PROP_GATEWAY,
    PROP_RECEIVED_MS,
    PROP_TOPIC,
    Outgoing,
    outgoing,
)
from bridge.uplink.pacing import Backoff, TokenBucket
from gateway.base.hostport import parse_host_port
from gateway.base.outbox import Outbox, OutboxRecord
from gateway.broker.codec.packets import Properties
from gateway.broker.codec.properties import encode_properties
from gateway.broker.engine.links import Link

log = logging.getLogger("outpost.uplink")

IDLE_POLL = 0.05  # seconds between outbox reads when nothing new was signalled
PUBACK_TIMEOUT = 30.0
OFFLINE_TIMEOUT = 3.0  # seconds to wait for the PUBACK of `offline` when a session ends
STATUS_ONLINE = b"online"
STATUS_OFFLINE = b"offline"
REFUSED_RETRY = 30.0  # seconds before a record the remote refused is offered again
STATUS_EVENTS = 64  # one-off status events kept while the link is down (the oldest go first)


class _Client(aiomqtt.Client):
    """aiomqtt's client with a windowed publish that reports the PUBACK reason code.

    aiomqtt treats every PUBACK as success and warns about many pending publishes; the drain
    keeps up to `inflight` pending on purpose, so it tracks its own futures per message id.
    """

    def __init__(self, *args: Any, v5: bool, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.v5 = v5
        self.waiting: dict[int, asyncio.Future[int]] = {}
        self.sent_at: dict[int, float] = {}
        self.early: dict[int, int] = {}  # acknowledged before publish() returned
        self.receive_maximum = 65535  # the remote's, from its CONNACK (MQTT 5)
        self.server_disconnect: str | None = None  # the reason of the remote's DISCONNECT

    def _on_connect(self, client: Any, userdata: Any, flags: Any, reason_code: Any,
                    properties: Any = None) -> None:
        limit = getattr(properties, "ReceiveMaximum", None)
        if isinstance(limit, int) and limit > 0:
            # MQTT 5 3.3.4: never more unacknowledged QoS 1 PUBLISHes than the remote's
            # Receive Maximum (HiveMQ CE grants 10 and disconnects a client that sends more).
            # The drain's window follows it, and paho queues anything beyond it (the status
            # messages): its setter refuses an open connection, but the CONNACK is exactly
            # when the limit becomes known, before anything of this connection was sent.
            self.receive_maximum = limit
            paho = self._client
            paho._max_inflight_messages = min(paho._max_inflight_messages, limit)
        super()._on_connect(client, userdata, flags, reason_code, properties)

    def _on_disconnect(self, client: Any, userdata: Any, flags: Any, reason_code: Any,
                       properties: Any = None) -> None:
        if getattr(flags, "is_disconnect_packet_from_server", False):
            said = getattr(properties, "ReasonString", None)
            self.server_disconnect = f"{reason_code} (0x{reason_code.value:02X})" + (
                f": {said}" if said else "")
        super()._on_disconnect(client, userdata, flags, reason_code, properties)

    def _on_publish(self, client: Any, userdata: Any, mid: int, reason_code: Any,
                    properties: Any) -> None:
        value = getattr(reason_code, "value", 0)
        code = value if isinstance(value, int) and value >= 0x80 else 0
        future = self.waiting.pop(mid, None)
        self.sent_at.pop(mid, None)
        if future is None:
            self.early[mid] = code
        elif not future.done():
            future.set_result(code)

    def publish_start(self, out: Outgoing) -> asyncio.Future[int]:
        """Publish; the future gets the PUBACK reason code (0 for success)."""
        props = None
        if self.v5 and (out.user_properties or out.content_type):
            props = _PackedProperties(encode_properties(
                Properties(user_properties=out.user_properties, content_type=out.content_type),
                "PUBLISH",
            ))
        info = self._client.publish(
            out.topic, out.payload, out.qos, out.retain, props  # type: ignore[arg-type]
        )
        if info.rc != 0:
            raise aiomqtt.MqttCodeError(info.rc, "could not publish")
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        early = self.early.pop(info.mid, None)
        if early is not None:
            future.set_result(early)
        else:
            self.waiting[info.mid] = future
            self.sent_at[info.mid] = time.monotonic()
        return future

    def is_connected(self) -> bool:
        """True while the connection is up (paho's view)."""
        return bool(self._client.is_connected())

    def overdue(self, timeout: float) -> bool:
        """True when the oldest unacknowledged publish has waited longer than `timeout`."""
        for sent in self.sent_at.values():  # insertion order: the first is the oldest
            return time.monotonic() - sent > timeout
        return False

    def abandon(self) -> None:
        """The session ended: every pending publish stays in the outbox for the next one."""
        for future in self.waiting.values():
            future.cancel()
        self.waiting.clear()
        self.sent_at.clear()


class _PackedProperties:
    """Stands in for paho's `Properties` in a PUBLISH: the block is encoded by our codec.

    paho only calls `pack()` on a PUBLISH's properties; building its own `Properties` object
    per message cost a quarter of the drain's CPU time.
    """

    packetType = PacketTypes.PUBLISH  # noqa: N815 (paho's attribute name)

    def __init__(self, packed: bytes) -> None:
        self.packed = packed

    def pack(self) -> bytes:
        return self.packed


@dataclass(frozen=True, slots=True)
class _Sender:
    """What every publish of one drain shares: the connection, the in-flight window, the
    rate limiters and the first failure a PUBACK callback saw."""

    client: _Client
    window: asyncio.Semaphore
    per_message: TokenBucket
    per_byte: TokenBucket
    failure: list[BaseException]


def _seq_span(seqs: list[int]) -> str:
    """`7` or `7..42 (30 rows)` for a log line."""
    if len(seqs) == 1:
        return str(seqs[0])
    return f"{min(seqs)}..{max(seqs)} ({len(seqs)} rows)"


@dataclass(slots=True)
class LinkStatus:
    """What `outpost status` and `$SYS/outpost/uplink` show about one remote."""

    remote: str
    connected: bool = False
    address: str | None = None
    sent: int = 0
    acked: int = 0
    refused: int = 0
    rate: float = 0.0  # acknowledged messages per second, smoothed


def describe(exc: BaseException) -> str:
    """The first real error inside (possibly nested) exception groups."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, aiomqtt.MqttError | OSError | TimeoutError):
        return str(exc) or type(exc).__name__
    log.error("uplink: unexpected error", exc_info=exc)
    return f"{type(exc).__name__}: {exc}"


def tls_context(tls: TlsConfig | None) -> ssl.SSLContext | None:
    """The SSL context for a `tls` table (an uplink remote's, the Sparkplug session's)."""
    if tls is None:
        return None
    context = ssl.create_default_context(
        cafile=str(tls.ca_file) if tls.ca_file else None
    )
    if tls.cert_file:
        context.load_cert_chain(str(tls.cert_file), str(tls.key_file) if tls.key_file else None)
    if tls.insecure:
        context.check_hostname = False
    return context


class RemoteLink:
    """Everything the uplink does with one remote broker."""

    def __init__(
        self,
        config: UplinkConfig,
        remote: RemoteConfig,
        outbox: Outbox,
        gateway_id: str,
        inbound_link: Link | None,
        wake: asyncio.Event,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        self.remote = remote
        self.outbox = outbox
        self.gateway_id = gateway_id
        self.inbound_link = inbound_link
        self.wake = wake
        self.clock = clock
        self.status = LinkStatus(remote.name)
        try:
            self.status_topic = remote.gateway_status_topic(gateway_id)
        except ValueError as exc:
            raise ValueError(f"uplink remote {remote.name!r}: {exc}") from None
        self._rules_of: UplinkConfig | None = None
        self._rules: list[tuple[str, ForwardRule]] = []
        self.rules()  # a bad default diagnostics topic fails here, at start
        self.attempted = asyncio.Event()  # the first connection attempt has ended
        self.backoff = Backoff(remote.backoff_initial, remote.backoff_max)
        self.inflight: set[int] = set()
        self.deferred: dict[int, float] = {}  # refused records: seq -> retry time
        self.batch_due: dict[str, float] = {}  # batched rule -> when its partial batch is due
        self.status_retained: dict[str, bytes] = {}  # subtopic -> latest payload
        self.status_queue: deque[tuple[str, bytes, bool]] = deque(maxlen=STATUS_EVENTS)
        self.status_waiting = asyncio.Event()
        self._rate_count = 0
        self._rate_since = clock()

    def rules(self) -> list[tuple[str, ForwardRule]]:
        """The forward rules of this remote as (rule name, rule), built-in ones included."""
        if self._rules_of is not self.config:  # made once per configuration (reload)
            self._rules = [
                (name, rule) for name, rule in self.config.forward_rules(self.gateway_id)
                if rule.remote == self.remote.name
            ]
            self._rules_of = self.config
        return self._rules

    def offer_status(self, subtopic: str, payload: bytes, retain: bool) -> None:
        """Publish `payload` on `<status_topic>/<subtopic>` (now, or once connected); a
        retained one is published again after every connect. Nothing when the status topic
        is disabled."""
        if self.status_topic is None:
            return
        if retain:
            self.status_retained[subtopic] = payload
        self.status_queue.append((subtopic, payload, retain))
        self.status_waiting.set()

    async def run(self) -> None:
        """Connect, serve, reconnect — until cancelled."""
        addresses = self.remote.addresses
        while True:
            for address in addresses:
                host, port = parse_host_port(address)
                try:
                    await self._session(host, port, address)
                except Exception as exc:  # also the ExceptionGroup of the session's tasks
                    self._set_connected(False, address, describe(exc))
                    self.attempted.set()
            delay = self.backoff.next_delay()
            log.info("uplink %s: reconnecting in %.1f s", self.remote.name, delay)
            await asyncio.sleep(delay)

    def _set_connected(self, connected: bool, address: str, why: str = "") -> None:
        if connected != self.status.connected:
            if connected:
                log.info("uplink %s: connected to %s; %s",
                         self.remote.name, address, self.backlog())
            else:
                log.warning("uplink %s: link to %s lost: %s; %s",
                            self.remote.name, address, why, self.backlog())
        self.status.connected = connected
        self.status.address = address if connected else None

    def backlog(self) -> str:
        """The outbox figures for a log line: backlog, oldest age, drops so far."""
        stats = self.outbox.stats()
        oldest = "none" if stats.oldest_ms is None else (
            f"{max(0.0, time.time() - stats.oldest_ms / 1000):.1f} s"
        )
        return (
            f"backlog {stats.messages} message(s), {stats.bytes} byte(s), oldest {oldest}, "
            f"dropped {stats.dropped} so far"
        )

    async def _session(self, host: str, port: int, address: str) -> None:
        remote = self.remote
        protocol = aiomqtt.ProtocolVersion.V5 if remote.protocol == 5 else (
            aiomqtt.ProtocolVersion.V311
        )
        client = _Client(
            host, port, username=remote.username, password=remote.read_password(),
            identifier=remote.client_id, protocol=protocol, keepalive=remote.keepalive,
            clean_session=None if remote.protocol == 5 else False,
            tls_context=tls_context(remote.tls), max_inflight_messages=remote.inflight,
            timeout=10.0, v5=remote.protocol == 5, will=self._will(),
        )
        try:
            async with client:
                self.backoff.reset()
                self._set_connected(True, address)
                self.attempted.set()
                try:
                    await self._announce(client, STATUS_ONLINE, PUBACK_TIMEOUT)
                    rules = [rule for rule in self.config.inbound if rule.remote == remote.name]
                    for rule in rules:
                        await client.subscribe(rule.filter, qos=rule.qos)
                    if rules:  # from here on, commands from the cloud reach the gateway
                        log.info("uplink %s: inbound subscribed: %s", remote.name,
                                 ", ".join(rule.filter for rule in rules))
                    self._requeue_status()
                    async with asyncio.TaskGroup() as group:
                        group.create_task(self._drain(client), name=f"uplink-drain-{remote.name}")
                        group.create_task(self._send_status(client),
                                          name=f"uplink-status-{remote.name}")
                        group.create_task(self._inbound(client),
                                          name=f"uplink-inbound-{remote.name}")
                finally:
                    client.abandon()
                    self.inflight.clear()
                    # Still connected: the session ends on our side (shutdown, or an error that
                    # makes us reconnect). Our DISCONNECT makes the remote discard the will, so
                    # say `offline` ourselves first; the drain has stopped, nothing follows it.
                    if client.is_connected():
                        with contextlib.suppress(Exception):
                            await self._announce(client, STATUS_OFFLINE, OFFLINE_TIMEOUT)
        except Exception as exc:
            # aiomqtt says only "Disconnected during message iteration": name the remote's
            # DISCONNECT reason, which is what an operator can act on
            if client.server_disconnect is not None:
                raise ConnectionError(f"the remote disconnected us: {client.server_disconnect}"
                                      ) from exc
            raise

    def _will(self) -> aiomqtt.Will | None:
        """`offline` (retained, QoS 1) on the status topic, for the remote to publish when the
        connection breaks without a DISCONNECT."""
        if self.status_topic is None:
            return None
        properties = None
        if self.remote.protocol == 5:
            properties = PahoProperties(PacketTypes.WILLMESSAGE)  # type: ignore[no-untyped-call]
            properties.UserProperty = list(self._status_properties(None))
        return aiomqtt.Will(self.status_topic, STATUS_OFFLINE, qos=1, retain=True,
                            properties=properties)

    def _status_properties(self, received_ms: int | None) -> tuple[tuple[str, str], ...]:
        """Who says this status (no `seq`: it is not an outbox message); `received_ms` when
        the gateway publishes it itself (the remote publishes the will: its time is unknown
        here, the cloud takes its arrival)."""
        props = ((PROP_GATEWAY, self.gateway_id), (PROP_EPOCH, self.outbox.epoch),
                 (PROP_TOPIC, STATUS_LOCAL_TOPIC))
        if received_ms is None:
            return props
        return (*props, (PROP_RECEIVED_MS, str(received_ms)))

    async def _announce(self, client: _Client, state: bytes, timeout: float) -> None:
        """Publish the retained gateway status and wait for its PUBACK."""
        if self.status_topic is None:
            return
        props = self._status_properties(int(time.time() * 1000)) if client.v5 else ()
        future = client.publish_start(Outgoing(self.status_topic, state, 1, True, props))
        code = await asyncio.wait_for(future, timeout)
        if code:
            log.warning("uplink %s: remote refused the gateway status on %s with 0x%02X",
                        self.remote.name, self.status_topic, code)

    def _requeue_status(self) -> None:
        """A new session: every retained subtopic's latest value, then the one-off events."""
        events = [item for item in self.status_queue if not item[2]]
        self.status_queue.clear()
        self.status_queue.extend((sub, payload, True)
                                 for sub, payload in self.status_retained.items())
        self.status_queue.extend(events)
        self.status_waiting.set()

    async def _send_status(self, client: _Client) -> None:
        """Send the queued status subtopics, each after the previous one's PUBACK."""
        while True:
            await self.status_waiting.wait()
            self.status_waiting.clear()
            while self.status_queue:
                subtopic, payload, retain = self.status_queue[0]
                topic = f"{self.status_topic}/{subtopic}"
                code = await asyncio.wait_for(
                    client.publish_start(Outgoing(topic, payload, 1, retain)), PUBACK_TIMEOUT)
                if self.status_queue and self.status_queue[0][:2] == (subtopic, payload):
                    self.status_queue.popleft()  # (the bounded queue may have moved on)
                if code:
                    log.warning("uplink %s: remote refused the gateway status on %s with "
                                "0x%02X", self.remote.name, topic, code)

    async def _inbound(self, client: _Client) -> None:
        link = self.inbound_link
        async for message in client.messages:
            if link is None:
                continue
            topic = str(message.topic)
            for rule in self.config.inbound:
                if rule.remote == self.remote.name and message.topic.matches(rule.filter):
                    payload = message.payload
                    data = payload if isinstance(payload, bytes) else str(payload or "").encode()
                    link.publish(rule.topic.apply(topic), data, min(rule.qos, message.qos))
                    break

    async def _drain(self, client: _Client) -> None:
        remote = self.remote
        now = self.clock()
        sender = _Sender(client, asyncio.Semaphore(min(remote.inflight, client.receive_maximum)),
                         TokenBucket(remote.rate_messages, now),
                         TokenBucket(remote.rate_bytes, now), [])
        while True:
            if sender.failure:
                raise sender.failure[0]
            if client.overdue(PUBACK_TIMEOUT):
                raise TimeoutError(f"no PUBACK within {PUBACK_TIMEOUT:.0f} s")
            sent_any = False
            skip = self._skip_set()
            for name, rule in self.rules():
                if rule.batch is not None:
                    sent_any |= await self._drain_batched(sender, name, rule, rule.batch, skip)
                    continue
                records = self.outbox.read(name, remote.batch, rule.order == "newest-first", skip)
                sent = 0
                try:
                    for record in records:
                        out = outgoing(
                            record, rule.topic.apply(record.topic), self.gateway_id,
                            self.outbox.epoch, remote.protocol, rule.envelope, rule.qos,
                        )
                        await self._send(sender, [record], out, len(record.payload), skip)
                        sent += 1
                        sent_any = True
                finally:
                    if sent < len(records):  # the session ended first: never sent
                        self.outbox.release(r.seq for r in records[sent:])
            if not sent_any:
                self.wake.clear()
                # asyncio.timeout, not wait_for: on Python 3.11 a wait_for whose event is set
                # as the task is cancelled can hold the cancellation, and the stop hangs
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(IDLE_POLL):
                        await self.wake.wait()

    async def _drain_batched(
        self, sender: _Sender, name: str, rule: ForwardRule, batch: BatchConfig, skip: set[int]
    ) -> bool:
        """One round of a batched rule: retained rows alone if `retained_alone`, the others in
        batches; a last, partial batch younger than `max_delay` waits (its rows are released,
        read again when it is due). Returns whether anything was sent."""
        due = self.batch_due.get(name)
        if due is not None and due > self.clock():
            return False
        records = self.outbox.read(name, batch.max_count, rule.order == "newest-first", skip)
        alone = [r for r in records if r.retain and batch.retained_alone]
        pending: list[list[OutboxRecord]] = [[r] for r in alone]
        pending += plan([r for r in records if not (r.retain and batch.retained_alone)],
                        batch.max_count, batch.max_bytes)
        hold = 0.0  # a batch that waited once goes when due, whatever the wall clock did
        if due is None and len(pending) > len(alone):
            hold = self._hold_time(pending[-1], batch)
        self.batch_due.pop(name, None)
        if hold > 0:
            self.outbox.release(r.seq for r in pending.pop())
            self.batch_due[name] = self.clock() + hold
        sent = 0
        try:
            for group in pending:
                if len(alone) > sent:
                    out = outgoing(group[0], rule.topic.apply(group[0].topic), self.gateway_id,
                                   self.outbox.epoch, self.remote.protocol, rule.envelope,
                                   rule.qos)
                else:
                    payload = encode(self.gateway_id, self.outbox.epoch, rule.topic.strip,
                                     rule.topic.prefix, group, batch.compression)
                    out = Outgoing(rule.topic.apply(group[0].topic), payload, rule.qos, False)
                await self._send(sender, group, out, len(out.payload), skip)
                sent += 1
        finally:
            if sent < len(pending):  # the session ended first: never sent
                self.outbox.release(r.seq for group in pending[sent:] for r in group)
        return sent > 0

    def _hold_time(self, group: list[OutboxRecord], batch: BatchConfig) -> float:
        """Seconds a partial batch may still wait for more rows (0: send it now): until its
        oldest row has waited `max_delay`, never more than `max_delay` from now."""
        if len(group) >= batch.max_count:
            return 0.0
        oldest_ms = min(r.received_ms for r in group)
        wait = oldest_ms / 1000 + batch.max_delay - time.time()
        return min(max(wait, 0.0), batch.max_delay)

    async def _send(
        self, sender: _Sender, records: list[OutboxRecord], out: Outgoing, size: int,
        skip: set[int],
    ) -> None:
        """Pace, wait for a window slot, publish `out` carrying `records`; the PUBACK settles
        them all (`_settled`). Raises when the session failed or the publish could not start."""
        await self._pace(sender.per_message, sender.per_byte, len(records), size)
        await sender.window.acquire()
        if sender.failure:
            sender.window.release()
            raise sender.failure[0]
        try:
            future = sender.client.publish_start(out)
        except Exception:
            sender.window.release()
            raise
        for record in records:
            self.inflight.add(record.seq)
            skip.add(record.seq)
        self.status.sent += len(records)
        future.add_done_callback(
            functools.partial(self._settled, records, out, sender.window, sender.failure)
        )

    def _skip_set(self) -> set[int]:
        now = self.clock()
        for seq in [s for s, until in self.deferred.items() if until <= now]:
            del self.deferred[seq]
        return self.inflight | self.deferred.keys()

    async def _pace(
        self, per_message: TokenBucket, per_byte: TokenBucket, messages: int, size: int
    ) -> None:
        while True:
            now = self.clock()
            delay = max(per_message.wait_time(messages, now), per_byte.wait_time(size, now))
            if delay <= 0:
                per_message.spend(messages, now)
                per_byte.spend(size, now)
                return
            await asyncio.sleep(delay)

    def _settled(
        self,
        records: list[OutboxRecord],
        out: Outgoing,
        window: asyncio.Semaphore,
        failure: list[BaseException],
        future: asyncio.Future[int],
    ) -> None:
        """A PUBACK arrived (or the session ended): delete, keep for retry, or fail. A batch's
        rows share its fate: all deleted, or all kept."""
        window.release()
        seqs = [record.seq for record in records]
        self.inflight.difference_update(seqs)
        if future.cancelled():
            self.outbox.release(seqs)
            return
        error = future.exception()
        if error is not None:
            self.outbox.release(seqs)
            failure.append(error)
            return
        code = future.result()
        if code:
            self.outbox.release(seqs)
            self.status.refused += len(seqs)
            retry = self.clock() + REFUSED_RETRY
            self.deferred.update((seq, retry) for seq in seqs)
            log.warning(
                "uplink %s: remote refused seq %s on %s with 0x%02X; kept for retry",
                self.remote.name, _seq_span(seqs), out.topic, code,
            )
        else:
            self.outbox.delete(seqs)
            self._acked(len(seqs))

    def _acked(self, count: int) -> None:
        self.status.acked += count
        self._rate_count += count
        now = self.clock()
        elapsed = now - self._rate_since
        if elapsed >= 1.0:
            self.status.rate = 0.7 * self.status.rate + 0.3 * (self._rate_count / elapsed)
            self._rate_count = 0
            self._rate_since = now
