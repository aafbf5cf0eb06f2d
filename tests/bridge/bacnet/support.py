"""The BACnet peer of the bridge tests: @bacnet-js/client devices (node) as a process.

`NodeDevice(host, port).start()` runs `node tests/bridge/bacnet/node_device/device.js HOST
PORT` (three devices at one address, two of them behind the router the script also is:
device.js describes them); `kill()` is a crash (SIGKILL), `start()` again a restart on the
same address. Every test device listens on a 127.0.0.x address of its own and hears Who-Is
broadcasts on 127.255.255.255 at its port, so nothing leaves the loopback interface.
"""

from __future__ import annotations

import itertools
import shutil
import signal
import socket
import subprocess
from pathlib import Path

import pytest

NODE_DEVICE = Path(__file__).resolve().parent / "node_device"
_HOSTS = itertools.count(2)


def free_udp_port() -> int:
    """A UDP port free on the loopback broadcast address and on 127.0.0.1."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        try:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
                probe.bind(("127.255.255.255", port))
            return port
        except OSError:
            continue


def loopback_host() -> str:
    """A 127.0.0.x address no other device of this test process uses (2, 3, ...)."""
    return f"127.0.0.{next(_HOSTS) % 250 + 2}"


class NodeDevice:
    """The @bacnet-js/client test devices as a process that can be killed and started again."""

    def __init__(self, host: str | None = None, port: int | None = None, count: int = 0,
                 hz: float = 10, mode: str = "normal") -> None:
        self.host, self.port = host or loopback_host(), port or free_udp_port()
        self.count, self.hz, self.mode = count, hz, mode
        self.process: subprocess.Popen[str] | None = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self) -> NodeDevice:
        node = shutil.which("node")
        if node is None or not (NODE_DEVICE / "node_modules" / "@bacnet-js" / "client").exists():
            pytest.skip("@bacnet-js/client is not installed (make node-packages)")
        self.process = subprocess.Popen(
            [node, "device.js", self.host, str(self.port), str(self.count), str(self.hz),
             self.mode], cwd=NODE_DEVICE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            text=True)
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        assert line.startswith("READY"), f"BACnet test device did not start: {line!r} " \
            f"(exit {self.process.poll()})"
        return self

    def kill(self) -> None:
        if self.process is not None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(10)
            self.process = None
