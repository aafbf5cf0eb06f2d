"""Shared parts of the storage benchmarks: brokers as processes, raw clients, /proc readings.

Theory of operation: each benchmark starts the broker under test as its own process (outpost
with `--state-dir`, or mosquitto with a generated configuration), optionally pinned to CPU 0,
and drives it with raw-socket clients in forked processes pinned to the other CPUs, so the
Python load generator does not share a core with the broker. Figures come from the clients
(acknowledged messages) and from /proc of the broker (write_bytes, VmRSS). Every client uses
pre-encoded packets (`bench.wire`, independent of `gateway.broker.codec`).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from bench import wire
from bench.compare import free_port

ROOT = Path(__file__).resolve().parents[2]
MOSQUITTO = "/usr/sbin/mosquitto"
_LISTENING = re.compile(r"outpost: listening on ([0-9.]+):(\d+)")


@dataclass
class Broker:
    """A broker process under test."""

    name: str
    process: subprocess.Popen[bytes]
    port: int
    workdir: Path
    started: float  # time.monotonic() when the process was spawned
    ready: float  # when it first accepted an MQTT connection

    @property
    def pid(self) -> int:
        return self.process.pid

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> int:
        if self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode


def taskset(cpu: str | None) -> list[str]:
    if cpu is None or shutil.which("taskset") is None:
        return []
    return ["taskset", "-c", cpu]


def pin_self(cpus: set[int] | None) -> None:
    if cpus:
        with contextlib.suppress(OSError):
            os.sched_setaffinity(0, cpus)


def wait_connectable(port: int, timeout: float) -> float:
    """Wait until an MQTT CONNECT is answered; returns time.monotonic() of that moment."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                s.sendall(wire.connect("bench-probe"))
                if s.recv(4) == wire.CONNACK_ACCEPTED:
                    return time.monotonic()
        except OSError:
            time.sleep(0.01)
    raise RuntimeError(f"no broker answering on port {port}")


def start_outpost(
    workdir: Path, state_dir: Path, config: str = "", cpu: str | None = "0",
    extra: tuple[str, ...] = (), timeout: float = 600.0, tuning: tuple[str, ...] = (),
) -> Broker:
    """`python -m outpost run` on a free port with `--state-dir` (and an optional TOML).

    `tuning` (e.g. `("--page-size", "1024")`) runs it through `bench.storage.launch`.
    """
    workdir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    entry = ["-m", "bench.storage.launch", *tuning, "--"] if tuning else ["-m", "outpost"]
    args = [*taskset(cpu), sys.executable, *entry, "--log-level", "WARNING", "run",
            "--listen", f"127.0.0.1:{port}", "--state-dir", str(state_dir), *extra]
    if config:
        path = workdir / "outpost.toml"
        path.write_text(config, encoding="utf-8")
        args += ["--config", str(path)]
    log = (workdir / "outpost.log").open("wb")
    started = time.monotonic()
    process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=log, cwd=ROOT)
    log.close()
    try:
        ready = wait_connectable(port, timeout)
    except RuntimeError:
        process.kill()
        raise RuntimeError((workdir / "outpost.log").read_text()) from None
    return Broker("outpost", process, port, workdir, started, ready)


def start_mosquitto(workdir: Path, conf: str, cpu: str | None = "0") -> Broker:
    """mosquitto with `conf` (a listener line is added)."""
    workdir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    path = workdir / "mosquitto.conf"
    # As root, mosquitto drops to user "mosquitto", which could not write its database here.
    user = "user root\n" if os.geteuid() == 0 else ""
    path.write_text(f"listener {port} 127.0.0.1\nallow_anonymous true\n{user}{conf}",
                    encoding="utf-8")
    log = (workdir / "mosquitto.log").open("wb")
    started = time.monotonic()
    process = subprocess.Popen([*taskset(cpu), MOSQUITTO, "-c", str(path)],
                               stdout=log, stderr=subprocess.STDOUT, cwd=workdir)
    log.close()
    ready = wait_connectable(port, 30)
    return Broker("mosquitto", process, port, workdir, started, ready)


def write_bytes(pid: int) -> int:
    """Bytes this process caused to be written to storage (/proc/PID/io write_bytes)."""
    with open(f"/proc/{pid}/io", encoding="ascii") as f:
        for line in f:
            if line.startswith("write_bytes:"):
                return int(line.split()[1])
    raise RuntimeError("no write_bytes")


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


class Client:
    """A blocking raw MQTT 3.1.1 client over one socket."""

    def __init__(self, port: int, client_id: str, clean: bool = True) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=60)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock.sendall(wire.connect(client_id, clean=clean))
        self.buf = bytearray()
        first = self.read_packet()
        if bytes(first[:2]) != b"\x20\x02" or first[3] != 0:
            raise RuntimeError(f"CONNECT refused: {bytes(first).hex()}")
        self.session_present = bool(first[2] & 1)

    def read_packet(self) -> bytearray:
        while True:
            found = wire.split_packet(self.buf, 0)
            if found is not None:
                end = found[2]
                packet = self.buf[:end]
                del self.buf[:end]
                return packet
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                raise ConnectionError("closed by the broker")
            self.buf += chunk

    def subscribe(self, topic_filter: str, qos: int) -> None:
        self.sock.sendall(wire.subscribe(1, topic_filter, qos))
        while (self.read_packet()[0] >> 4) != wire.SUBACK:
            pass

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.sendall(wire.DISCONNECT)
        self.sock.close()


def prepare_offline_sessions(port: int, prefix: str, count: int, topic_filter: str,
                             qos: int = 1) -> None:
    """Create `count` persistent sessions subscribed to `topic_filter`, then go offline."""
    for n in range(count):
        c = Client(port, f"{prefix}{n}", clean=False)
        c.subscribe(topic_filter, qos)
        c.close()


def publisher_loop(port: int, client_id: str, topic: str, payload: bytes, window: int,
                   rate: float, acked: object, stop: object, cpus: set[int] | None) -> None:
    """A QoS 1 publisher process: keeps `window` in flight, counts PUBACKs in `acked`.

    `rate` > 0 paces sends on an absolute schedule (msg/s); 0 sends as fast as acks return.
    `acked` is a multiprocessing Value('q'), `stop` an Event.
    """
    pin_self(cpus)
    c = Client(port, client_id)
    size, pid_offset, _ = wire.publish_layout(topic, len(payload), 1)
    ring = b"".join(wire.publish(topic, payload, 1, pid) for pid in range(1, 65536))
    sock = c.sock
    sock.setblocking(True)
    next_pid = 1
    in_flight = 0
    pending = bytearray()
    start = time.monotonic()
    sent = 0
    while not stop.is_set():  # type: ignore[attr-defined]
        allowed = window - in_flight
        if rate > 0:
            due = int((time.monotonic() - start) * rate) - sent
            allowed = min(allowed, due)
        if allowed > 0:
            n = min(allowed, 65536 - next_pid)
            sock.sendall(ring[(next_pid - 1) * size:(next_pid - 1 + n) * size])
            next_pid = next_pid + n if next_pid + n <= 65535 else 1
            in_flight += n
            sent += n
        sock.settimeout(0.002 if rate > 0 else 1.0)
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            continue
        except OSError:
            break
        if not chunk:
            break
        pending += chunk
        acks = len(pending) // 4
        if acks:
            del pending[: acks * 4]
            in_flight -= acks
            with acked.get_lock():  # type: ignore[attr-defined]
                acked.value += acks  # type: ignore[attr-defined]
    c.close()
    _ = pid_offset


def ack_publishes(buf: bytearray) -> tuple[int, list[bytes]]:
    """Take the complete packets off the front of `buf`: (PUBLISHes among them, the PUBACKs
    their QoS 1 ones need). A partial packet stays in `buf` for the next read."""
    publishes = 0
    acks: list[bytes] = []
    pos = 0
    while (found := wire.split_packet(buf, pos)) is not None:
        first, body, pos = found
        if first >> 4 == wire.PUBLISH:
            publishes += 1
            if (first >> 1) & 3:
                topic_len = u16(bytes(buf[body:body + 2]), 0)
                acks.append(wire.puback(u16(bytes(buf), body + 2 + topic_len)))
    del buf[:pos]
    return publishes, acks


def count_pubacks(data: bytes) -> int:
    return sum(1 for first, _b, _e in wire.iter_packets(data) if first >> 4 == wire.PUBACK)


@contextlib.contextmanager
def timed(label: str) -> Iterator[None]:
    t0 = time.perf_counter()
    yield
    print(f"  {label}: {time.perf_counter() - t0:.2f} s", flush=True)


def u16(data: bytes, offset: int) -> int:
    return int(struct.unpack_from(">H", data, offset)[0])


def report(result: dict[str, object], path: Path | None) -> None:
    """Print a benchmark's figures as one JSON line, and write them to `path` (`--json`)."""
    print(json.dumps(result), flush=True)
    if path:
        path.write_text(json.dumps(result, indent=2))
