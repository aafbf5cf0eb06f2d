"""Java MQTT brokers as cloud brokers of the tests: moquette 0.17 and HiveMQ CE (embedded).

How this works: `make java-packages` copies each broker and its dependencies from Maven Central
into `tests/support/cloud_brokers/<kind>/lib/` (each kind has its own pom.xml and class path:
moquette logs through reload4j, HiveMQ through logback, and the two bindings cannot share one).
A `JavaBroker` runs one as a child process on a free loopback port, with its persistence in its
work folder, so `stop()` then `start()` is a broker restart that keeps sessions and queued
messages, as a cloud broker's restart does. moquette starts from its `io.moquette.broker.Server`
with a `config/moquette.conf`; HiveMQ from `HiveMQCloudBroker.java` (Java's source launcher:
no build step), which adds the security extension HiveMQ CE needs to let clients in.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.support.mosquitto import free_port, stop_child, wait_for_port

HERE = Path(__file__).resolve().parent / "cloud_brokers"
KINDS = ("moquette", "hivemq")


def lib_dir(kind: str) -> Path:
    """Where `make java-packages` put the jars of `kind`."""
    return HERE / kind / "lib"


def require_java_broker(kind: str) -> None:
    """Skip unless java and the jars of `kind` are there."""
    if shutil.which("java") is None:
        pytest.skip("java is not installed (make test installs it when run as root)")
    if not any(lib_dir(kind).glob("*.jar")):
        pytest.skip(f"{kind} is not in {lib_dir(kind)}: run make java-packages")


@dataclass
class JavaBroker:
    """A moquette or HiveMQ child process and how to reach it."""

    kind: str
    workdir: Path
    port: int = field(default_factory=free_port)
    host: str = "127.0.0.1"
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def log_path(self) -> Path:
        return self.workdir / f"{self.kind}.log"

    def _command(self) -> list[str]:
        classpath = f"{lib_dir(self.kind)}/*"
        if self.kind == "moquette":
            (self.workdir / "config").mkdir(parents=True, exist_ok=True)
            (self.workdir / "config" / "moquette.conf").write_text(
                f"port {self.port}\nhost {self.host}\nallow_anonymous true\n"
                f"persistence_enabled true\ndata_path {self.workdir / 'data'}\n"
                "telemetry_enabled false\n")
            return ["java", f"-Dmoquette.path={self.workdir}", "-cp", classpath,
                    "io.moquette.broker.Server"]
        for folder in ("conf", "data", "extensions"):
            (self.workdir / folder).mkdir(parents=True, exist_ok=True)
        (self.workdir / "conf" / "config.xml").write_text(
            "<?xml version=\"1.0\"?>\n<hivemq>\n  <listeners>\n    <tcp-listener>"
            f"<port>{self.port}</port><bind-address>{self.host}</bind-address>"
            "</tcp-listener>\n  </listeners>\n  <anonymous-usage-statistics><enabled>false"
            "</enabled></anonymous-usage-statistics>\n</hivemq>\n")
        return ["java", "-cp", classpath, str(HERE / "hivemq" / "HiveMQCloudBroker.java"),
                str(self.workdir)]

    def start(self) -> None:
        """Start (or restart) the broker and wait until it listens."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(self._command(), stdout=log, stderr=log,
                                            cwd=self.workdir)
        try:
            # a JVM's start (and the source launcher's compile) on a loaded machine
            wait_for_port(self.host, self.port, timeout=120.0)
        except TimeoutError:
            self.stop()
            raise RuntimeError(f"{self.kind} did not start: {self.log_text()}") from None

    def stop(self, sig: int = signal.SIGTERM) -> None:
        """Stop the broker (SIGTERM: its own orderly shutdown, which writes its state)."""
        proc, self.process = self.process, None
        stop_child(proc, sig, grace=60)  # a JVM writing its stores on a loaded machine

    def log_text(self) -> str:
        """What the broker wrote (HiveMQ pads its banner with NUL bytes)."""
        return self.log_path.read_bytes().replace(b"\0", b"").decode(errors="replace")
