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

The server and the CRCs (pymodbus' FramerRTU, not the code under test) are
`tests.support.rtu_device`'s. `requests` counts requests per unit; `mode` changes take effect
on the next request.
"""

from __future__ import annotations

import random
import struct
from collections import Counter

from tests.support.rtu_device import RtuDevice, crc_bytes


def value_at(unit: int, address: int) -> int:
    return (1000 * unit + address) % 65536


class Responder(RtuDevice):
    """The misbehaving device line."""

    def __init__(self, units: tuple[int, ...] = (1, 2, 3), late_delay: float = 0.3) -> None:
        super().__init__("responder")
        self.modes = dict.fromkeys(units, "ok")
        self.late_delay = late_delay
        self.late_address = 0
        self.late_sent = 0
        self.requests: Counter[int] = Counter()
        self._held: list[bytes] = []
        self.rng = random.Random(4)

    def answer(self, unit: int, address: int, count: int) -> bytes:
        self.requests[unit] += 1
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
        if self.writer is not None:
            self.writer.write(frame)
            self.late_sent += 1
