"""A TCP proxy that counts the bytes it forwards in each direction (for wire-size benchmarks).

How this works: `CountingProxies` runs one asyncio loop in a background thread; each proxy it
opens listens on a free 127.0.0.1 port and pipes every accepted connection to its target,
adding the bytes read from each side to that proxy's `up` (client → target) and `down`
(target → client) counters. What is counted is the TCP payload: every MQTT packet whole
(CONNECT, PUBLISH, PUBACK, PINGREQ ...), not the IP and TCP headers.
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass, field

HOST = "127.0.0.1"


@dataclass
class Counted:
    """One proxy: where it listens, and the bytes it forwarded so far."""

    port: int = 0
    up: int = 0
    down: int = 0
    _server: asyncio.Server | None = field(default=None, repr=False)

    def snapshot(self) -> tuple[int, int]:
        """(up, down) now."""
        return self.up, self.down


class CountingProxies:
    """Counting proxies on one background event loop."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="tcp-count",
                                       daemon=True)
        self.thread.start()
        self.proxies: list[Counted] = []

    def open(self, target_port: int) -> Counted:
        """A new proxy to `HOST:target_port`; returns it with its listening port set."""
        return asyncio.run_coroutine_threadsafe(self._open(target_port), self.loop).result(10)

    async def _open(self, target_port: int) -> Counted:
        counted = Counted()

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter, up: bool) -> None:
            try:
                while data := await src.read(65536):
                    if up:
                        counted.up += len(data)
                    else:
                        counted.down += len(data)
                    dst.write(data)
                    await dst.drain()
            except OSError:
                pass
            finally:
                dst.close()

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                target_reader, target_writer = await asyncio.open_connection(HOST, target_port)
            except OSError:
                writer.close()
                return
            await asyncio.gather(pipe(reader, target_writer, True),
                                 pipe(target_reader, writer, False))

        counted._server = await asyncio.start_server(handle, HOST, 0)
        counted.port = counted._server.sockets[0].getsockname()[1]
        self.proxies.append(counted)
        return counted

    def close(self) -> None:
        """Close every proxy and its connections, then stop the loop."""
        asyncio.run_coroutine_threadsafe(self._shutdown(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()

    async def _shutdown(self) -> None:
        for counted in self.proxies:
            if counted._server is not None:
                counted._server.close()
        tasks = asyncio.all_tasks() - {asyncio.current_task()}
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
