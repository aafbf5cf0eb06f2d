"""A Modbus RTU-over-TCP device for tests: a TCP server on 127.0.0.1 in a background thread.

It reads 8-byte RTU request frames, drops those with a bad CRC or a function other than 3
(read holding registers, all the tests poll) and sends whatever the subclass's `answer`
returns (nothing for b""). CRCs are computed with pymodbus' FramerRTU, not with the code under
test.
"""

from __future__ import annotations

import asyncio
import struct
import threading

from pymodbus.framer.rtu import FramerRTU


def crc_bytes(frame: bytes) -> bytes:
    return FramerRTU.compute_CRC(frame).to_bytes(2, "big")


class RtuDevice:
    """The server; `start` returns its port, `writer` is the latest connection."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.port = 0
        self.loop: asyncio.AbstractEventLoop | None = None
        self.writer: asyncio.StreamWriter | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name=name)

    def answer(self, unit: int, address: int, count: int) -> bytes:
        """The bytes to send for an FC 3 request (called on the server's event loop)."""
        raise NotImplementedError

    def start(self) -> int:
        self._thread.start()
        assert self._ready.wait(10), f"{self.name} did not start"
        return self.port

    def stop(self) -> None:
        if self.loop is not None and self._stop is not None:
            self.loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)

    def _run(self) -> None:
        asyncio.run(self._serve())

    async def _serve(self) -> None:
        self.loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        server = await asyncio.start_server(self._client, "127.0.0.1", 0)
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        await self._stop.wait()
        server.close()

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.writer = writer
        try:
            while True:
                frame = await reader.readexactly(8)
                unit, function, address, count = struct.unpack(">BBHH", frame[:6])
                if crc_bytes(frame[:6]) != frame[6:] or function != 3:
                    continue
                reply = self.answer(unit, address, count)
                if reply:
                    writer.write(reply)
                    await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()
