"""The lander: subscribe to the cloud broker and write every message to bronze, losslessly.

How this works:

* One MQTT 5 connection at a time (:class:`cloud_spark.mqtt_link.Link`, an asyncio protocol
  with its own codec, :mod:`cloud_spark.mqtt_codec`, that never acknowledges by itself) with
  a **persistent session**: ``clean_start=False`` and a Session Expiry Interval, so the
  broker queues QoS 1 messages while the lander is down. Subscriptions are QoS 1,
  optionally ``$share/<group>/<filter>`` so that several landers split the load.
* The link calls :meth:`Lander._on_message` on the loop's thread as it cuts packets; the
  record goes straight into the open bronze file (in memory until it is committed).
* **Committing in the background.** A file is *sealed* when it is big or old enough
  (checked on every message and by a ticker), when the ingest hour changes, or when it
  holds ``receive_maximum`` messages; a sealed file is gzipped, written, fsynced, renamed
  and its directory fsynced on a worker thread (:func:`cloud_spark.bronze_writer.finish`)
  while the next file fills. Several sealed files may be finishing at once (a commit mostly
  waits for the disk), but they are acknowledged in the order they were sealed, and every
  message of a file only after :func:`finish` returned it, so PUBACKs go out in arrival
  order, as MQTT requires, and never for a file after one that failed.
* **What the lander holds is bounded.** Messages received and not yet acked (the open file
  plus the sealed ones) are *held*. At ``max_held`` the lander stops reading the socket
  (:meth:`Link.pause_reading`) until a commit makes room; TCP flow control then stops the
  broker, whatever it does with Receive Maximum (mosquitto 2.0 honours it for the first
  window only). :attr:`Lander.most_held` is the most it ever held. The bronze bytes held are
  bounded too (``max_held_bytes``): a batched message carries up to thousands of rows.
* The broker stops sending once ``receive_maximum`` messages are unacknowledged, so the
  lander also seals when that many are pending. Some brokers cap what they send below that,
  at their own in-flight limit, and announce the cap only as the Receive Maximum of their
  CONNACK (EMQX's ``max_inflight``; outpost's ``max_inflight`` with ``receive_maximum``, both
  64 by default). Waiting for the roll timer would then land one window per
  ``roll_seconds``, so when that many are pending and nothing has arrived for
  :data:`STALL_S`, the stream is taken as stalled on our acks and the file is sealed.
  (Only then: mosquitto 2.0 announces ``max_inflight_messages``, 20, without capping what
  it sends an MQTT 5 client, and a busy stream must not be cut into files of 20.)
* Connection lost: the files are still committed (their records are duplicates-to-be,
  harmless) but their messages are *not* acked: packet ids belong to the dead connection
  and the broker redelivers them. Each connection gets a fresh client, so no stale message
  ever reaches the new connection. Reconnects back off exponentially.
* **Batched messages** (many outbox rows per PUBLISH, :mod:`cloud_spark.batch_format`) become
  one bronze record per row, all in the same file, acknowledged with it; the counts above
  (pending, held, the window) are of messages, not rows. A batch that does not decode is
  written whole, with its reason, under ``<root>/quarantine/``
  (:mod:`cloud_spark.lander_quarantine`), and acked once that file and everything that
  arrived before it are committed.
* SIGTERM / SIGINT: commit everything, ack it, disconnect cleanly (the session stays),
  exit 0. SIGKILL loses nothing either: uncommitted messages were never acked.
* **Where files go** is the writer's sink (:class:`cloud_spark.bronze_writer.BronzeSink`): a
  local directory, or with an ``s3://bucket/prefix`` root one object per file
  (:mod:`cloud_spark.bronze_s3`), "committed" meaning the PUT succeeded. The bucket is
  checked before connecting (:func:`run_lander`); a failed PUT is retried by the sink until
  it succeeds, holding that file's acks and every later file's, so the lander stops reading
  at ``max_held`` until the store is back. When told to stop, the sink retries for
  :data:`STOP_RETRY_S` more, then gives up: the lander exits non-zero and the messages not
  stored were never acknowledged.
* **Leaving a share group for good** (``leave``): instead of landing until stopped, the
  lander resumes its session, subscribes to a topic of its own (:func:`leave_topic`),
  unsubscribes its filters, publishes one marker message to its own topic and lands
  everything until the marker arrives (the broker delivers a session's queue in order, so
  nothing queued for it is left behind), commits and acks it all, and disconnects with
  Session Expiry Interval 0: the broker deletes the session and queues nothing more for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import ssl
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cloud_spark.batch_format import MAX_BODY, BatchError
from cloud_spark.bronze_s3 import S3Sink, is_s3_root, parse_s3_root
from cloud_spark.bronze_writer import BronzeSink, BronzeWriter, Committed, LocalSink, Sealed, finish
from cloud_spark.lander_quarantine import quarantine_message
from cloud_spark.mqtt_codec import Publish
from cloud_spark.mqtt_link import Link, LinkError, RefusedError
from cloud_spark.records import bronze_lines

log = logging.getLogger("cloud_spark.lander")

#: an ack token: (connection number, MQTT packet id, QoS)
Token = tuple[int, int, int]

#: quiet time after which a full window of pending messages counts as a stall on our acks
STALL_S = 0.05

#: prefix of the topic a leaving lander sends its marker to (``<prefix>/<client id>``)
LEAVE_TOPIC_PREFIX = "outpost-lander-leave"

#: seconds a stopping lander keeps retrying files its sink failed to store
STOP_RETRY_S = 5.0

#: On S3 a commit is a PUT of tens of milliseconds, not an fsync of a few: by Little's law
#: the rate is the messages in flight over that latency, so an S3 lander holds up to this
#: many times ``receive_maximum`` (``max_held_bytes`` still bounds the memory)...
S3_HELD_FACTOR = 16
#: ...and uploads on this many threads (asyncio's default pool has cores + 4)
S3_UPLOAD_THREADS = 32


@dataclass(frozen=True)
class LanderConfig:
    """Everything the lander needs; built by the CLI (``python -m cloud_spark land``)."""

    host: str
    port: int
    topics: tuple[str, ...]
    #: a local directory, or an ``s3://bucket/prefix`` URI
    root: Path | str
    client_id: str
    share: str | None = None
    roll_bytes: int = 8 * 1024 * 1024
    roll_seconds: float = 5.0
    receive_maximum: int = 1000
    max_batch_body: int = MAX_BODY
    #: most messages received and not yet acked; None: four times ``receive_maximum``, sixteen
    #: times on S3 (:data:`S3_HELD_FACTOR`)
    max_held: int | None = None
    max_held_bytes: int = 64 * 1024 * 1024
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
    #: leave the share group for good instead of landing until stopped
    leave: bool = False
    #: an S3-compatible endpoint for an s3:// root (default: the AWS conventions)
    s3_endpoint: str | None = None
    s3_region: str | None = None

    def filters(self) -> list[str]:
        """Subscription filters, wrapped in ``$share/<group>/`` when a share group is set."""
        if self.share:
            return [f"$share/{self.share}/{topic}" for topic in self.topics]
        return list(self.topics)

    @property
    def on_s3(self) -> bool:
        return isinstance(self.root, str) and is_s3_root(self.root)

    @property
    def held_limit(self) -> int:
        if self.max_held is not None:
            return self.max_held
        return (S3_HELD_FACTOR if self.on_s3 else 4) * self.receive_maximum


def open_sink(cfg: LanderConfig) -> BronzeSink:
    """The sink of ``cfg.root``: S3 for an ``s3://`` URI, else a local directory."""
    if cfg.on_s3:
        return S3Sink(parse_s3_root(str(cfg.root)), endpoint=cfg.s3_endpoint,
                      region=cfg.s3_region, max_pool_connections=S3_UPLOAD_THREADS)
    return LocalSink(Path(cfg.root))


def leave_topic(client_id: str) -> str:
    """The topic a leaving lander publishes its marker to and subscribes (needs both rights)."""
    return f"{LEAVE_TOPIC_PREFIX}/{client_id}"


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


async def _first_of(*futures: asyncio.Future[Any]) -> None:
    await asyncio.wait(set(futures), return_when=asyncio.FIRST_COMPLETED)


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class Lander:
    """Owns the bronze writer across connections; :meth:`run` until stopped."""

    def __init__(self, cfg: LanderConfig, clock_ms: Callable[[], int] = _now_ms,
                 sink: BronzeSink | None = None) -> None:
        self.cfg = cfg
        self.clock_ms = clock_ms
        self.sink = sink if sink is not None else open_sink(cfg)
        self.writer: BronzeWriter[Token] = BronzeWriter(
            Path("."),  # unused: the sink knows the root
            cfg.client_id,
            roll_bytes=cfg.roll_bytes,
            roll_seconds=cfg.roll_seconds,
            compresslevel=cfg.compresslevel,
            sink=self.sink,
        )
        self.stop = asyncio.Event()
        self.connection = 0
        self.landed = 0
        self.quarantined = 0
        #: the most messages held (received, not acked) at any moment
        self.most_held = 0
        self._link: Link | None = None
        #: pending messages at which the broker may stop sending (see the module docstring)
        self._window = cfg.receive_maximum
        self._received = 0
        self._held_sealed = 0  # messages in sealed files not finished yet
        self._held_sealed_bytes = 0  # and their bronze bytes
        #: the most bronze bytes held at any moment
        self.most_held_bytes = 0
        self._committing: asyncio.Future[None] | None = None  # the last file being finished
        self._failure: BaseException | None = None
        self._stall_check: asyncio.TimerHandle | None = None
        self._marker: asyncio.Future[tuple[int, int]] | None = None  # leave: (mid, qos)
        self._debug = log.isEnabledFor(logging.DEBUG)

    @property
    def held(self) -> int:
        """Messages received and not acknowledged yet (open and sealed files)."""
        return self.writer.pending + self._held_sealed

    @property
    def held_bytes(self) -> int:
        """Bronze bytes of the messages held (open and sealed files)."""
        return self.writer.open_bytes + self._held_sealed_bytes

    def _full(self) -> bool:
        return self.held >= self.cfg.held_limit or self.held_bytes >= self.cfg.max_held_bytes

    async def run(self) -> int:
        """Land until :attr:`stop` is set (or, with ``leave``, until the session is ended);
        returns the process exit code."""
        stale = self.writer.remove_stale_temp_files()
        if stale:
            log.info("removed %d temp files of an earlier run", stale)
        delay = 0.5
        ticker = asyncio.create_task(self._tick(), name="tick")
        bound_retries = asyncio.create_task(self._bound_retries_when_stopping())
        try:
            while not self.stop.is_set() and self._failure is None:
                try:
                    await self._connection()
                    delay = 0.5
                except LinkError as exc:
                    log.warning("%s; reconnecting in %.1fs", exc, delay)
                    await self._flush()  # committed, not acked: the link is gone
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self.stop.wait(), delay)
                    delay = min(delay * 2, self.cfg.reconnect_max_s)
        finally:
            ticker.cancel()
            bound_retries.cancel()
            if self._stall_check is not None:
                self._stall_check.cancel()
            await self._flush()
        if self._failure is not None:
            raise self._failure
        log.info(
            "stopped after landing %d messages (most held at once: %d, %d bytes)",
            self.landed,
            self.most_held,
            self.most_held_bytes,
        )
        return 0

    async def _bound_retries_when_stopping(self) -> None:
        await self.stop.wait()
        self.sink.give_up_after(STOP_RETRY_S)

    async def _connection(self) -> None:
        self.connection += 1
        link = Link(
            self.cfg.client_id,
            self._on_message,
            username=self.cfg.username,
            password=self.cfg.password,
            tls_context=_tls_context(self.cfg),
        )
        self._link = link  # before CONNACK: the session's messages may follow it at once
        self._update_reading()
        try:
            receive_maximum = await link.connect(
                self.cfg.host,
                self.cfg.port,
                keepalive=self.cfg.keepalive_s,
                session_expiry_s=self.cfg.session_expiry_s,
                receive_maximum=self.cfg.receive_maximum,
            )
            self._window = min(self.cfg.receive_maximum, receive_maximum)
            log.info(
                "connected as %s (session present: %s, broker's receive maximum %d)",
                self.cfg.client_id, link.session_present, receive_maximum,
            )  # fmt: skip
            if self.cfg.leave:
                try:
                    await self._leave(link)
                except RefusedError as exc:  # retrying would not help; the session stays as it was
                    raise SystemExit(f"error: cannot leave the group: {exc}") from None
                return
            await link.subscribe(self.cfg.filters())
            log.info("subscribed %s as %s", ",".join(self.cfg.filters()), self.cfg.client_id)
            stopping = asyncio.ensure_future(self.stop.wait())
            await _first_of(stopping, link.lost)
            stopping.cancel()
            if link.lost.done():
                link.lost.result()  # raises LinkError when the broker went away
                raise LinkError("the broker closed the connection")
            await self._flush()  # commit and ack everything before the clean DISCONNECT
            await link.disconnect()
        finally:
            self._link = None
            link.close()

    async def _leave(self, link: Link) -> None:
        """Hand back everything the session holds, then end the session (module docstring)."""
        topic = leave_topic(self.cfg.client_id)
        self._marker = asyncio.get_running_loop().create_future()
        await link.subscribe([topic])
        codes = await link.unsubscribe(self.cfg.filters())
        log.info("leaving: unsubscribed %s (reason codes %s)", ",".join(self.cfg.filters()), codes)
        await link.publish(topic, b"leave")
        await _first_of(self._marker, link.lost)
        if not self._marker.done():
            link.lost.result()
            raise LinkError("the broker closed the connection while leaving")
        await self._flush()
        mid, qos = self._marker.result()
        if qos:
            link.ack_all([mid])
        await link.unsubscribe([topic])
        await link.disconnect(session_expiry_s=0)
        log.info("left: session %s ended", self.cfg.client_id)
        self.stop.set()

    def _on_message(self, message: Publish) -> None:
        """Called by the link on the loop's thread for every received PUBLISH."""
        if self._marker is not None and message.topic == leave_topic(self.cfg.client_id):
            if not self._marker.done():
                self._marker.set_result((message.mid, message.qos))
            return
        ingest_ms = self.clock_ms()
        token = (self.connection, message.mid, message.qos)
        try:
            lines = bronze_lines(
                remote_topic=message.topic,
                payload=message.payload,
                user_properties=message.user_properties,
                ingest_ms=ingest_ms,
                lander_id=self.cfg.client_id,
                max_body=self.cfg.max_batch_body,
            )
        except BatchError as exc:
            self._quarantine(message, ingest_ms, exc, token)
            return
        writer = self.writer
        sealed = writer.append(lines, ingest_ms, token)
        if sealed is not None:
            self._finish(sealed)
        self._received += 1
        if self._debug:
            log.debug("received %s (%d pending)", message.topic, writer.pending)
        if (writer.pending >= self.cfg.receive_maximum or writer.due()
                or self.held_bytes >= self.cfg.max_held_bytes):  # commit to make room
            self._seal()
        elif writer.pending >= self._window:
            self._watch_for_stall()
        self.most_held = max(self.most_held, self.held)
        self.most_held_bytes = max(self.most_held_bytes, self.held_bytes)
        if self._full() and self._link is not None:
            self._link.pause_reading()

    def _quarantine(self, message: Publish, ingest_ms: int, error: BatchError,
                    token: Token) -> None:
        """Keep a message that does not decode (a bad batch) under ``quarantine/`` with its
        reason; acknowledge it after everything that arrived before it is committed."""
        self.quarantined += 1
        serial = self.quarantined
        self._seal()
        self._held_sealed += 1
        previous = self._committing

        async def keep() -> None:
            try:
                try:
                    path = await asyncio.to_thread(
                        quarantine_message, self.sink, reason=error.reason,
                        detail=error.detail, remote_topic=message.topic,
                        payload=message.payload,
                        user_properties=list(message.user_properties or ()),
                        ingest_ms=ingest_ms, lander_id=self.cfg.client_id, serial=serial,
                    )  # fmt: skip
                    log.warning("quarantined a message on %s (%s) as %s", message.topic, error,
                                path)
                except OSError as exc:
                    log.error("cannot quarantine a message on %s: %s", message.topic, exc)
                    self._failure = exc
                    self.stop.set()
                if previous is not None:
                    await previous  # PUBACKs stay in arrival order
                if self._failure is None:
                    self._ack([token])
            finally:
                self._held_sealed -= 1
            self._update_reading()

        self._committing = asyncio.ensure_future(keep())

    def _update_reading(self) -> None:
        link = self._link
        if link is not None:
            if self._full():
                link.pause_reading()
            else:
                link.resume_reading()

    def _seal(self) -> None:
        sealed = self.writer.seal()
        if sealed is not None:
            self._finish(sealed)

    def _finish(self, sealed: Sealed[Token]) -> None:
        """Commit ``sealed`` on a worker thread after every file sealed before it."""
        self._held_sealed += len(sealed.tokens)
        self._held_sealed_bytes += sealed.size
        self._committing = asyncio.ensure_future(self._finish_after(self._committing, sealed))

    async def _finish_after(
        self, previous: asyncio.Future[None] | None, sealed: Sealed[Token]
    ) -> None:
        started = time.monotonic()
        try:
            try:  # files are finished side by side (fsync waits on the disk, not the CPU)...
                committed = await asyncio.to_thread(finish, sealed)
            except OSError as exc:
                log.error("cannot commit %s: %s", sealed.location, exc)
                self._failure = exc
                self.stop.set()
            if previous is not None:
                await previous  # ...and acknowledged in the order they were sealed
            if self._failure is None:
                self._acknowledge(committed, time.monotonic() - started)
        finally:
            self._held_sealed -= len(sealed.tokens)
            self._held_sealed_bytes -= sealed.size
        self._update_reading()

    async def _flush(self) -> None:
        """Seal the open file and wait until every sealed file is committed (and acked, if
        its connection is still up)."""
        self._seal()
        if self._committing is not None:
            await self._committing

    def _watch_for_stall(self) -> None:
        """Seal if nothing arrives for :data:`STALL_S` (the broker waits for our acks)."""
        if self._stall_check is not None:
            return
        received = self._received

        def check() -> None:
            self._stall_check = None
            if self.writer.pending < self._window:
                return  # sealed meanwhile
            if self._received != received:
                self._watch_for_stall()  # still flowing: look again later
                return
            log.debug("stalled with %d pending: committing", self.writer.pending)
            self._seal()

        self._stall_check = asyncio.get_running_loop().call_later(STALL_S, check)

    async def _tick(self) -> None:
        interval = max(0.05, min(1.0, self.cfg.roll_seconds / 4))
        while True:
            await asyncio.sleep(interval)
            if self.writer.due():
                self._seal()

    def _acknowledge(self, committed: Committed[Token], seconds: float) -> None:
        """PUBACK every message of a committed file that arrived on the live connection."""
        self.landed += committed.records
        acked = self._ack(committed.tokens)
        log.info(
            "committed %s (%d records, %d acked, %.0f ms)",
            committed.path, committed.records, acked, seconds * 1000,
        )  # fmt: skip


    def _ack(self, tokens: list[Token]) -> int:
        """PUBACK the messages that arrived on the live connection; returns how many."""
        link = self._link
        if link is None or link.lost.done():
            return 0
        live = self.connection
        mids = [mid for connection, mid, qos in tokens if connection == live and qos]
        link.ack_all(mids)
        return len(mids)


async def run_lander(cfg: LanderConfig) -> int:
    """Run a lander until SIGTERM/SIGINT; returns 0 after a clean flush. An S3 root is
    checked first (:class:`cloud_spark.bronze_s3.S3SetupError` naming what is wrong)."""
    lander = Lander(cfg)
    loop = asyncio.get_running_loop()
    if isinstance(lander.sink, S3Sink):
        loop.set_default_executor(ThreadPoolExecutor(S3_UPLOAD_THREADS, "s3-upload"))
        await asyncio.to_thread(lander.sink.check)
        log.info("landing to %s at %s", lander.sink.root.uri(), lander.sink.where())
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, lander.stop.set)
    return await lander.run()
