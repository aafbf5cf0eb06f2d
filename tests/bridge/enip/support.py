"""The EtherNet/IP peers of the bridge tests: cpppo's Logix simulator as a process, a proxy
whose connections can be cut, and a peer that answers garbage.

`LogixSimulator.start()` runs `python -m cpppo.server.enip --address 127.0.0.1:PORT TAG=TYPE...`
and waits until it takes connections; `kill()` is a crash (SIGKILL), `start()` again a
restart on the same port, with every tag back at zero.
"""

from __future__ import annotations

import asyncio
import contextlib
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


class CuttingProxy:
    """Forwards 127.0.0.1:port to a target; `cut()` drops every connection through it."""

    def __init__(self, target: int) -> None:
        self.target = target
        self.port = 0
        self.writers: list[asyncio.StreamWriter] = []
        self.server: asyncio.Server | None = None

    async def start(self) -> CuttingProxy:
        self.server = await asyncio.start_server(self._client, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target)
        except OSError:
            writer.close()
            return
        self.writers += [writer, up_writer]
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))

    def cut(self) -> None:
        for writer in self.writers:
            writer.transport.abort()
        self.writers.clear()

    async def close(self) -> None:
        self.cut()
        if self.server is not None:
            self.server.close()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(OSError, ConnectionError):
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    writer.close()


async def garbage_peer() -> tuple[asyncio.Server, int]:
    """A TCP server that answers every request with junk: a frame header that announces more
    than it sends, then the end of the connection."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError, ConnectionError):
            await reader.read(1024)
            writer.write(b"\x65\x00\xff\x00" + b"junk" * 10)
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]
