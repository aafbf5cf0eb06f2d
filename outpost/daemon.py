"""Running under systemd: readiness, watchdog, status line, journald, reload and shutdown.

How this works:

- `Notifier` sends sd_notify messages: through systemd-python (`systemd.daemon.notify`) when it
  is installed, else through a few lines that write the datagram to `$NOTIFY_SOCKET`
  themselves (the protocol is one `KEY=value` per line). Without `$NOTIFY_SOCKET` (not started
  by systemd with `Type=notify`) every call is a no-op. Which path is used is logged once.
- `Daemon` is what `outpost/app.py` runs next to the broker. `start()` is called once
  the store
  is open and every listener is bound; it binds the status endpoint, then sends `READY=1` and a
  first `STATUS=`. A timer on the event loop itself sends `WATCHDOG=1` at half of
  `$WATCHDOG_USEC`, so a loop that is stuck (a blocking call, an endless callback) stops the
  pings and systemd restarts the service. Every `[status] history_interval` the status board
  takes a sample and `STATUS=` is refreshed when its text changed ("3 clients, devices 2/3
  online, uplink up, backlog 0, 1.5 msg/s in").
- SIGHUP: `RELOADING=1`, `Reloader.reload()` (outpost/reload.py), `READY=1`.
- `shutdown()` wraps the graceful stop: `STOPPING=1`, the status endpoint closes, the caller
  stops the bridge, the uplink and the server (which says DISCONNECT 0x8B to v5 clients,
  publishes wills and flushes the store) — all within `stop_timeout` seconds. Past that
  deadline a log line says what happened and `ShutdownTimeoutError` is raised (`outpost run` exits
  with status 1); a thread backstop ends the process if the loop itself is blocked.
- Logging: under systemd (`$JOURNAL_STREAM` is our stderr, or `$INVOCATION_ID` is set and the
  journal socket exists) records go to journald with structured fields; otherwise to stderr as
  before. Pass the fields with `extra=`: `log.info("...", extra={"client_id": cid, "topic": t})`
  becomes `CLIENT_ID=` / `TOPIC=` (also `device`, `listener`, `peer`), so
  `journalctl -u outpost CLIENT_ID=plc-7` finds one client's lines.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

from gateway.broker.contracts.hooks import BrokerHooks, HookChain
from gateway.broker.engine.broker import Broker
from outpost.config import Config, StatusConfig
from outpost.reload import Reloader, broker_reloader, hook_reloaders
from outpost.status import StatusBoard, summary_line
from outpost.status_http import StatusEndpoint, StatusServer, StoreFiles
from storage.history.reader import HistoryReader

log = logging.getLogger("outpost.daemon")

JOURNAL_SOCKET = "/run/systemd/journal/socket"
STOP_TIMEOUT = 20.0  # systemd's TimeoutStopSec (30 s in outpost.service) must be longer
BACKSTOP_GRACE = 5.0
# `extra=` attributes of a log record that become journal fields.
JOURNAL_FIELDS = {
    "client_id": "CLIENT_ID", "device": "DEVICE", "topic": "TOPIC", "listener": "LISTENER",
    "peer": "PEER", "console_user": "CONSOLE_USER", "console_action": "CONSOLE_ACTION",
}
_PRIORITY = {
    logging.CRITICAL: 2, logging.ERROR: 3, logging.WARNING: 4, logging.INFO: 6,
    logging.DEBUG: 7,
}

_announced = False


class ShutdownTimeoutError(Exception):
    """The graceful shutdown did not finish within its deadline."""


def systemd_python() -> tuple[ModuleType, ModuleType] | None:
    """`(systemd.daemon, systemd.journal)` when systemd-python is installed, else None.

    The first call logs which implementation is used, once per process.
    """
    global _announced
    try:  # systemd-python is optional (the `systemd` extra): imported where it is tried
        from systemd import daemon as sd_daemon  # noqa: PLC0415
        from systemd import journal as sd_journal  # noqa: PLC0415
    except ImportError:
        if not _announced:
            _announced = True
            log.info("systemd-python is not installed: using the built-in sd_notify and "
                     "journal senders")
        return None
    return sd_daemon, sd_journal


# -- sd_notify ---------------------------------------------------------------------------------


def _socket_address(path: str) -> str:
    return "\0" + path[1:] if path.startswith("@") else path


def notify_socket_send(path: str, text: str) -> bool:
    """Send one sd_notify datagram to `path` (`@name`: abstract namespace)."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
            sock.sendto(text.encode(), _socket_address(path))
    except OSError as exc:
        log.debug("sd_notify to %s failed: %s", path, exc)
        return False
    return True


class Notifier:
    """sd_notify, through systemd-python or the built-in sender; a no-op outside systemd."""

    def __init__(self, socket_path: str | None, send: Callable[[str], Any] | None = None,
                 backend: str = "builtin") -> None:
        self.socket_path = socket_path
        self.backend = backend
        self._send = send
        self.last_status: str | None = None

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Notifier:
        env = os.environ if environ is None else environ
        path = env.get("NOTIFY_SOCKET") or None
        modules = systemd_python()
        if modules is not None and environ is None:
            return cls(path, modules[0].notify, "systemd-python")
        return cls(path)

    @property
    def enabled(self) -> bool:
        return self.socket_path is not None

    def notify(self, *fields: str) -> None:
        for field in fields:
            if field.startswith("STATUS="):
                self.last_status = field[len("STATUS="):]
        if self.socket_path is None:
            return
        text = "\n".join(fields)
        if self._send is not None:
            self._send(text)
        else:
            notify_socket_send(self.socket_path, text)

    def status(self, text: str) -> None:
        """`STATUS=` (only when it changed)."""
        text = text.replace("\n", " ")
        if text != self.last_status:
            self.notify(f"STATUS={text}")


def watchdog_interval(environ: Mapping[str, str] | None = None) -> float | None:
    """Seconds between `WATCHDOG=1` pings (half of `$WATCHDOG_USEC`), or None when off."""
    env = os.environ if environ is None else environ
    usec = env.get("WATCHDOG_USEC", "")
    pid = env.get("WATCHDOG_PID", "")
    if not usec.isdigit() or int(usec) == 0:
        return None
    if pid and pid != str(os.getpid()):
        return None  # meant for another process (we were forked or exec'd by it)
    return int(usec) / 2 / 1e6


# -- journald ----------------------------------------------------------------------------------


def _journal_field(name: str, value: object) -> bytes:
    data = str(value).encode("utf-8", errors="replace")
    key = name.encode()
    if b"\n" in data:  # binary-safe form: name, newline, 64-bit LE length, data
        return key + b"\n" + len(data).to_bytes(8, "little") + data + b"\n"
    return key + b"=" + data + b"\n"


def journal_send_builtin(message: str, socket_path: str | None = None,
                         **fields: object) -> None:
    """Send one entry over journald's native protocol (what `systemd.journal.send` does)."""
    datagram = _journal_field("MESSAGE", message) + b"".join(
        _journal_field(name, value) for name, value in fields.items() if value is not None
    )
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
        sock.sendto(datagram, socket_path or JOURNAL_SOCKET)


class JournalHandler(logging.Handler):
    """Log records as journal entries with PRIORITY, LOGGER, CODE_* and our `extra=` fields."""

    def __init__(self, send: Callable[..., object], identifier: str = "outpost") -> None:
        super().__init__()
        self.send = send
        self.identifier = identifier

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = self.format(record)
            fields: dict[str, object] = {
                "PRIORITY": _PRIORITY.get(record.levelno, 6),
                "SYSLOG_IDENTIFIER": self.identifier,
                "LOGGER": record.name,
                "CODE_FILE": record.pathname,
                "CODE_LINE": record.lineno,
                "CODE_FUNC": record.funcName,
            }
            for attribute, name in JOURNAL_FIELDS.items():
                value = record.__dict__.get(attribute)
                if value is not None:
                    fields[name] = value
            self.send(message, **fields)
        except Exception:
            self.handleError(record)


def under_systemd(environ: Mapping[str, str] | None = None) -> bool:
    """True when stderr is connected to the journal (or we run as a systemd unit)."""
    env = os.environ if environ is None else environ
    stream = env.get("JOURNAL_STREAM", "")
    if stream:
        try:
            st = os.fstat(sys.stderr.fileno())
            device, inode = (int(part) for part in stream.split(":", 1))
        except (OSError, ValueError, AttributeError):
            pass
        else:
            if (st.st_dev, st.st_ino) == (device, inode):
                return True
    return bool(env.get("INVOCATION_ID")) and Path(JOURNAL_SOCKET).exists()


def setup_logging(level: int) -> str:
    """Send logs to journald when under systemd; returns "journal" or "stderr"."""
    if not under_systemd():
        return "stderr"
    modules = systemd_python()
    send: Callable[..., object] = journal_send_builtin if modules is None else modules[1].send
    handler = JournalHandler(send)
    handler.setFormatter(logging.Formatter("%(message)s"))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    return "journal"


# -- the daemon --------------------------------------------------------------------------------


class Daemon:
    """Notify, watchdog, reload, status endpoint and shutdown deadline around one broker."""

    def __init__(
        self,
        config: Config,
        broker: Broker,
        reload_config: Callable[[], Config] | None = None,
        notifier: Notifier | None = None,
        stop_timeout: float = STOP_TIMEOUT,
        hard_exit: bool = False,
    ) -> None:
        self.config = config
        self.broker = broker
        self.loop = asyncio.get_running_loop()
        self.notifier = notifier or Notifier.from_env()
        self.stop_timeout = stop_timeout
        self.hard_exit = hard_exit
        self.reloader = Reloader(config, reload_config)
        self.reloader.register("broker", broker_reloader(broker), sections=("limits", "sys"))
        for name, callback in hook_reloaders(broker):
            self.reloader.register(name, callback)
        status = config.status
        self.board = StatusBoard(broker, self.loop.time, time.time, status.history,
                                 status.history_interval)
        self.board.add_provider("service", _ServiceStatus(self))
        found = _store_file(broker.hooks)
        if found is not None:
            self.board.add_provider("store", StoreFiles(found[0], found[1],
                                                        config.storage.durability))
        self.http: StatusEndpoint | None = None
        # What serves [status]: the status endpoint, or the console with it (outpost/app.py).
        self.endpoint: Callable[[StatusBoard, StatusConfig], StatusEndpoint] = \
            StatusServer.for_config
        self.status_address: tuple[str, int] | None = None
        self.history: HistoryReader | None = None  # point history (outpost/history.py)
        self.watchdog_every = watchdog_interval()
        self.watchdog_pings = 0
        self._watchdog: asyncio.TimerHandle | None = None
        self._sampler: asyncio.Task[None] | None = None
        self._backstop: threading.Timer | None = None

    # -- start ---------------------------------------------------------------------------

    def install_signals(self) -> None:
        """SIGHUP reloads (SIGINT/SIGTERM are handled by the caller)."""
        self.loop.add_signal_handler(signal.SIGHUP, self.reload)

    async def start(self, listeners: list[str]) -> None:
        """Everything is bound and the store is open: status endpoint, READY=1, watchdog.

        `listeners`: what is bound, as shown to people ("HOST:PORT", "HOST:PORT (tls)", ...).
        """
        board = self.board
        board.listeners = list(listeners)
        status = self.config.status
        watch = status.watch_topics
        if watch is None:  # a link takes a client slot: only when there is something to see
            bridge = self.config.bridge
            watch = bool(bridge.device_configs()) and "devices" not in board.providers
            watch = watch or (self.config.uplink.enabled and "uplink" not in board.providers)
        if watch:
            board.watch_topics(self.config.bridge.prefix)
        if status.enabled:
            server = self.endpoint(board, status)
            host, port = status.host, status.port
            try:
                self.status_address = await server.start(host, port)
            except OSError as exc:
                log.warning("status endpoint not started: cannot bind %s:%d: %s", host, port,
                            exc.strerror or exc)
            else:
                self.http = server
                shown = f"[{host}]" if ":" in host else host
                scheme = "https" if server.tls is not None else "http"
                board.status_url = f"{scheme}://{shown}:{self.status_address[1]}/"
                log.info("status page, /status and /metrics on %s", board.status_url)
        if self.watchdog_every is not None:
            log.info("watchdog: pinging systemd every %.1f s", self.watchdog_every)
            self._watchdog = self.loop.call_later(self.watchdog_every, self._ping)
        first = board.sample()
        self._sampler = self.loop.create_task(self._sample_loop(), name="status-sampler")
        self.notifier.notify("READY=1", f"STATUS={summary_line(first)}")
        if self.notifier.enabled:
            log.info("ready: told systemd (%s)", self.notifier.backend)

    def _ping(self) -> None:
        self.watchdog_pings += 1
        self.notifier.notify("WATCHDOG=1")
        if self.watchdog_every is not None:
            self._watchdog = self.loop.call_later(self.watchdog_every, self._ping)

    async def _sample_loop(self) -> None:
        interval = self.board.sample_interval
        while True:
            await asyncio.sleep(interval)
            try:
                status = self.board.sample()
                self.notifier.status(summary_line(status))
            except Exception:
                log.exception("status sample failed")

    # -- reload --------------------------------------------------------------------------

    def reload(self) -> bool:
        """SIGHUP: re-read the configuration and apply what can change live."""
        log.info("reload requested (SIGHUP)")
        self.notifier.notify("RELOADING=1")
        try:
            ok = self.reloader.reload()
        finally:
            self.notifier.notify("READY=1")
        self.config = self.reloader.config
        return ok

    # -- shutdown ------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def shutdown(self) -> AsyncIterator[None]:
        """`async with daemon.shutdown(): <stop the parts>` — STOPPING=1 and the deadline."""
        self.notifier.notify("STOPPING=1", "STATUS=stopping")
        log.info("shutting down (deadline %g s)", self.stop_timeout)
        if self.hard_exit:
            self._backstop = threading.Timer(self.stop_timeout + BACKSTOP_GRACE, _backstop_exit,
                                             (self.stop_timeout + BACKSTOP_GRACE,))
            self._backstop.daemon = True
            self._backstop.start()
        started = self.loop.time()
        try:
            async with asyncio.timeout(self.stop_timeout):
                await self._stop_own()
                yield
        except TimeoutError:
            log.error("shutdown did not finish within %g s: giving up (exit status 1); "
                      "unflushed state is recovered from the store's log at the next start",
                      self.stop_timeout)
            raise ShutdownTimeoutError(self.stop_timeout) from None
        finally:
            if self._watchdog is not None:
                self._watchdog.cancel()
            if self._backstop is not None:
                self._backstop.cancel()
        log.info("stopped cleanly in %.2f s", self.loop.time() - started)

    async def _stop_own(self) -> None:
        if self._sampler is not None:
            self._sampler.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sampler
            self._sampler = None
        if self.http is not None:
            await self.http.close()
            self.http = None
        self.board.close()


def _store_file(hooks: BrokerHooks) -> tuple[Path, BrokerHooks] | None:
    """(database path, hook) of the hook that keeps a file, also inside a `HookChain`."""
    if isinstance(hooks, HookChain):
        for member in hooks.hooks:
            found = _store_file(member)
            if found is not None:
                return found
        return None
    path = getattr(hooks, "path", None)
    return (path, hooks) if isinstance(path, Path) else None


def _backstop_exit(seconds: float) -> None:
    logging.getLogger("outpost.daemon").critical(
        "event loop blocked: shutdown still not done after %.0f s, exiting now", seconds)
    logging.shutdown()
    os._exit(1)


class _ServiceStatus:
    """The "service" section: how the daemon itself is doing."""

    def __init__(self, daemon: Daemon) -> None:
        self.daemon = daemon

    def status(self) -> dict[str, Any]:
        daemon = self.daemon
        return {
            "pid": os.getpid(),
            "systemd": daemon.notifier.enabled,
            "notify": daemon.notifier.backend,
            "watchdog_s": daemon.watchdog_every,
            "watchdog_pings": daemon.watchdog_pings,
            "reloads": daemon.reloader.reloads,
            "reload_failures": daemon.reloader.failures,
        }
