"""A raw Modbus RTU-over-TCP responder that misbehaves on purpose.

How this works: a TCP server in a background thread reads RTU request frames (FC 3 only, which
is all the fault tests poll) and answers each unit according to its current `mode`:

- "ok": the registers, value at address a = 1000 * unit + a (so a misplaced answer shows);
- "silent": no answer (a timeout);
- "crc": the right answer with a broken CRC;
- "garbage": random bytes instead of an answer;
- "exception": exception response 02 (illegal data address);
- "late": the answer to a request for `late_address` is held back and sent, glued in front of
  the next answer on the line, when the next request arrives (the next request may be for
  another address of the same shape: a stale frame that only the bridge's matching catches);
- "late-quiet": the answer is sent after `late_delay` seconds (after the bridge's timeout,
  inside its quiet period).

CRCs are computed with pymodbus' FramerRTU, not with the code under test. `requests` counts
requests per unit; `mode` changes take effect on the next request.
"""

from __future__ import annotations

import asyncio
import random
import struct
import threading
from collections import Counter

from pymodbus.framer.rtu import FramerRTU


def crc_bytes(frame: bytes) -> bytes:
    return FramerRTU.compute_CRC(frame).to_bytes(2, "big")


def value_at(unit: int, address: int) -> int:
    return (1000 * unit + address) % 65536


class Responder:
    """The misbehaving device line."""

    def __init__(self, units: tuple[int, ...] = (1, 2, 3), late_delay: float = 0.3) -> None:
        self.modes = dict.fromkeys(units, "ok")
        self.late_delay = late_delay
        self.late_address = 0
        self.late_sent = 0
        self._writer: asyncio.StreamWriter | None = None
        self.requests: Counter[int] = Counter()
        self.port = 0
        self.loop: asyncio.AbstractEventLoop | None = None
        self._held: list[bytes] = []
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="responder")
        self._stop: asyncio.Event | None = None
        self.rng = random.Random(4)

    def start(self) -> int:
        self._thread.start()
        assert self._ready.wait(10), "responder did not start"
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
        self._writer = writer
        try:
            while True:
                frame = await reader.readexactly(8)
                unit, function, address, count = struct.unpack(">BBHH", frame[:6])
                if crc_bytes(frame[:6]) != frame[6:] or function != 3:
                    continue
                self.requests[unit] += 1
                reply = self._reply(unit, address, count)
                if reply:
                    writer.write(reply)
                    await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    def _reply(self, unit: int, address: int, count: int) -> bytes:
        mode = self.modes.get(unit, "silent")
        body = bytes((unit, 3, 2 * count)) + struct.pack(
            f">{count}H", *(value_at(unit, address + i) for i in range(count)))
        good = body + crc_bytes(body)
        held, self._held = b"".join(self._held), []
        if mode == "ok":
            return held + good
        if mode == "silent":
            return held
        if mode == "crc":
            return held + body + bytes(b ^ 0xFF for b in crc_bytes(body))
        if mode == "garbage":
            return held + bytes(self.rng.randrange(256) for _ in range(len(good)))
        if mode == "exception":
            exc = bytes((unit, 0x83, 0x02))
            return held + exc + crc_bytes(exc)
        if mode == "late" and address == self.late_address:
            self._held.append(good)
            self.late_sent += 1
            self.modes[unit] = "ok"  # one late answer, then healthy again
            return held
        if mode == "late":
            return held + good
        if mode == "late-quiet":
            assert self.loop is not None
            self.loop.call_later(self.late_delay, self._send_late, good)
            self.modes[unit] = "ok"
            return held
        raise ValueError(mode)

    def _send_late(self, frame: bytes) -> None:
        if self._writer is not None:
            self._writer.write(frame)
            self.late_sent += 1
