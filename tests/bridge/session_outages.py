"""The outages every family with a TCP session of its own (S7, EtherNet/IP; bridge/sessions.py)
is tested with, against its test peer, and the peers they need besides it.

- `down_at_start_then_up`: the bridge starts before the peer: offline, every point bad once,
  tried again; then the peer starts and the values come good.
- `garbage_is_offline_and_retried`: `garbage_peer()`, a TCP server that answers every request
  with junk and closes: the device stays offline, its point bad once, and tries again.
- `memory_over_100_reconnects`: `CuttingProxy`, an asyncio TCP proxy in front of the peer whose
  `cut()` drops every connection through it, cut after each of 100 sessions; the test process's
  RSS after 10 and after 100, printed and compared (nothing timed).

Each takes the bridge configuration (`[bridge]` keys) for a peer's port, the device's name and
one point of it, and fails when the device's task crashed meanwhile (the bridge's "device ...
crashed; restarting" line: it restarts the same device, so nothing else shows it).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Callable, Iterator
from typing import Any, Protocol

from bench.procstat import rss_kib
from bridge.sessions import SessionDevice
from tests.bridge.opcua.support import Harness, until

BridgeFor = Callable[[int], dict[str, Any]]  # the peer's port -> the bridge configuration
RSS_GROWTH_LIMIT_KIB = 1024


class CrashLines(logging.Handler):
    """The bridge's "device ... crashed" log lines."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if "crashed" in record.getMessage():
            self.lines.append(record.getMessage())


@contextlib.contextmanager
def without_crashes() -> Iterator[None]:
    """Fails when a device of the bridge crashed inside."""
    crashes = CrashLines()
    bridge_log = logging.getLogger("outpost.bridge")
    bridge_log.addHandler(crashes)
    try:
        yield
    finally:
        bridge_log.removeHandler(crashes)
    assert not crashes.lines, crashes.lines


class StartablePeer(Protocol):
    """A test peer process on a port chosen before it runs."""

    port: int

    def start(self) -> object:
        """Start it; it takes connections when this returns."""


async def down_at_start_then_up(bridge_for: BridgeFor, peer: StartablePeer, device: str,
                                point: str) -> None:
    """The device's outage before its peer ever ran, then the peer started (see the module)."""
    status, value = f"devices/{device}/status", f"devices/{device}/{point}"
    with without_crashes():
        h = Harness(bridge_for(peer.port))
        await h.bridge.start()
        await until(lambda: h.last(status) == "offline")
        await until(lambda: h.bridge.devices[device].counters.timeouts >= 2)  # tried again
        assert h.values(value) == [h.last(value)]  # bad once
        assert h.last(value)["quality"] == "bad"
        await asyncio.get_running_loop().run_in_executor(None, peer.start)
        await until(lambda: (h.last(value) or {}).get("quality") == "good")
        assert h.last(status) == "online"
        await h.bridge.stop()


async def garbage_is_offline_and_retried(bridge_for: BridgeFor, device: str,
                                         point: str) -> None:
    """The device against `garbage_peer()` (see the module)."""
    status, value = f"devices/{device}/status", f"devices/{device}/{point}"
    server, port = await garbage_peer()
    with without_crashes():
        h = Harness(bridge_for(port))
        await h.bridge.start()
        await until(lambda: h.last(status) == "offline")
        dev = h.bridge.devices[device]
        await until(lambda: dev.counters.timeouts >= 3)  # tried again, not stuck
        assert h.values(value) == [h.last(value)]
        assert h.last(value)["quality"] == "bad"
        assert h.last(status) == "offline"
        await h.bridge.stop()
    server.close()


async def memory_over_100_reconnects(bridge_for: BridgeFor, peer_port: int,
                                     device: str) -> None:
    """RSS after 10 and after 100 sessions cut by a proxy (see the module)."""
    proxy = await CuttingProxy(peer_port).start()
    with without_crashes():
        h = Harness(bridge_for(proxy.port))
        await h.bridge.start()
        dev = h.bridge.devices[device]
        assert isinstance(dev, SessionDevice)
        rss: dict[int, int] = {}

        def serving(session: int) -> Callable[[], bool]:
            return lambda: dev.sessions >= session and dev.online is True

        for session in range(1, 101):
            await until(serving(session))
            if session in (10, 100):
                rss[session] = rss_kib(os.getpid())
            proxy.cut()
        await h.bridge.stop()
    await proxy.close()
    grown = rss[100] - rss[10]
    print(f"RSS after 10 reconnects {rss[10]} KiB, after 100 {rss[100]} KiB ({grown:+d} KiB)")
    assert grown < RSS_GROWTH_LIMIT_KIB, rss



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
