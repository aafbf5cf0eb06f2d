"""Real OPC UA peers for the bridge tests: node-opcua as a process, a TCP proxy that can fail.

- `NodeServer`: `node tests/bridge/opcua/node_server/server.js PORT PKI` (the small PLC the
  script describes); `kill()` is a crash, `start()` again a restart on the same port with the
  same certificate (the PKI folder is kept, so only the first start of a session makes one).
- `Proxy`: an asyncio TCP proxy in front of a server; `blackhole()` keeps the connections but
  forwards nothing (a cable pulled somewhere on the way: no FIN, no RST), `heal()` ends that
  and closes the dead connections so the client's new ones pass.
- `Harness`: the bridge (bridge.runtime.Bridge) on an in-process broker, with a link that
  keeps every message under `devices/#`.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import signal
import socket
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from bridge.runtime import Bridge
from gateway.broker.core.message import Message
from gateway.broker.engine.broker import Broker
from gateway.broker.engine.links import Link
from outpost.config import parse_config
from storage.memory import MemoryStore
from tests.bridge.test_runtime import until as until_in_loop
from tests.support.waiting import TIMEOUT

NODE_SERVER = Path(__file__).resolve().parent / "node_server"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class NodeServer:
    """The node-opcua test PLC as a process that can be killed and started again."""

    def __init__(self, pki: Path, port: int | None = None, count: int = 0, hz: float = 10) -> None:
        self.pki, self.port, self.count, self.hz = pki, port or free_port(), count, hz
        self.process: subprocess.Popen[str] | None = None

    @property
    def endpoint(self) -> str:
        return f"opc.tcp://127.0.0.1:{self.port}/UA/Plc"

    def start(self) -> NodeServer:
        node = shutil.which("node")
        if node is None or not (NODE_SERVER / "node_modules" / "node-opcua").exists():
            pytest.skip("node-opcua is not installed (make node-packages)")
        self.process = subprocess.Popen(
            [node, "server.js", str(self.port), str(self.pki), str(self.count), str(self.hz)],
            cwd=NODE_SERVER, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        assert self.process.stdout is not None
        for line in self.process.stdout:  # node-opcua's own notices come first
            if line.startswith("READY"):
                return self
        raise AssertionError(f"node-opcua server did not start (exit {self.process.wait()})")

    def kill(self) -> None:
        if self.process is not None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(10)
            self.process = None


class Proxy:
    """A TCP proxy whose path can be black-holed and healed."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = 0
        self.server: asyncio.Server | None = None
        self.writers: set[asyncio.StreamWriter] = set()
        self.flowing = asyncio.Event()
        self.flowing.set()

    async def start(self) -> Proxy:
        self.server = await asyncio.start_server(self._client, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await self.flowing.wait()
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        self.writers |= {writer, up_writer}
        await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer),
                             return_exceptions=True)
        for w in (writer, up_writer):
            w.close()
            self.writers.discard(w)

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(65536):
            if self.flowing.is_set():  # black-holed bytes are lost, as on a dead link
                writer.write(data)
                await writer.drain()
        writer.close()

    def blackhole(self) -> None:
        self.flowing.clear()

    def heal(self) -> None:
        for writer in list(self.writers):
            writer.transport.abort()
        self.flowing.set()

    async def close(self) -> None:
        self.heal()
        if self.server is not None:
            self.server.close()


class Harness:
    """The bridge on an in-process broker; every message under devices/# is kept."""

    def __init__(self, bridge: dict[str, Any], state_dir: Path | None = None) -> None:
        loop = asyncio.get_running_loop()
        config = parse_config({"bridge": {"diagnostics_interval": 0, **bridge}})
        self.broker = Broker(config, MemoryStore(), now=loop.time())
        self.seen: list[tuple[str, bytes]] = []
        self.watch = Link(self.broker, "watch", loop.time, self._got)
        self.watch.subscribe("devices/#", 1, no_local=False)
        self.bridge = Bridge(config.bridge, self.broker, state_dir=state_dir)

    def _got(self, message: Message, qos: int, retain: bool) -> None:
        self.seen.append((message.topic, message.payload))

    def values(self, topic: str) -> list[Any]:
        return [json.loads(p) if p.startswith(b"{") else p.decode()
                for t, p in self.seen if t == topic]

    def last(self, topic: str) -> Any:
        found = self.values(topic)
        return found[-1] if found else None

    def since(self, mark: int) -> list[tuple[str, Any]]:
        """Messages after `mark` (a length of `seen`), decoded."""
        return [(t, json.loads(p) if p.startswith(b"{") else p.decode())
                for t, p in self.seen[mark:]]

    def write(self, device: str, point: str, value: object, ident: int = 1) -> None:
        self.watch.publish(f"devices/{device}/{point}/set",
                           json.dumps({"id": ident, "value": value}).encode(), 1, False)


async def until(check: Callable[[], Any], timeout: float = TIMEOUT) -> Any:
    """Wait for `check` on the running loop (the deadline only bounds a stuck run)."""
    return await until_in_loop(check, timeout)
