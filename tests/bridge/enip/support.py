"""The EtherNet/IP peer of the bridge tests: cpppo's Logix simulator as a process (the proxy
whose connections can be cut and the peer that answers garbage, which the S7 tests use too, are
in tests/bridge/session_outages.py).

`LogixSimulator.start()` runs `python -m cpppo.server.enip --address 127.0.0.1:PORT TAG=TYPE...`
and waits until it takes connections; `kill()` is a crash (SIGKILL), `start()` again a
restart on the same port, with every tag back at zero.
"""

from __future__ import annotations

import socket
import subprocess
import sys

from tests.bridge.opcua.support import free_port
from tests.support.waiting import wait_for

TAGS = [
    "Flag=BOOL", "Small=SINT", "Word=INT", "Count=DINT", "Big=LINT", "Byte=USINT",
    "Unsigned=UINT", "Wide=UDINT", "Speed=REAL", "Precise=LREAL", "Label=STRING",
    "Recipe=DINT[10]", "Levels=REAL[300]", "Motor.Speed=REAL", "Motor.Running=BOOL",
    "Program:Main.Count=DINT", "Setpoint=REAL", "Mode=DINT", "Name=STRING",
]


class LogixSimulator:
    """cpppo's Logix simulator as a process that can be killed and started again."""

    def __init__(self, port: int | None = None, tags: list[str] | None = None) -> None:
        self.port = port or free_port()
        self.tags = tags or TAGS
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> LogixSimulator:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "cpppo.server.enip", "--address", f"127.0.0.1:{self.port}",
             *self.tags], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for(self._listening)
        return self

    def _listening(self) -> bool:
        assert self.process is not None and self.process.poll() is None, "it exited"
        try:
            socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
        except OSError:
            return False
        return True

    def kill(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait(10)
            self.process = None
