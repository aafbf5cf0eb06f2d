"""Modbus frames, sans-I/O: requests to bytes, bytes to the response that answers a request.

How this works: a `Request` knows its PDU and exactly what a valid answer looks like (unit,
function, byte count, or the echoed address/value of a write). The bus hands the bytes received
so far to `scan_rtu` (serial RTU and RTU over TCP) or `scan_tcp` (MBAP) together with the
request in flight; the scan returns a `Scan`: the matching response if it is there, and how
many complete frames that do *not* answer the request (stale: a late answer to an earlier
request, another unit's answer) and how many bytes of noise were skipped on the way.

RTU has no transaction id, so a frame's length comes from its function code and byte count,
and its CRC says whether it is a frame at all. The scan hunts byte by byte through noise, skips
whole valid frames that do not match, and never takes a frame whose unit, function or size
differs from the request. A late answer to a *different* request of the same shape is told
apart by the bus (quiet period after a timeout, flush before sending, and a settle window
after a timeout); see bridge/modbus/bus.py.

Nothing here reads a clock or a socket; the scan is a pure function of (bytes, request).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Final

READ_COILS: Final = 1
READ_DISCRETE_INPUTS: Final = 2
READ_HOLDING_REGISTERS: Final = 3
READ_INPUT_REGISTERS: Final = 4
WRITE_SINGLE_COIL: Final = 5
WRITE_SINGLE_REGISTER: Final = 6
WRITE_MULTIPLE_COILS: Final = 15
WRITE_MULTIPLE_REGISTERS: Final = 16
READ_FUNCTIONS: Final = frozenset({1, 2, 3, 4})
WRITE_FUNCTIONS: Final = frozenset({5, 6, 15, 16})

EXCEPTION_NAMES: Final = {
    1: "illegal function",
    2: "illegal data address",
    3: "illegal data value",
    4: "server device failure",
    5: "acknowledge",
    6: "server device busy",
    8: "memory parity error",
    10: "gateway path unavailable",
    11: "gateway target device failed to respond",
}
MBAP_HEADER: Final = 7


def _crc_table() -> list[int]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0xA001 if crc & 1 else crc >> 1
        table.append(crc)
    return table


_CRC_TABLE: Final = _crc_table()


def crc16(data: bytes) -> int:
    """Modbus CRC-16 (poly 0xA001, init 0xFFFF); sent low byte first."""
    crc = 0xFFFF
    table = _CRC_TABLE
    for byte in data:
        crc = (crc >> 8) ^ table[(crc ^ byte) & 0xFF]
    return crc


def rtu_char_time(baudrate: int, bits_per_char: int = 11) -> float:
    """Seconds one character takes on the line (start + 8 data + parity/stop = 11 bits)."""
    return bits_per_char / baudrate


def rtu_silence(baudrate: int) -> float:
    """The 3.5-character inter-frame silence (fixed at 1.75 ms above 19200 baud)."""
    return 0.00175 if baudrate > 19200 else 3.5 * rtu_char_time(baudrate)


@dataclass(frozen=True, slots=True)
class Request:
    """One Modbus request. `values`: FC 5/6 one value, FC 15 bits (0/1), FC 16 registers."""

    unit: int
    function: int
    address: int
    count: int = 1
    values: tuple[int, ...] = ()

    def pdu(self) -> bytes:
        """The protocol data unit (function code + data)."""
        fc = self.function
        if fc in READ_FUNCTIONS:
            return struct.pack(">BHH", fc, self.address, self.count)
        if fc == WRITE_SINGLE_COIL:
            return struct.pack(">BHH", fc, self.address, 0xFF00 if self.values[0] else 0)
        if fc == WRITE_SINGLE_REGISTER:
            return struct.pack(">BHH", fc, self.address, self.values[0])
        if fc == WRITE_MULTIPLE_COILS:
            packed = bytearray((len(self.values) + 7) // 8)
            for i, bit in enumerate(self.values):
                if bit:
                    packed[i // 8] |= 1 << (i % 8)
            return struct.pack(">BHHB", fc, self.address, len(self.values), len(packed)) + bytes(
                packed)
        if fc == WRITE_MULTIPLE_REGISTERS:
            n = len(self.values)
            return struct.pack(f">BHHB{n}H", fc, self.address, n, 2 * n, *self.values)
        raise ValueError(f"unsupported function code {fc}")

    def describe(self) -> str:
        """`unit 1 FC03 0..9 (10)` for logs and the plan printout."""
        last = self.address + self.count - 1
        return f"unit {self.unit} FC{self.function:02d} {self.address}..{last} ({self.count})"


@dataclass(frozen=True, slots=True)
class Response:
    """A response that answers its request. `values`: registers (FC 3/4) or bits (FC 1/2)."""

    unit: int
    function: int
    values: tuple[int, ...] = ()
    exception: int | None = None

    @property
    def exception_name(self) -> str:
        code = self.exception or 0
        return f"exception {code} ({EXCEPTION_NAMES.get(code, 'unknown')})"


def rtu_adu(request: Request) -> bytes:
    """An RTU frame: unit, PDU, CRC (low byte first)."""
    frame = bytes((request.unit,)) + request.pdu()
    crc = crc16(frame)
    return frame + bytes((crc & 0xFF, crc >> 8))


def tcp_adu(request: Request, tid: int) -> bytes:
    """A Modbus TCP frame: MBAP header (transaction id, protocol 0, length, unit) + PDU."""
    pdu = request.pdu()
    return struct.pack(">HHHB", tid, 0, len(pdu) + 1, request.unit) + pdu


def parse_pdu(request: Request, unit: int, pdu: bytes) -> Response | None:
    """The response if (unit, pdu) answers `request` exactly, else None."""
    if unit != request.unit or len(pdu) < 2:
        return None
    fc = pdu[0]
    if fc == request.function | 0x80:
        return Response(unit, request.function, (), pdu[1]) if len(pdu) == 2 else None
    if fc != request.function:
        return None
    if fc in (READ_HOLDING_REGISTERS, READ_INPUT_REGISTERS):
        size = 2 * request.count
        if pdu[1] != size or len(pdu) != 2 + size:
            return None
        return Response(unit, fc, struct.unpack(f">{request.count}H", pdu[2:]))
    if fc in (READ_COILS, READ_DISCRETE_INPUTS):
        size = (request.count + 7) // 8
        if pdu[1] != size or len(pdu) != 2 + size:
            return None
        data = pdu[2:]
        bits = tuple((data[i >> 3] >> (i & 7)) & 1 for i in range(request.count))
        return Response(unit, fc, bits)
    if fc in (WRITE_SINGLE_COIL, WRITE_SINGLE_REGISTER):
        return Response(unit, fc) if pdu == request.pdu() else None
    if fc in (WRITE_MULTIPLE_COILS, WRITE_MULTIPLE_REGISTERS):
        echo = struct.pack(">BHH", fc, request.address, len(request.values))
        return Response(unit, fc) if pdu == echo else None
    return None


@dataclass(slots=True)
class Scan:
    """What the bytes received so far contain, for the request in flight."""

    response: Response | None = None
    end: int = 0  # bytes up to and including the matching frame
    stale_units: list[int] = field(default_factory=list)  # units of frames not answering it
    noise: int = 0  # bytes before the match (or before `resolved`) that are in no valid frame
    corrupt: bool = False  # a frame shaped like the answer failed its CRC / length check
    resolved: int = 0  # without a match: bytes fully accounted for (frames + noise)
    desync: bool = False  # TCP only: the stream cannot be framed any more

    @property
    def stale(self) -> int:
        """Complete, valid frames that do not answer the request."""
        return len(self.stale_units)


def rtu_frame_length(buf: bytes, pos: int) -> int:
    """Length of a server frame starting at `pos`: >0 known, 0 not a frame start, -1 unknown."""
    if len(buf) - pos < 2:
        return -1
    fc = buf[pos + 1]
    if fc in READ_FUNCTIONS:
        return 5 + buf[pos + 2] if len(buf) - pos >= 3 else -1
    if fc in WRITE_FUNCTIONS:
        return 8
    if fc & 0x80 and (fc & 0x7F) in READ_FUNCTIONS | WRITE_FUNCTIONS:
        return 5
    return 0


def scan_rtu(buf: bytes, request: Request) -> Scan:
    """Find the frame answering `request` in `buf`, hunting through noise and stale frames."""
    scan = Scan()
    pos = last = 0
    n = len(buf)
    while pos < n:
        length = rtu_frame_length(buf, pos)
        if length <= 0 or pos + length > n:
            pos += 1
            continue
        body = buf[pos:pos + length - 2]
        crc = crc16(body)
        if buf[pos + length - 2] != crc & 0xFF or buf[pos + length - 1] != crc >> 8:
            if buf[pos] == request.unit and buf[pos + 1] & 0x7F == request.function:
                scan.corrupt = True
            pos += 1
            continue
        scan.noise += pos - last
        response = parse_pdu(request, buf[pos], body[1:])
        unit = buf[pos]
        pos += length
        last = pos
        if response is not None:
            scan.response, scan.end = response, pos
            return scan
        scan.stale_units.append(unit)
    scan.resolved = last
    return scan


def scan_tcp(buf: bytes, request: Request, tid: int) -> Scan:
    """Find the MBAP frame with transaction id `tid` answering `request`."""
    scan = Scan()
    pos = 0
    n = len(buf)
    while n - pos >= MBAP_HEADER:
        frame_tid, protocol, length = struct.unpack_from(">HHH", buf, pos)
        if protocol != 0 or not 2 <= length <= 254:
            scan.desync = True
            scan.noise += n - pos
            scan.resolved = n
            return scan
        total = 6 + length
        if pos + total > n:
            break
        unit, pdu = buf[pos + 6], buf[pos + 7:pos + total]
        pos += total
        if frame_tid != tid:
            scan.stale_units.append(unit)
            continue
        response = parse_pdu(request, unit, pdu)
        if response is None and request.unit in (0, 255):
            response = parse_pdu(request, request.unit, pdu)
        if response is None:
            scan.corrupt = True
            continue
        scan.response, scan.end = response, pos
        return scan
    scan.resolved = pos
    return scan
