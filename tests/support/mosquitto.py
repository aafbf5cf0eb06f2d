"""A real mosquitto broker for tests, on a free 127.0.0.1 port with a generated config.

How this works: :func:`start_mosquitto` writes a config file into a temporary directory
(``listener PORT 127.0.0.1``, anonymous access, optional persistence), starts
``/usr/sbin/mosquitto -c`` as a child process and waits until the port accepts TCP
connections. :class:`Mosquitto` stops it (SIGTERM, then SIGKILL) and can restart it on
the same port, which is how tests kill the "cloud broker" mid-stream.

Used as a context manager::

    with start_mosquitto(tmp_path) as broker:
        connect(broker.host, broker.port)
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

MOSQUITTO = os.environ.get("MOSQUITTO", shutil.which("mosquitto") or "/usr/sbin/mosquitto")


def mosquitto_available() -> bool:
    """True when a mosquitto binary exists (tests skip otherwise)."""
    return Path(MOSQUITTO).exists()


def free_port() -> int:
    """A TCP port that was free on 127.0.0.1 a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for_port(host: str, port: int, timeout: float = 10.0) -> None:
    """Block until ``host:port`` accepts a TCP connection or raise TimeoutError."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise TimeoutError(f"nothing listens on {host}:{port}") from None
            time.sleep(0.05)


@dataclass
class Mosquitto:
    """A running mosquitto child process and how to reach it."""

    workdir: Path
    port: int
    persistence: bool = False
    extra_config: tuple[str, ...] = ()
    host: str = "127.0.0.1"
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def config_path(self) -> Path:
        return self.workdir / "mosquitto.conf"

    @property
    def log_path(self) -> Path:
        return self.workdir / "mosquitto.log"

    def write_config(self) -> None:
        lines = [
            f"listener {self.port} {self.host}",
            "allow_anonymous true",
            f"persistence {'true' if self.persistence else 'false'}",
            f"persistence_location {self.workdir}/",
            "log_dest stderr",
            "log_type error",
            "log_type warning",
            # Started as root (CI), mosquitto drops to the user `mosquitto`, which cannot write
            # its persistence file into a root-owned temporary directory: the "persistent"
            # broker would come back from a restart empty.
            # (Unless the caller names the user: mosquitto refuses a second `user` line.)
            *(["user root"] if os.geteuid() == 0 and not any(
                line.startswith("user ") for line in self.extra_config) else []),
            *self.extra_config,
        ]
        self.config_path.write_text("\n".join(lines) + "\n")

    def start(self) -> None:
        """Start (or restart) the broker and wait until it listens."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.write_config()
        log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            [MOSQUITTO, "-c", str(self.config_path)],
            stdout=log,
            stderr=log,
            cwd=self.workdir,
        )
        log.close()
        try:
            wait_for_port(self.host, self.port)
        except TimeoutError:
            self.stop()
            raise RuntimeError(f"mosquitto did not start: {self.log_path.read_text()}") from None

    def stop(self, sig: int = signal.SIGTERM) -> None:
        """Stop the broker with ``sig`` (SIGKILL simulates a crash)."""
        proc, self.process = self.process, None
        stop_child(proc, sig, grace=10)


def stop_child(proc: subprocess.Popen[bytes] | None, sig: int, grace: float) -> None:
    """Send `sig` to a child broker and reap it; killed if it is still there after `grace`
    seconds. Nothing to do for None (never started, or stopped already)."""
    if proc is None:
        return
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(sig)
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


@contextlib.contextmanager
def start_mosquitto(
    workdir: Path, *, persistence: bool = False, extra_config: tuple[str, ...] = ()
) -> Iterator[Mosquitto]:
    """Run a mosquitto on a free port for the duration of the ``with`` block."""
    broker = Mosquitto(
        workdir=workdir, port=free_port(), persistence=persistence, extra_config=extra_config
    )
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()
