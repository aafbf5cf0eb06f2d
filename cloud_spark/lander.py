"""The lander: subscribe to the cloud broker and write every message to bronze, losslessly.

How this works:

* One aiomqtt client (MQTT 5) with a **persistent session**: ``clean_start=False`` and a
  Session Expiry Interval, so the broker queues QoS 1 messages while the lander is down.
  Subscriptions are QoS 1, optionally ``$share/<group>/<filter>`` so that several landers
  split the load.
* **Deferred acknowledgements.** aiomqtt 2.x has no public manual-ack API (upstream issue
  empicano/aiomqtt#345, draft PR #346). The paho-mqtt client underneath does:
  ``manual_ack_set(True)`` stops paho from sending PUBACK when a message arrives, and
  ``ack(mid, qos)`` sends it later. We switch it on before connecting (so even messages the
  broker replays right after CONNACK are held) through ``client._client`` and keep that
  access in :func:`_paho` only. A message is acked only after :meth:`BronzeWriter.commit`
  returned the file holding it, i.e. after fsync + rename + directory fsync. PUBACKs go out
  in arrival order, as MQTT requires.
* The broker stops sending once ``receive_maximum`` messages are unacknowledged (MQTT 5
  Receive Maximum, sent in CONNECT), so the lander also commits when that many are pending.
  Some brokers cap what they send below that, at their own in-flight limit, and announce
  the cap only as the Receive Maximum of their CONNACK (EMQX's ``max_inflight``; outpost's
  ``max_inflight`` with ``receive_maximum``, both 64 by default). Waiting for the roll timer
  would then land one window per ``roll_seconds``, so when that many are pending and
  nothing has arrived for :data:`STALL_S`, the stream is taken as stalled on our acks and
  the file is committed. (Only then: mosquitto 2.0 announces ``max_inflight_messages``, 20,
  without capping what it sends an MQTT 5 client, and a busy stream must not be cut into
  files of 20.)
* A file is also committed when it is big or old enough (checked on every message and by a
  ticker), or when the ingest hour changes.
* Connection lost: the open file is committed (its records are duplicates-to-be, harmless)
  but its messages are *not* acked: packet ids belong to the dead connection and the broker
  redelivers them. Each connection gets a fresh aiomqtt client, so no stale message ever
  reaches the new connection. Reconnects back off exponentially.
* **Batched messages** (many outbox rows per PUBLISH, :mod:`cloud_spark.batch_format`) become
  one bronze record per row, all in the same file; the message is acked with the file. A
  batch that does not decode is written whole, with its reason, under ``<root>/quarantine/``
  (:mod:`cloud_spark.lander_quarantine`), and acked once that file and the records that
  arrived before it are committed.
* SIGTERM / SIGINT: commit the open file, ack it, disconnect cleanly (the session stays),
  exit 0. SIGKILL loses nothing either: uncommitted messages were never acked.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiomqtt
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from cloud_spark.batch_format import MAX_BODY, BatchError
from cloud_spark.bronze_writer import BronzeWriter, Committed
from cloud_spark.lander_quarantine import quarantine_message
from cloud_spark.records import bronze_records, encode_record

log = logging.getLogger("cloud_spark.lander")

#: an ack token: (connection number, MQTT packet id, QoS); None for all but the last record
#: of a batch
Token = tuple[int, int, int] | None

#: quiet time after which a full window of pending messages counts as a stall on our acks
STALL_S = 0.05


@dataclass(frozen=True)
class LanderConfig:
    """Everything the lander needs; built by the CLI (``python -m cloud_spark land``)."""

    host: str
    port: int
    topics: tuple[str, ...]
    root: Path
    client_id: str
    share: str | None = None
    roll_bytes: int = 8 * 1024 * 1024
    roll_seconds: float = 5.0
    receive_maximum: int = 1000
    max_batch_body: int = MAX_BODY
    session_expiry_s: int = 7 * 24 * 3600
    keepalive_s: int = 30
    username: str | None = None
    password: str | None = None
    tls_ca: Path | None = None
    tls_cert: Path | None = None
    tls_key: Path | None = None
    tls_insecure: bool = False
    reconnect_max_s: float = 30.0
    compresslevel: int = 6

    def filters(self) -> list[str]:
        """Subscription filters, wrapped in ``$share/<group>/`` when a share group is set."""
        if self.share:
            return [f"$share/{self.share}/{topic}" for topic in self.topics]
        return list(self.topics)


def _tls_context(cfg: LanderConfig) -> ssl.SSLContext | None:
    if cfg.tls_ca is None and cfg.tls_cert is None and not cfg.tls_insecure:
        return None
    context = ssl.create_default_context(cafile=str(cfg.tls_ca) if cfg.tls_ca else None)
    if cfg.tls_cert is not None:
        context.load_cert_chain(str(cfg.tls_cert), str(cfg.tls_key) if cfg.tls_key else None)
    if cfg.tls_insecure:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


def _paho(client: aiomqtt.Client) -> Any:
    """The paho client under aiomqtt: the one place that reaches into aiomqtt internals."""
    return client._client  # see module docstring (manual acks)


def make_client(
    cfg: LanderConfig, on_connack: Callable[[int], None] = lambda receive_maximum: None
) -> aiomqtt.Client:
    """An MQTT 5 client with a persistent session and manual acknowledgements switched on.

    ``on_connack`` gets the broker's Receive Maximum from each CONNACK (65535 when absent).
    """
    props = Properties(PacketTypes.CONNECT)  # type: ignore[no-untyped-call]
    props.SessionExpiryInterval = cfg.session_expiry_s
    props.ReceiveMaximum = cfg.receive_maximum
    client = aiomqtt.Client(
        cfg.host,
        cfg.port,
        identifier=cfg.client_id,
        protocol=aiomqtt.ProtocolVersion.V5,
        clean_start=False,
        properties=props,
        keepalive=cfg.keepalive_s,
        username=cfg.username,
        password=cfg.password,
        tls_context=_tls_context(cfg),
    )
    paho = _paho(client)
    paho.manual_ack_set(True)
    aiomqtt_on_connect = paho.on_connect

    def on_connect(*args: Any) -> None:
        # (client, userdata, flags, reason code, properties): aiomqtt drops the properties
        properties = args[4] if len(args) > 4 else None
        on_connack(getattr(properties, "ReceiveMaximum", None) or 65535)
        aiomqtt_on_connect(*args)

    paho.on_connect = on_connect
    return client


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class Lander:
    """Owns the bronze writer across connections; :meth:`run` until stopped."""

    def __init__(self, cfg: LanderConfig, clock_ms: Callable[[], int] = _now_ms) -> None:
        self.cfg = cfg
        self.clock_ms = clock_ms
        self.writer: BronzeWriter[Token] = BronzeWriter(
            cfg.root,
            cfg.client_id,
            roll_bytes=cfg.roll_bytes,
            roll_seconds=cfg.roll_seconds,
            compresslevel=cfg.compresslevel,
        )
        self.stop = asyncio.Event()
        self.connection = 0
        self.landed = 0
        self.quarantined = 0
        self._lock = asyncio.Lock()
        self._client: aiomqtt.Client | None = None
        #: pending messages at which the broker may stop sending (see the module docstring)
        self._window = cfg.receive_maximum
        self._received = 0
        self._stall_check: asyncio.TimerHandle | None = None
        self._tasks: set[asyncio.Task[None]] = set()  # stall commits, referenced until done

    async def run(self) -> int:
        """Land until :attr:`stop` is set; returns the process exit code."""
        stale = self.writer.remove_stale_temp_files()
        if stale:
            log.info("removed %d temp files of an earlier run", stale)
        delay = 0.5
        while not self.stop.is_set():
            try:
                await self._connection()
                delay = 0.5
            except aiomqtt.MqttError as exc:
                log.warning("connection lost: %s; reconnecting in %.1fs", exc, delay)
                self._client = None
                await self._commit(ack=False)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.stop.wait(), delay)
                delay = min(delay * 2, self.cfg.reconnect_max_s)
        if self._stall_check is not None:
            self._stall_check.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._commit(ack=False)
        log.info("stopped after landing %d messages", self.landed)
        return 0

    def _connack(self, receive_maximum: int) -> None:
        self._window = min(self.cfg.receive_maximum, receive_maximum)

    async def _connection(self) -> None:
        client = make_client(self.cfg, self._connack)
        async with client:
            self.connection += 1
            self._client = client
            for topic_filter in self.cfg.filters():
                await client.subscribe(topic_filter, qos=1)
            log.info("subscribed %s as %s", ",".join(self.cfg.filters()), self.cfg.client_id)
            reader: asyncio.Task[Any] = asyncio.create_task(self._read(client), name="read")
            ticker: asyncio.Task[Any] = asyncio.create_task(self._tick(), name="tick")
            stopper: asyncio.Task[Any] = asyncio.create_task(self.stop.wait(), name="stop")
            done, _ = await asyncio.wait(
                {reader, ticker, stopper}, return_when=asyncio.FIRST_COMPLETED
            )
            async with self._lock:  # never cancel a task in the middle of a commit
                for task in (reader, ticker, stopper):
                    task.cancel()
            await asyncio.gather(reader, ticker, stopper, return_exceptions=True)
            for task in done:
                if not task.cancelled() and task.exception() is not None:
                    raise task.exception()  # type: ignore[misc]
            await self._commit(ack=True)
            self._client = None

    async def _read(self, client: aiomqtt.Client) -> None:
        connection = self.connection
        async for message in client.messages:
            ingest_ms = self.clock_ms()
            props = message.properties
            user_props = getattr(props, "UserProperty", None) if props is not None else None
            payload = message.payload
            data = payload if isinstance(payload, bytes) else str(payload).encode()
            token = (connection, message.mid, message.qos)
            try:
                records = bronze_records(
                    remote_topic=message.topic.value,
                    payload=data,
                    user_properties=user_props,
                    ingest_ms=ingest_ms,
                    lander_id=self.cfg.client_id,
                    max_body=self.cfg.max_batch_body,
                )
            except BatchError as exc:
                await self._quarantine(message.topic.value, data, user_props, ingest_ms, exc,
                                       token)
                continue
            async with self._lock:
                # a batch's records share its message: only the last one carries the ack
                tokens = [None] * (len(records) - 1) + [token]
                for record, each in zip(records, tokens, strict=True):
                    for committed in self.writer.append(encode_record(record), ingest_ms, each):
                        self._acknowledge(committed)
                self._received += 1
                log.debug("received %s (%d pending)", message.topic.value, self.writer.pending)
                if self.writer.due() or self.writer.pending >= self.cfg.receive_maximum:
                    await self._commit_locked(ack=True)
                elif self.writer.pending >= self._window:
                    self._watch_for_stall()

    def _watch_for_stall(self) -> None:
        """Commit if nothing arrives for :data:`STALL_S` (the broker waits for our acks)."""
        if self._stall_check is not None:
            return
        received = self._received

        def check() -> None:
            self._stall_check = None
            if self.writer.pending < self._window:
                return  # committed meanwhile
            if self._received != received:
                self._watch_for_stall()  # still flowing: look again later
                return
            log.debug("stalled with %d pending: committing", self.writer.pending)
            task = asyncio.create_task(self._commit(ack=True), name="stall-commit")
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

        self._stall_check = asyncio.get_running_loop().call_later(STALL_S, check)

    async def _tick(self) -> None:
        interval = max(0.05, min(1.0, self.cfg.roll_seconds / 4))
        while True:
            await asyncio.sleep(interval)
            async with self._lock:
                if self.writer.due():
                    await self._commit_locked(ack=True)

    async def _commit(self, *, ack: bool) -> None:
        async with self._lock:
            await self._commit_locked(ack=ack)

    async def _commit_locked(self, *, ack: bool) -> None:
        committed = await asyncio.to_thread(self.writer.commit)
        if committed is not None and ack:
            self._acknowledge(committed)
        elif committed is not None:
            self.landed += committed.records
            log.info("committed %s (%d records, not acked)", committed.path, committed.records)

    def _acknowledge(self, committed: Committed[Token]) -> None:
        """PUBACK every message of a committed file that arrived on the live connection."""
        self.landed += committed.records
        client = self._client
        acked = 0
        if client is not None:
            paho = _paho(client)
            for token in committed.tokens:
                acked += self._ack(paho, token)
        log.info("committed %s (%d records, %d acked)", committed.path, committed.records, acked)

    def _ack(self, paho: Any, token: Token) -> int:
        """PUBACK one message if it came on the live connection; returns 1 if acked."""
        if token is None:
            return 0
        connection, mid, qos = token
        if connection != self.connection or qos == 0:
            return 0
        paho.ack(mid, qos)
        return 1

    async def _quarantine(
        self, topic: str, payload: bytes, user_props: Any, ingest_ms: int, error: BatchError,
        token: Token,
    ) -> None:
        """Keep a message that does not decode (a bad batch) under ``quarantine/`` with its
        reason, then acknowledge it after everything that arrived before it."""
        async with self._lock:
            self.quarantined += 1
            path = await asyncio.to_thread(
                quarantine_message, self.cfg.root, reason=error.reason, detail=error.detail,
                remote_topic=topic, payload=payload, user_properties=list(user_props or ()),
                ingest_ms=ingest_ms, lander_id=self.cfg.client_id, serial=self.quarantined,
            )
            log.warning("quarantined a message on %s (%s) as %s", topic, error, path)
            await self._commit_locked(ack=True)  # PUBACKs stay in arrival order
            if self._client is not None:
                self._ack(_paho(self._client), token)


async def run_lander(cfg: LanderConfig) -> int:
    """Run a lander until SIGTERM/SIGINT; returns 0 after a clean flush."""
    lander = Lander(cfg)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, lander.stop.set)
    return await lander.run()
