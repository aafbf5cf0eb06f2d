"""The status endpoint: `/` (the status page), `/status` (JSON) and `/metrics` (Prometheus),
and `/history.json` (point history: outpost/history_api.py's answer, docs/history.md).

How this works: a plain asyncio stream server (no web framework: one short request per
connection, `Connection: close`) bound to `[status] bind`, 127.0.0.1 by default so it stays
off the LAN. Every request is answered from the `StatusBoard` at that moment:

- `/status` is `board.collect()` as JSON; `/status?history=1` adds the ring buffers that the
  page draws (`history`: series name -> `[[unix time, value], ...]`).
- `/metrics` is the Prometheus text format written by prometheus-client from a custom collector
  (`BoardCollector`) that reads the same snapshot at scrape time, plus the usual `process_*`
  metrics (CPU, resident memory, open files, start time) read from `/proc/self` only, which
  works under `ProcSubset=pid` (prometheus-client's own ProcessCollector needs /proc/stat).
- `/` is `status_page.html`, one self-contained file (inline CSS and JS, no external assets,
  enforced by its Content-Security-Policy) that polls `/status?history=1`.

Requests are bounded: 8 KiB of request head, 10 s to send it, 16 connections at a time and
`PER_ADDRESS` from one address (outpost/http_guard.py); only GET and HEAD. `fetch_status` is
the client side used by `outpost status`.

Off loopback (config: only with one of them) the endpoint speaks HTTPS (`tls_cert`, `tls_key`)
and/or asks for HTTP Basic credentials checked against a `$7$` password file, the broker's
format (`outpost passwd`). A check costs a PBKDF2 hash, so it runs in a worker thread and its
verdict is cached (`PasswordDB`): a scraper with the right password pays once.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import json
import logging
import math
import os
import ssl
import time
from collections.abc import Iterator, Mapping
from importlib import resources
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import parse_qs, urlsplit

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from gateway.broker.contracts.auth import PasswordDB
from gateway.broker.contracts.passwords import parse_password_text
from outpost.config import StatusConfig
from outpost.history_api import HistoryRequestError, history_answer
from outpost.http_guard import PeerSlots, peer_address
from outpost.status import StatusBoard
from storage.history.reader import HistoryReader
from storage.history.schema import HistoryFileError

log = logging.getLogger("outpost.status")

MAX_HEAD = 8192
REQUEST_TIMEOUT = 10.0
MAX_CONNECTIONS = 16
PER_ADDRESS = 8  # one neighbour cannot take every connection
PROMETHEUS_TYPE = "text/plain; version=0.0.4; charset=utf-8"
PAGE_CSP = ("default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
            "img-src data:; connect-src 'self'; base-uri 'none'; form-action 'none'")
_REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found",
            405: "Method Not Allowed",
            408: "Request Timeout", 500: "Internal Server Error", 503: "Service Unavailable"}


def status_page() -> bytes:
    """The HTML of the status page (package data next to this module)."""
    return resources.files("outpost").joinpath("status_page.html").read_bytes()


# -- the store files provider -----------------------------------------------------------------


class StoreFiles:
    """The "store" section: database and WAL size on disk, plus the store's own figures."""

    def __init__(self, path: Path, store: object, durability: str) -> None:
        self.path = path
        self.store = store
        self.durability = durability

    def status(self) -> dict[str, Any]:
        size = wal = 0
        with contextlib.suppress(OSError):
            size = os.stat(self.path).st_size
        with contextlib.suppress(OSError):
            wal = os.stat(f"{self.path}-wal").st_size
        section: dict[str, Any] = {
            "path": str(self.path), "durability": self.durability,
            "size_bytes": size + wal, "wal_bytes": wal,
        }
        stats = getattr(self.store, "stats", None)
        if callable(stats):
            figures = stats()
            if isinstance(figures, Mapping):
                for key in ("commits", "commit_failures", "store_full_events", "write_bytes",
                            "commit_seconds_max"):
                    if key in figures:
                        section[key] = figures[key]
        return section


# -- Prometheus --------------------------------------------------------------------------------


def _number(value: object) -> float | None:
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, int | float) and math.isfinite(value):
        return float(value)
    return None


class BoardCollector(Collector):
    """Turns one status snapshot into metric families at scrape time."""

    def __init__(self, board: StatusBoard) -> None:
        self.board = board

    def collect(self) -> Iterator[Metric]:
        status = self.board.collect()
        info = GaugeMetricFamily("outpost_info", "Gateway identity", labels=["gateway_id",
                                                                            "version"])
        info.add_metric([str(status["gateway_id"]), str(status["version"])], 1)
        yield info
        yield GaugeMetricFamily("outpost_uptime_seconds", "Seconds since the broker started",
                                value=status["uptime_s"])
        clients = status["clients"]
        for key, text in (("connected", "Network clients connected"),
                          ("maximum", "Most clients (links included) connected at once"),
                          ("links", "In-process links (bridge, uplink, status) attached"),
                          ("sessions", "Sessions (online and offline)"),
                          ("offline_sessions", "Persistent sessions without a connection")):
            yield GaugeMetricFamily(f"outpost_clients_{key}", text, value=clients[key])
        yield GaugeMetricFamily("outpost_subscriptions", "Subscriptions",
                                value=status["subscriptions"])
        yield GaugeMetricFamily("outpost_retained_messages", "Retained messages",
                                value=status["retained"])
        messages = status["messages"]
        for key, text in (("received", "Messages received from clients, links, wills, $SYS"),
                          ("sent", "PUBLISH packets sent to clients"),
                          ("dropped", "Messages dropped by a queue overflow policy"),
                          ("expired", "Messages expired before delivery"),
                          ("denied", "Messages denied by the ACL"),
                          ("too_large", "Messages larger than a client's maximum packet size"),
                          ("store_full", "Messages refused because the store was full")):
            yield CounterMetricFamily(f"outpost_messages_{key}", text, value=messages[key])
        for key in ("received", "sent"):
            yield CounterMetricFamily(f"outpost_bytes_{key}", f"Network bytes {key}",
                                      value=status["bytes"][key])
        queues = status["queues"]
        yield GaugeMetricFamily("outpost_queued_messages", "Messages waiting in session queues",
                                value=queues["queued_messages"])
        yield GaugeMetricFamily("outpost_queued_bytes", "Bytes waiting in session queues",
                                value=queues["queued_bytes"])
        yield GaugeMetricFamily("outpost_inflight_messages", "QoS 1/2 deliveries in flight",
                                value=queues["inflight"])
        yield from self._store(status.get("store"))
        yield from self._devices(status.get("devices"))
        yield from self._uplink(status.get("uplink"))
        yield from self._service(status.get("service"))
        yield from self._certificate(status.get("certificate"))
        yield from _process(self.board.started_wall)

    @staticmethod
    def _certificate(certificate: object) -> Iterator[Metric]:
        if not isinstance(certificate, dict) or "expires_in_s" not in certificate:
            return
        yield GaugeMetricFamily("outpost_certificate_expires_in_seconds",
                                "Seconds until the device certificate expires (negative: "
                                "expired)", value=certificate["expires_in_s"])
        yield GaugeMetricFamily("outpost_certificate_valid", "1 when the device certificate "
                                "is valid and not revoked",
                                value=1 if certificate.get("state") in ("valid", "renewing")
                                else 0)
        yield CounterMetricFamily("outpost_certificate_renewals", "Certificates renewed",
                                  value=certificate.get("renewals", 0))

    @staticmethod
    def _store(store: object) -> Iterator[Metric]:
        if not isinstance(store, Mapping) or "size_bytes" not in store:
            return
        yield GaugeMetricFamily("outpost_store_bytes", "Database and WAL size on disk",
                                value=store["size_bytes"])
        yield GaugeMetricFamily("outpost_store_wal_bytes", "WAL size on disk",
                                value=store.get("wal_bytes", 0))
        if _number(store.get("commits")) is not None:
            yield CounterMetricFamily("outpost_store_commits", "Group commits",
                                      value=store["commits"])

    @staticmethod
    def _devices(devices: object) -> Iterator[Metric]:
        if not isinstance(devices, Mapping) or "devices" not in devices:
            return
        online = GaugeMetricFamily("outpost_device_online", "1 when the device answers",
                                   labels=["device"])
        errors = CounterMetricFamily("outpost_device_errors",
                                     "Timeouts, CRC errors and exception responses",
                                     labels=["device"])
        age = GaugeMetricFamily("outpost_device_last_value_age_seconds",
                                "Seconds since the device's last value", labels=["device"])
        points = GaugeMetricFamily("outpost_point_value", "Latest numeric value of a point",
                                   labels=["device", "point"])
        for device in devices["devices"]:
            name = str(device.get("name"))
            state = device.get("online")
            if isinstance(state, bool):
                online.add_metric([name], 1.0 if state else 0.0)
            errors.add_metric([name], float(device.get("errors") or 0))
            last = _number(device.get("last_value_age_s"))
            if last is not None:
                age.add_metric([name], last)
            for point, data in (device.get("points") or {}).items():
                value = _number(data.get("value")) if isinstance(data, Mapping) else None
                if value is not None:
                    points.add_metric([name, str(point)], value)
        yield from (online, errors, age, points)

    @staticmethod
    def _uplink(uplink: object) -> Iterator[Metric]:
        if not isinstance(uplink, Mapping) or "backlog_messages" not in uplink:
            return
        yield GaugeMetricFamily("outpost_uplink_connected", "1 when a cloud broker is connected",
                                value=1.0 if uplink.get("connected") else 0.0)
        yield GaugeMetricFamily("outpost_uplink_backlog_messages", "Messages in the outbox",
                                value=uplink["backlog_messages"])
        for key, name, text in (
            ("backlog_bytes", "outpost_uplink_backlog_bytes", "Bytes in the outbox"),
            ("oldest_age_s", "outpost_uplink_oldest_age_seconds",
             "Age of the oldest message in the outbox"),
            ("drain_rate", "outpost_uplink_drain_rate", "Messages/s acknowledged by the cloud"),
            ("eta_s", "outpost_uplink_drain_eta_seconds", "Time to empty the outbox"),
        ):
            value = _number(uplink.get(key))
            if value is not None:
                yield GaugeMetricFamily(name, text, value=value)
        dropped = _number(uplink.get("dropped"))
        if dropped is not None:
            yield CounterMetricFamily("outpost_uplink_dropped", "Messages dropped by the outbox",
                                      value=dropped)

    @staticmethod
    def _service(service: object) -> Iterator[Metric]:
        if not isinstance(service, Mapping):
            return
        yield CounterMetricFamily("outpost_reloads", "Configuration reloads applied",
                                  value=service.get("reloads", 0))
        yield CounterMetricFamily("outpost_reload_failures", "Reloads refused (invalid file)",
                                  value=service.get("reload_failures", 0))
        yield CounterMetricFamily("outpost_watchdog_pings", "WATCHDOG=1 sent to systemd",
                                  value=service.get("watchdog_pings", 0))


def _process(started: float) -> Iterator[Metric]:
    times = os.times()
    yield CounterMetricFamily("process_cpu_seconds", "User and system CPU time spent",
                              value=times.user + times.system)
    yield GaugeMetricFamily("process_start_time_seconds", "Start time since the Unix epoch",
                            value=started)
    with contextlib.suppress(OSError, ValueError, IndexError):
        with open("/proc/self/statm", "rb") as statm:
            pages = int(statm.read().split()[1])
        yield GaugeMetricFamily("process_resident_memory_bytes", "Resident memory size",
                                value=pages * os.sysconf("SC_PAGE_SIZE"))
    with contextlib.suppress(OSError):
        yield GaugeMetricFamily("process_open_fds", "Open file descriptors",
                                value=len(os.listdir("/proc/self/fd")))


def metrics_registry(board: StatusBoard) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(BoardCollector(board))
    return registry


# -- the HTTP server ---------------------------------------------------------------------------


class StatusEndpoint(Protocol):
    """What serves the `[status]` listener (this module's `StatusServer`, or the console)."""

    tls: ssl.SSLContext | None

    async def start(self, host: str, port: int) -> tuple[str, int]: ...

    async def close(self) -> None: ...


def tls_context(config: StatusConfig) -> ssl.SSLContext | None:
    """The HTTPS context `[status]` asks for (tls_cert + tls_key), or None."""
    if config.tls_cert is None or config.tls_key is None:
        return None
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.minimum_version = ssl.TLSVersion.TLSv1_2
    tls.load_cert_chain(config.tls_cert, config.tls_key)
    return tls


def status_users(config: StatusConfig) -> PasswordDB | None:
    """The users of `[status] password_file` (HTTP Basic), or None when there is none."""
    if config.password_file is None:
        return None
    text = config.password_file.read_text(encoding="utf-8")
    return PasswordDB(parse_password_text(text), str(config.password_file))


def basic_credentials(header: bytes) -> tuple[str, bytes] | None:
    """(user, password) of an `Authorization: Basic ...` header value, or None."""
    scheme, _, encoded = header.strip().partition(b" ")
    if scheme.lower() != b"basic":
        return None
    try:
        username, sep, password = base64.b64decode(encoded.strip(), validate=True).partition(
            b":")
        user = username.decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None
    return (user, password) if sep else None


async def check_password(users: PasswordDB, user: str, password: bytes) -> bool:
    """The cached verdict, else the slow hash in a worker thread (then cached)."""
    verdict = users.verdict(user, password)
    if verdict is None:
        loop = asyncio.get_running_loop()
        verdict = await loop.run_in_executor(None, users.job(user, password))
        users.remember(user, password, verdict)
    return verdict


class StatusServer:
    """`/`, `/status`, `/metrics` over asyncio streams."""

    def __init__(self, board: StatusBoard, users: PasswordDB | None = None,
                 tls: ssl.SSLContext | None = None,
                 history: HistoryReader | None = None) -> None:
        self.board = board
        self.history = history  # /history.json (outpost/history_api.py); None: history is off
        self.registry = metrics_registry(board)
        self.page = status_page()
        self.users = users
        self.tls = tls
        self.server: asyncio.Server | None = None
        self.active: set[asyncio.Task[None]] = set()
        self.slots = PeerSlots(PER_ADDRESS, MAX_CONNECTIONS)
        self.requests = 0
        self.refused = 0  # requests answered 401

    @classmethod
    def for_config(cls, board: StatusBoard, config: StatusConfig,
                   history: HistoryReader | None = None) -> StatusServer:
        """The server `[status]` asks for (its files were checked when the config loaded)."""
        return cls(board, status_users(config), tls_context(config), history)

    async def start(self, host: str, port: int) -> tuple[str, int]:
        self.server = await asyncio.start_server(self._serve, host, port, limit=MAX_HEAD,
                                                 reuse_address=True, ssl=self.tls)
        sockname = self.server.sockets[0].getsockname()
        return str(sockname[0]), int(sockname[1])

    async def close(self) -> None:
        if self.server is None:
            return
        self.server.close()
        for task in list(self.active):
            task.cancel()
        await asyncio.gather(*self.active, return_exceptions=True)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.server.wait_closed(), 2.0)
        self.server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        address = peer_address(writer.transport)
        if task is None or not self.slots.take(address):
            writer.close()
            return
        self.active.add(task)
        try:
            await self._answer(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass
        finally:
            self.slots.give(address)
            self.active.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(writer.wait_closed(), 1.0)

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(REQUEST_TIMEOUT):
                head = await reader.readuntil(b"\r\n\r\n")
        except TimeoutError:
            await self._send(writer, 408, "text/plain", b"request timeout\n")
            return
        except asyncio.LimitOverrunError:
            await self._send(writer, 400, "text/plain", b"request head too large\n")
            return
        request_line = head.split(b"\r\n", 1)[0].decode("latin-1")
        parts = request_line.split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
            await self._send(writer, 400, "text/plain", b"bad request\n")
            return
        method, target, _version = parts
        if method not in ("GET", "HEAD"):
            await self._send(writer, 405, "text/plain", b"only GET and HEAD\n",
                             {"Allow": "GET, HEAD"})
            return
        if self.users is not None and not await self._authorized(head):
            self.refused += 1
            await self._send(writer, 401, "text/plain", b"authentication required\n",
                             {"WWW-Authenticate": 'Basic realm="outpost", charset="UTF-8"'})
            return
        self.requests += 1
        url = urlsplit(target)
        head_only = method == "HEAD"
        try:
            if url.path == "/":
                await self._send(writer, 200, "text/html; charset=utf-8", self.page,
                                 {"Content-Security-Policy": PAGE_CSP}, head_only)
            elif url.path == "/status":
                query = parse_qs(url.query)
                history = query.get("history", ["0"])[0] not in ("0", "", "false")
                body = json.dumps(self.board.collect(history=history), separators=(",", ":"),
                                  default=str).encode()
                await self._send(writer, 200, "application/json", body, None, head_only)
            elif url.path == "/metrics":
                body = generate_latest(self.registry)
                await self._send(writer, 200, PROMETHEUS_TYPE, body, None, head_only)
            elif url.path == "/history.json":
                code, kind, body = await self._history(url.query)
                await self._send(writer, code, kind, body, None, head_only)
            else:
                await self._send(writer, 404, "text/plain", b"not found: try /, /status or "
                                 b"/metrics\n", None, head_only)
        except (ConnectionError, asyncio.CancelledError):
            raise
        except Exception:
            log.exception("status endpoint: %s %s failed", method, url.path)
            await self._send(writer, 500, "text/plain", b"internal error (see the log)\n")

    async def _history(self, query: str) -> tuple[int, str, bytes]:
        """`/history.json?point=dev/p&since=-1h...`: read on a worker thread (a long range
        takes a while and must not hold the event loop)."""
        if self.history is None:
            return 404, "text/plain", b"point history is off ([history] enabled = false, or " \
                b"no state directory)\n"
        params: dict[str, str | list[str]] = dict(parse_qs(query))
        now_ms = int(time.time() * 1000)
        try:
            answer = await asyncio.to_thread(history_answer, self.history, params, now_ms)
        except HistoryRequestError as exc:
            return 400, "text/plain", f"{exc}\n".encode()
        except HistoryFileError as exc:
            return 503, "text/plain", f"{exc}\n".encode()
        return 200, "application/json", json.dumps(answer, separators=(",", ":")).encode()

    async def _authorized(self, head: bytes) -> bool:
        """Does the request carry Basic credentials of a user in the password file?"""
        users = self.users
        assert users is not None
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"authorization":
                found = basic_credentials(value)
                return found is not None and await check_password(users, *found)
        return False

    @staticmethod
    async def _send(writer: asyncio.StreamWriter, code: int, content_type: str, body: bytes,
                    headers: Mapping[str, str] | None = None, head_only: bool = False) -> None:
        lines = [
            f"HTTP/1.1 {code} {_REASONS.get(code, 'Error')}",
            f"Content-Type: {content_type}",
            f"Content-Length: {len(body)}",
            "Cache-Control: no-store",
            "X-Content-Type-Options: nosniff",
            "Connection: close",
            *(f"{name}: {value}" for name, value in (headers or {}).items()),
        ]
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
        if not head_only:
            writer.write(body)
        await writer.drain()
