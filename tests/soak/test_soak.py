"""Soak: an hour of mixed load on a real `outpost run`, with the broker killed every ten minutes.

    make soak                                          # the full hour
    OUTPOST_SOAK_SECONDS=900 .venv/bin/python -m pytest -q -m soak tests/soak   # shorter

Load, all at once, each in its own thread:
- QoS 0, QoS 1 and QoS 2 publishers (clean sessions, reconnecting after every kill); the QoS 1
  publisher records every message number whose PUBACK it received;
- a persistent QoS 1 subscriber to the QoS 1 topic that comes and goes (connected for a few
  seconds, away for a few) and records what it receives;
- clean-session clients that connect, subscribe, receive a little and leave;
- a fuzzing client sending random bytes and mangled CONNECTs from 127.0.0.2;
- a slowloris client from 127.0.0.3 holding sockets that send a byte of CONNECT now and then;
- a subscriber to everything that never reads (a small receive buffer);
- the uplink forwarding the QoS 1 topic to a mosquitto that is stopped and started again
  every 90 s (flapping).
The broker gets SIGKILL every `OUTPOST_SOAK_KILL_EVERY` seconds (600) and is started again on
the same state directory. Every `OUTPOST_SOAK_SAMPLE` seconds (60) the test samples the
broker's RSS, its open files and the size of outpost.db and its WAL; the samples go to
`OUTPOST_SOAK_REPORT` (default: soak.json in the test's directory) and are printed.

Asserted: after the warm-up (the first two samples), the larger half of the run's samples are
no higher than the first half's maximum by more than 25 % + 16 MiB (RSS), 32 files, and
25 % + 8 MiB (database + WAL): flat; and at the end, once the load stops, the persistent
subscriber receives every QoS 1 message whose PUBACK the publisher got.
"""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from bench.procstat import rss_kib
from gateway.broker.codec import MQTT_5, Connect, Publish, encode
from tests.gateway.broker.e2e.helpers import RawClient
from tests.support.broker_proc import BrokerProcess, start_broker
from tests.support.mosquitto import Mosquitto, free_port, mosquitto_available

SECONDS = float(os.environ.get("OUTPOST_SOAK_SECONDS", "3600"))
SAMPLE_EVERY = float(os.environ.get("OUTPOST_SOAK_SAMPLE", "60"))
KILL_EVERY = float(os.environ.get("OUTPOST_SOAK_KILL_EVERY", "600"))
FLAP_EVERY = 90.0
WARMUP_SAMPLES = 2
MiB = 1 << 20

pytestmark = [pytest.mark.soak, pytest.mark.timeout(int(SECONDS) + 600)]


def config(cloud_port: int) -> str:
    return f"""
[limits]
exempt_sources = ["127.0.0.1"]
# per session: room for the persistent subscriber's absences (about 500 messages), while the
# subscriber that never reads hits the byte cap and has its oldest messages dropped
max_queued_messages = 100000
max_queued_bytes = 8388608
connect_timeout = 5
[uplink]
enabled = true
[[uplink.remotes]]
addresses = ["127.0.0.1:{cloud_port}"]
backoff_initial = 0.5
backoff_max = 5.0
[[uplink.forward]]
filter = "soak/q1"
"""


@dataclass
class Soak:
    """What the load threads share: the current broker, a stop flag, what was acknowledged."""

    broker: BrokerProcess
    stop: threading.Event = field(default_factory=threading.Event)
    acked: set[int] = field(default_factory=set)
    received: set[int] = field(default_factory=set)
    errors: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def client(self, version: int = 4, **kwargs: object) -> RawClient:
        return RawClient(self.broker.host, self.broker.port, version, timeout=5, **kwargs)

    def pause(self, seconds: float) -> None:
        self.stop.wait(seconds)


def forever(soak: Soak, name: str, body: Callable[[], None]) -> threading.Thread:
    """Run `body` again and again until the soak stops; broken connections (kills) are normal."""

    def loop() -> None:
        while not soak.stop.is_set():
            try:
                body()
            except (OSError, AssertionError):
                soak.pause(0.5)  # the broker was killed or closed us: come back
            except Exception as exc:  # a bug in the load itself: report it at the end
                soak.errors.append(f"{name}: {exc!r}")
                soak.pause(1.0)

    thread = threading.Thread(target=loop, name=f"soak-{name}", daemon=True)
    thread.start()
    return thread


def qos1_publisher(soak: Soak) -> Callable[[], None]:
    counter = iter(range(1, 1 << 62))
    pending: list[int] = []  # sent without a PUBACK yet: sent again after a reconnect

    def body() -> None:
        with soak.client() as pub:
            pub.connect("soak-pub1")
            while not soak.stop.is_set():
                number = pending[0] if pending else next(counter)
                if not pending:
                    pending.append(number)
                [ack] = pub.publish("soak/q1", number.to_bytes(8, "big") + b"x" * 200, qos=1)
                if ack[:2] == b"\x40\x02":
                    with soak.lock:
                        soak.acked.add(number)
                    pending.clear()
                soak.pause(0.02)

    return body


def other_publisher(soak: Soak, qos: int) -> Callable[[], None]:
    def body() -> None:
        with soak.client() as pub:
            pub.connect(f"soak-pub{qos}")
            while not soak.stop.is_set():
                pub.publish(f"soak/q{qos}", os.urandom(random.randint(1, 2000)), qos=qos)
                soak.pause(0.05)

    return body


def persistent_subscriber(soak: Soak, away: bool = True) -> Callable[[], None]:
    def body() -> None:
        with soak.client() as sub:
            sub.connect("soak-sub", clean=False)
            sub.subscribe(("soak/q1", 1))
            until = time.monotonic() + random.uniform(3, 10)
            while time.monotonic() < until or not away:
                try:
                    packet = sub.recv(timeout=1)
                except AssertionError as exc:
                    if "no packet" not in str(exc):
                        raise
                    if soak.stop.is_set():
                        return
                    continue
                sub.ack(packet)
                if isinstance(packet, Publish):
                    with soak.lock:
                        soak.received.add(int.from_bytes(packet.payload[:8], "big"))
            sub.disconnect()
        soak.pause(random.uniform(1, 6))

    return body


def clean_clients(soak: Soak) -> Callable[[], None]:
    def body() -> None:
        with soak.client(MQTT_5) as client:
            client.connect(f"soak-clean-{random.randrange(1000)}")
            client.subscribe(("soak/q0", 0))
            client.sync()
        soak.pause(0.2)

    return body


def fuzzer(soak: Soak) -> Callable[[], None]:
    good = encode(Connect("fuzz", 4, True, 30), 4)

    def body() -> None:
        sock = socket.socket()
        sock.settimeout(2)
        try:
            sock.bind(("127.0.0.2", 0))
            sock.connect((soak.broker.host, soak.broker.port))
            data = bytearray(good + os.urandom(random.randint(0, 300)))
            for _ in range(random.randint(1, 8)):
                data[random.randrange(len(data))] = random.randrange(256)
            sock.sendall(data)
            sock.recv(64)
        finally:
            sock.close()
        soak.pause(0.1)

    return body


def slowloris(soak: Soak) -> Callable[[], None]:
    def body() -> None:
        held: list[socket.socket] = []
        try:
            for _ in range(20):
                sock = socket.socket()
                sock.bind(("127.0.0.3", 0))
                sock.connect((soak.broker.host, soak.broker.port))
                held.append(sock)
            for byte in encode(Connect("slow", 4, True, 30), 4)[:6]:
                for sock in held:
                    sock.send(bytes((byte,)))
                soak.pause(1.0)
        finally:
            for sock in held:
                sock.close()

    return body


def never_reads(soak: Soak) -> Callable[[], None]:
    def body() -> None:
        with soak.client(rcvbuf=4096) as sub:
            sub.connect("soak-never-reads")
            sub.subscribe(("soak/#", 0))
            while not soak.stop.is_set() and not sub.eof:
                soak.pause(5)  # never reads; the broker drops or closes

    return body


def sample(broker: BrokerProcess, state: Path, started: float) -> dict[str, float]:
    pid = broker.process.pid
    db = state / "outpost.db"
    sizes = {p: p.stat().st_size if p.exists() else 0 for p in (db, Path(f"{db}-wal"))}
    return {
        "t": round(time.monotonic() - started),
        "rss_mib": round(rss_kib(pid) / 1024, 1),
        "open_files": len(os.listdir(f"/proc/{pid}/fd")),
        "db_mib": round(sizes[db] / MiB, 2),
        "wal_mib": round(sizes[Path(f"{db}-wal")] / MiB, 2),
    }


def flat(samples: list[dict[str, float]], key: str, factor: float, slack: float) -> str | None:
    steady = samples[WARMUP_SAMPLES:]
    if len(steady) < 4:
        return None
    half = len(steady) // 2
    before = max(s[key] for s in steady[:half])
    after = max(s[key] for s in steady[half:])
    if after > before * factor + slack:
        return f"{key} grew from {before} to {after} after the warm-up"
    return None


def test_soak(tmp_path: Path) -> None:
    if not mosquitto_available():
        pytest.skip("mosquitto is needed as the uplink's cloud broker")
    cloud = Mosquitto(tmp_path / "cloud", free_port())
    cloud.start()
    state = tmp_path / "state"
    runs = iter(range(1, 1000))

    def start() -> BrokerProcess:
        return start_broker(tmp_path / f"run{next(runs)}", config(cloud.port),
                            ("--state-dir", str(state)))

    soak = Soak(start())
    with soak.client() as sub:  # the session exists before the first QoS 1 message
        sub.connect("soak-sub", clean=False)
        sub.subscribe(("soak/q1", 1))
        sub.disconnect()
    loads = [qos1_publisher(soak), other_publisher(soak, 0), other_publisher(soak, 2),
             persistent_subscriber(soak), clean_clients(soak), fuzzer(soak), slowloris(soak),
             never_reads(soak)]
    threads = [forever(soak, f"load{n}", body) for n, body in enumerate(loads)]
    started = time.monotonic()
    samples: list[dict[str, float]] = []
    next_sample, next_kill, next_flap = started + SAMPLE_EVERY, started + KILL_EVERY, \
        started + FLAP_EVERY
    kills = flaps = 0
    report = Path(os.environ.get("OUTPOST_SOAK_REPORT") or tmp_path / "soak.json")
    try:
        while time.monotonic() < started + SECONDS:
            now = time.monotonic()
            if now >= next_sample:
                samples.append(sample(soak.broker, state, started))
                print("soak sample", json.dumps(samples[-1]), flush=True)
                report.write_text(json.dumps({"samples": samples, "kills": kills,
                                              "flaps": flaps}, indent=1))
                next_sample += SAMPLE_EVERY
            if now >= next_kill:
                soak.broker.stop(signal.SIGKILL)
                soak.broker = start()
                kills += 1
                next_kill += KILL_EVERY
            if now >= next_flap:
                if cloud.process is None:
                    cloud.start()
                else:
                    cloud.stop()
                flaps += 1
                next_flap += FLAP_EVERY
            time.sleep(0.5)
        soak.stop.set()
        for thread in threads:
            thread.join(30)
        # drain: the persistent subscriber stays until nothing more comes
        final = persistent_subscriber(soak, away=False)
        soak.stop.clear()
        waiter = threading.Timer(30.0, soak.stop.set)
        waiter.start()
        try:
            final()
        finally:
            waiter.cancel()
        lost = sorted(soak.acked - soak.received)
        report.write_text(json.dumps({
            "samples": samples, "kills": kills, "flaps": flaps, "acked": len(soak.acked),
            "received": len(soak.received), "lost": lost[:100], "errors": soak.errors,
        }, indent=1))
        print(f"soak: {len(samples)} samples, {kills} kills, {flaps} uplink flaps, "
              f"{len(soak.acked)} QoS 1 acknowledged, {len(lost)} of them not delivered; "
              f"report {report}", flush=True)
        assert not soak.errors, soak.errors
        assert not lost, f"{len(lost)} acknowledged QoS 1 messages not delivered: {lost[:20]}"
        problems = [p for p in (flat(samples, "rss_mib", 1.25, 16),
                                flat(samples, "open_files", 1.0, 32),
                                flat([{**s, "db": s["db_mib"] + s["wal_mib"]} for s in samples],
                                     "db", 1.25, 8)) if p]
        assert not problems, problems
    finally:
        soak.stop.set()
        soak.broker.stop(signal.SIGKILL)
        cloud.stop()
