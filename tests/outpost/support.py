"""Helpers of the operations tests: `outpost run` as a real process with a status endpoint and
an sd_notify socket, plain HTTP GETs, and a Modbus RTU-over-TCP device whose values move."""

from __future__ import annotations

import math
import os
import re
import shutil
import signal
import socket
import struct
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support.broker_proc import BrokerProcess, launch
from tests.support.rtu_device import RtuDevice, crc_bytes

ROOT = Path(__file__).resolve().parents[2]  # the repository
_STATUS_LOG = re.compile(r"status page, /status and /metrics on (https?://\S+)")

# Runs `outpost` with systemd-python hidden: the daemon must use its built-in senders.
HIDE_SYSTEMD = (
    "import sys; sys.modules['systemd'] = None; sys.modules['systemd.daemon'] = None; "
    "sys.modules['systemd.journal'] = None; from outpost.cli import main; "
    "sys.exit(main(sys.argv[1:]))"
)


@dataclass
class Outpost(BrokerProcess):
    """A running `outpost run` process with its config file and status endpoint."""

    status_url: str | None
    config_path: Path
    stdout: list[str] = field(default_factory=list)

    def url(self, path: str) -> str:
        assert self.status_url is not None, "status endpoint not started"
        return self.status_url.rstrip("/") + path

    def hup(self) -> None:
        self.process.send_signal(signal.SIGHUP)

    def write_config(self, text: str) -> None:
        self.config_path.write_text(text, encoding="utf-8")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 25.0) -> int:
        return super().stop(sig, timeout)


def start_outpost(
    workdir: Path,
    config_text: str = "",
    *extra_args: str,
    env: dict[str, str] | None = None,
    hide_systemd: bool = False,
    listen: str | None = "127.0.0.1:0",
    timeout: float = 20.0,
) -> Outpost:
    """`outpost run --listen LISTEN --config workdir/outpost.toml` (status on port 0);
    `listen=None`: the configured listeners."""
    workdir.mkdir(parents=True, exist_ok=True)
    config = workdir / "outpost.toml"
    if "[status]" not in config_text:
        config_text += '\n[status]\nbind = "127.0.0.1:0"\n'
    config.write_text(config_text, encoding="utf-8")
    base = [sys.executable, "-c", HIDE_SYSTEMD] if hide_systemd else [
        sys.executable, "-m", "outpost"]
    args = [*base, "--log-level", "DEBUG", "run", "--config", str(config), *extra_args]
    if listen is not None:
        args += ["--listen", listen]
    clean_env = {k: v for k, v in os.environ.items()
                 if k not in ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID",
                              "JOURNAL_STREAM", "INVOCATION_ID")}
    broker, lines = launch(args, workdir / "outpost.log", timeout, clean_env, env)
    # The status endpoint is bound before the listening lines are printed, and its address is
    # logged then (stdout has it after the last listening line).
    found = _STATUS_LOG.search(broker.log())
    status_url = found.group(1) if found else None
    return Outpost(broker.process, broker.host, broker.port, broker.log_path, status_url, config,
                   lines)


def closed_by_server(sock: socket.socket) -> bool:
    """Has the server closed this connection (without reading from it for the test)?"""
    sock.settimeout(0.0)
    try:
        return sock.recv(1, socket.MSG_PEEK) == b""
    except BlockingIOError:
        return False
    except ConnectionError:
        return True


def http_get(url: str, method: str = "GET", timeout: float = 10.0
             ) -> tuple[int, dict[str, str], bytes]:
    """(status, headers, body) of one request; no proxy."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    request = urllib.request.Request(url, method=method)
    try:
        with opener.open(request, timeout=timeout) as response:
            return response.status, dict(response.headers.items()), response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers.items()), exc.read()


class NotifySocket:
    """A datagram socket standing in for systemd's NOTIFY_SOCKET; collects every message."""

    def __init__(self) -> None:
        self.directory = tempfile.mkdtemp(prefix="sdn")  # short: sun_path is 108 bytes
        self.path = os.path.join(self.directory, "notify")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(self.path)
        self.sock.settimeout(0.1)
        self.messages: list[tuple[float, str]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                data = self.sock.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                return
            with self._lock:
                self.messages.append((time.monotonic(), data.decode()))

    def texts(self) -> list[str]:
        with self._lock:
            return [text for _, text in self.messages]

    def lines(self) -> list[str]:
        """Every `KEY=value` line received, in order."""
        return [line for text in self.texts() for line in text.split("\n")]

    def count(self, line: str) -> int:
        return self.lines().count(line)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2)
        self.sock.close()
        shutil.rmtree(self.directory, ignore_errors=True)


class MovingDevice(RtuDevice):
    """Modbus RTU-over-TCP units answering FC 3; the registers move with every request.

    Register 0 of unit u: 200 + 50 sin(n / 4) (n = requests so far) times 10; other registers: 0.
    Units not in `units` stay silent (the bridge takes them offline).
    """

    def __init__(self, units: tuple[int, ...] = (1,)) -> None:
        super().__init__("device")
        self.units = units
        self.requests = 0

    def answer(self, unit: int, address: int, count: int) -> bytes:
        if unit not in self.units:
            return b""
        self.requests += 1
        value = int(10 * (200 + 50 * math.sin(self.requests / 4)))
        registers = [value if address + i == 0 else 0 for i in range(count)]
        body = bytes((unit, 3, 2 * count)) + struct.pack(f">{count}H", *registers)
        return body + crc_bytes(body)


def bridge_config(port: int, devices: dict[str, int], poll: float = 0.1) -> str:
    """A `[bridge]` with one RTU-over-TCP line and a device (`name -> unit`) per entry."""
    text = f"""
[bridge]
diagnostics_interval = 0.3

[[bridge.buses]]
name = "line"
type = "rtu-over-tcp"
host = "127.0.0.1"
port = {port}
timeout = 0.15
retries = 0
quiet_after_timeout = 0.05
"""
    for name, unit in devices.items():
        text += f"""
[[bridge.devices]]
name = "{name}"
bus = "line"
unit_id = {unit}
address_base = 0
poll_interval = {poll}
report = "poll"
offline_after = 2
backoff_initial = 0.2
backoff_max = 0.5
points = [
  {{ name = "power", address = 0, type = "uint16", scale = 0.1, unit = "kW" }},
]
"""
    return text


def status_json(outpost: Outpost, history: bool = False) -> Any:
    import json

    code, _headers, body = http_get(outpost.url("/status" + ("?history=1" if history else "")))
    assert code == 200, body
    return json.loads(body)
