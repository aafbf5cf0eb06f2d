"""The S7 peer of the bridge tests: node-snap7's server (snap7's C S7 server) as a process.

`S7Server.start()` runs `node tests/bridge/s7/node_server/server.js PORT` (the memory the
script describes); `kill()` is a crash (SIGKILL), `start()` again a restart on the same port.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from tests.bridge.opcua.support import free_port

NODE_SERVER = Path(__file__).resolve().parent / "node_server"


class S7Server:
    """The node-snap7 test PLC as a process that can be killed and started again."""

    def __init__(self, port: int | None = None, count: int = 0, hz: float = 10) -> None:
        self.port, self.count, self.hz = port or free_port(), count, hz
        self.process: subprocess.Popen[str] | None = None

    def start(self) -> S7Server:
        node = shutil.which("node")
        if node is None or not (NODE_SERVER / "node_modules" / "node-snap7").exists():
            pytest.skip("node-snap7 is not installed (make node-packages)")
        self.process = subprocess.Popen(
            [node, "server.js", str(self.port), str(self.count), str(self.hz)],
            cwd=NODE_SERVER, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        assert line.startswith("READY"), f"node-snap7 server did not start: {line!r} " \
            f"(exit {self.process.poll()})"
        return self

    def kill(self) -> None:
        if self.process is not None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(10)
            self.process = None
