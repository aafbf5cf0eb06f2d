"""Alarm transitions over `kill -9`: none may be lost.

How this works: a pymodbus simulator holds a temperature that a driver thread moves up and
down through an alarm's limit (every `--period` s); `outpost run` polls it (state directory,
durability "full") and raises and clears the alarm; a paho subscriber with a persistent
session (QoS 1, clean session off) counts every `alarms/<name>/event`. `--kills` times, at a
random moment, the gateway is killed with SIGKILL and started again at once. At the end it is
stopped gracefully and its journal (`alarms.sqlite` in the state directory) lists every
transition the gateway made, numbered 1..N per alarm. Lost = the journal's transitions no event
carried; the run also checks that the numbers have no gap and that each event starts where the
one before it ended (a chain from `normal`): what the value sequence implies.

    .venv/bin/python -m bench.alarms_kill --kills 20
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt

from bench.bridge.simulator import Simulator

CONFIG = """gateway_id = "kill-test"

[storage]
durability = "full"

[bridge]
diagnostics_interval = 0

[[bridge.buses]]
name = "line"
type = "tcp"
host = "127.0.0.1"
port = {port}

[[bridge.devices]]
name = "boiler"
bus = "line"
unit_id = 1
address_base = 0
poll_interval = 0.05
points = [{{ name = "temp", address = 0, type = "int16" }}]

[[alarms.rules]]
name = "hot"
point = "boiler/temp"
kind = "high"
limit = 50
deadband = 5
"""
LISTENING = re.compile(r"outpost: listening on 127\.0\.0\.1:(\d+)")


@dataclass
class Result:
    kills: int
    journal: list[tuple[int, str, str]] = field(default_factory=list)  # (number, from, to)
    seen: dict[int, dict[str, Any]] = field(default_factory=dict)  # number -> event
    duplicates: int = 0

    @property
    def lost(self) -> list[int]:
        return [n for n, _, _ in self.journal if n not in self.seen]

    @property
    def gaps(self) -> list[int]:
        numbers = [n for n, _, _ in self.journal]
        return sorted(set(range(1, max(numbers, default=0) + 1)) - set(numbers))

    @property
    def broken_chain(self) -> list[int]:
        """Numbers whose `from` is not the `to` of the transition before them."""
        broken, previous = [], "normal"
        for number in sorted(self.seen):
            event = self.seen[number]
            if event["from"] != previous:
                broken.append(number)
            previous = event["to"]
        return broken


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Gateway:
    """`outpost run` in a work folder, on a fixed MQTT port."""

    def __init__(self, workdir: Path, modbus_port: int) -> None:
        self.workdir = workdir
        self.port = free_port()
        self.config = workdir / "outpost.toml"
        self.config.write_text(CONFIG.format(port=modbus_port), encoding="utf-8")
        self.process: subprocess.Popen[str] | None = None

    def start(self, timeout: float = 20.0) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "outpost", "run", "--config", str(self.config),
             "--state-dir", str(self.workdir / "state"), "--listen", f"127.0.0.1:{self.port}"],
            stdout=subprocess.PIPE, stderr=(self.workdir / "outpost.log").open("a"), text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"})
        assert self.process.stdout is not None
        deadline = time.monotonic() + timeout
        for line in self.process.stdout:
            if LISTENING.search(line):
                threading.Thread(target=self._drain, daemon=True).start()
                return
            if time.monotonic() > deadline:
                break
        raise RuntimeError(f"outpost did not start (see {self.workdir / 'outpost.log'})")

    def _drain(self) -> None:
        assert self.process is not None and self.process.stdout is not None
        for _ in self.process.stdout:
            pass

    def kill(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()

    def stop(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)
        self.process.wait(30)


class Subscriber:
    """A persistent QoS 1 session on `alarms/+/event`."""

    def __init__(self, port: int) -> None:
        self.events: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="alarm-counter",
                                  clean_session=False)
        self.client.on_connect = self._connected
        self.client.on_message = self._message
        self.client.reconnect_delay_set(0.05, 0.2)
        self.client.connect("127.0.0.1", port)
        self.client.loop_start()

    def _connected(self, client: mqtt.Client, userdata: Any, flags: Any, reason: Any,
                   properties: Any) -> None:
        client.subscribe("alarms/+/event", 1)

    def _message(self, client: mqtt.Client, userdata: Any, message: mqtt.MQTTMessage) -> None:
        with self.lock:
            self.events.append(json.loads(message.payload))

    def count(self) -> int:
        with self.lock:
            return len(self.events)

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


def journal(state: Path) -> list[tuple[int, str, str]]:
    db = sqlite3.connect(state / "alarms.sqlite")
    try:
        rows = db.execute("SELECT body FROM transition WHERE alarm = 'hot' ORDER BY number")
        return [(b["number"], b["from"], b["to"]) for b in (json.loads(r[0]) for r in rows)]
    finally:
        db.close()


def run(kills: int, workdir: Path, seed: int = 1, period: float = 0.25,
        log: Any = None) -> Result:
    """Drive the value, kill the gateway `kills` times, and count (see the module's text)."""
    rng = random.Random(seed)
    simulator = Simulator((1,), "tcp", size=4)
    modbus = simulator.start()
    simulator.set_registers(1, "holding", 0, [20])
    gateway = Gateway(workdir, modbus)
    stop = threading.Event()

    def drive() -> None:
        high = False
        while not stop.wait(period * rng.uniform(0.5, 1.5)):
            high = not high
            simulator.set_registers(1, "holding", 0, [80 if high else 20])

    driver = threading.Thread(target=drive, daemon=True)
    gateway.start()
    subscriber = Subscriber(gateway.port)
    result = Result(kills)
    try:
        driver.start()
        for index in range(kills):
            time.sleep(rng.uniform(0.3, 2.0))  # a random moment: mid-poll, mid-commit, ...
            gateway.kill()
            gateway.start()
            if log:
                print(f"kill {index + 1}/{kills}: {subscriber.count()} event(s) so far",
                      file=log, flush=True)
        time.sleep(1.0)
        stop.set()
        driver.join()
        simulator.set_registers(1, "holding", 0, [20])
        time.sleep(1.0)  # the last clear, published and delivered
        gateway.stop()
        result.journal = journal(workdir / "state")
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # every journalled one, or give up: lost
            seen = {e["transition"] for e in list(subscriber.events) if e["alarm"] == "hot"}
            if all(n in seen for n, _, _ in result.journal):
                break
            time.sleep(0.05)
    finally:
        stop.set()
        subscriber.close()
        if gateway.process is not None and gateway.process.poll() is None:
            gateway.kill()
        simulator.stop()
    for event in subscriber.events:
        if event["alarm"] != "hot":
            continue
        if event["transition"] in result.seen:
            result.duplicates += 1
        result.seen[event["transition"]] = event
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--period", type=float, default=0.25,
                        help="seconds between two moves of the value (about)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="alarms-kill-") as folder:
        started = time.monotonic()
        result = run(args.kills, Path(folder), args.seed, args.period, sys.stderr)
        took = time.monotonic() - started
    print(f"kills: {result.kills} (SIGKILL, seed {args.seed}), {took:.0f} s")
    print(f"transitions in the journal: {len(result.journal)} "
          f"(numbers 1..{max((n for n, _, _ in result.journal), default=0)}, "
          f"gaps: {result.gaps or 'none'})")
    print(f"seen by the subscriber: {len(result.seen)} distinct, "
          f"{result.duplicates} duplicate(s) (published again after a kill)")
    print(f"chain from normal unbroken: {not result.broken_chain} "
          f"{result.broken_chain or ''}".rstrip())
    print(f"lost: {len(result.lost)} {result.lost or ''}".rstrip())
    ok = not result.lost and not result.gaps and not result.broken_chain and result.journal
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
