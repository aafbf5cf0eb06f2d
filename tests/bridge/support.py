"""Real peers for the bridge tests: socat pty pairs, a simulator process, an MQTT watcher.

- `SocatPair`: `socat pty,raw,echo=0,link=A pty,raw,echo=0,link=B`; `stop()` is unplugging the
  cable (both ptys vanish), `start()` again is plugging it back in under the same names.
- `SimulatorProcess`: `python -m bench.bridge.simulator` on a fixed port, to be killed with
  SIGKILL and started again.
- `Watcher`: a paho-mqtt client subscribed to `devices/#` that keeps every message and answers
  "the latest payload of topic X" and "wait until X satisfies P" questions.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.conftest import require
from tests.gateway.broker.e2e.helpers import PahoClient, wait_for
from tests.support.broker_proc import BrokerProcess

ROOT = Path(__file__).resolve().parents[2]



class SocatPair:
    """Two linked pseudo-terminals under stable names."""

    def __init__(self, directory: Path, name: str = "tty") -> None:
        self.a = directory / f"{name}-a"
        self.b = directory / f"{name}-b"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> SocatPair:
        socat = require("socat")
        self.process = subprocess.Popen(
            [socat, "-d", "-d", f"pty,raw,echo=0,link={self.a}", f"pty,raw,echo=0,link={self.b}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for(lambda: self.a.exists() and self.b.exists(), message="socat ptys not created")
        return self

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            self.process.wait(10)
        self.process = None
        wait_for(lambda: not self.a.exists(), message="socat did not remove its pty link")


class SimulatorProcess:
    """The pymodbus simulator as a process that can be killed."""

    def __init__(self, port: int, units: str = "1", framer: str = "tcp") -> None:
        self.port, self.units, self.framer = port, units, framer
        self.process: subprocess.Popen[str] | None = None

    def start(self) -> SimulatorProcess:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "bench.bridge.simulator", "--port", str(self.port),
             "--units", self.units, "--framer", self.framer, "--size", "100"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=ROOT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"})
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        assert "listening" in line, f"simulator did not start: {line!r}"
        return self

    def kill(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait(10)
            self.process = None


class Watcher(PahoClient):
    """Every message under devices/#, with helpers to wait for values."""

    def __init__(self, broker: BrokerProcess) -> None:
        super().__init__(broker)
        self.connect()
        self.subscribe("devices/#", 1)

    def __enter__(self) -> Watcher:
        return self

    def payloads(self, topic: str) -> list[bytes]:
        return [m.payload for m in self.messages if m.topic == topic]

    def latest(self, topic: str) -> Any:
        found = self.payloads(topic)
        if not found:
            return None
        try:
            return json.loads(found[-1])
        except ValueError:
            return found[-1].decode()

    def wait(self, topic: str, predicate: Callable[[Any], bool] = lambda v: v is not None,
             timeout: float = 10.0) -> Any:
        def check() -> Any:
            value = self.latest(topic)
            return value if value is not None and predicate(value) else None

        return wait_for(check, timeout, message=f"{topic}: last value {self.latest(topic)!r}")

    def set(self, topic: str, ident: object, value: object, timeout: float = 10.0) -> Any:
        """Publish a write and wait for its result."""
        before = len(self.payloads(topic + "/set/result"))
        self.publish(topic + "/set", json.dumps({"id": ident, "value": value}).encode(), 1)
        wait_for(lambda: len(self.payloads(topic + "/set/result")) > before, timeout,
                 message=f"no result for {topic}/set")
        return json.loads(self.payloads(topic + "/set/result")[-1])


def wait_seconds(seconds: float) -> None:
    """A pause during which the bridge keeps working (not a timing assertion)."""
    time.sleep(seconds)
