"""S7comm "read var" and "write var" PDUs: requests built, answers taken apart (sans-I/O).

The connection itself (ISO-on-TCP: TPKT, COTP connect with the TSAPs, the S7 "setup
communication" that negotiates the PDU size) is python-snap7's (bridge/s7/session.py). Its
async client reads one item per request, so the multi-item requests of the plan
(bridge/s7/plan.py) and their answers, item by item with each item's own return code, are made
and read here:

- a request: header (0x32, job 0x01, sequence, parameter and data lengths), function 0x04 (read)
  or 0x05 (write), item count, and per item its address: syntax 0x10 (S7-any), transport size
  (0x02 byte, 0x01 bit, 0x1C counter, 0x1D timer), count, DB number, area (0x84 DB, 0x83 M,
  0x81 I, 0x82 Q, 0x1C C, 0x1D T) and a 24-bit bit address (timers and counters: the number);
- an answer: header (0x32, ack-data 0x03, the same sequence, an error class and code: not 0
  when the PLC refused the whole request), function, item count, then per item a return code
  (0xFF success), a transport size, a length (in bits for 0x03/0x04/0x05) and the data, with
  a fill byte after an odd length except after the last item.

Refusals name what an S7-1200/1500 needs (`REQUIREMENTS`): most refused reads of such a PLC
are PUT/GET not permitted or a data block with optimized access.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Final

from bridge.s7.plan import Item, Request

AREA_CODES: Final = {"DB": 0x84, "M": 0x83, "I": 0x81, "Q": 0x82, "C": 0x1C, "T": 0x1D}
BYTE, BIT, COUNTER, TIMER = 0x02, 0x01, 0x1C, 0x1D
READ, WRITE = 0x04, 0x05
SUCCESS: Final = 0xFF
REQUIREMENTS: Final = (
    "an S7-1200/1500 answers only with PUT/GET communication permitted (CPU properties > "
    "Protection & Security > Connection mechanisms) and reads a data block by address only "
    "with optimized block access off (the block's properties > Attributes)")
RETURN_CODES: Final = {0x01: "hardware fault", 0x03: "access denied",
                       0x05: "address out of range", 0x06: "data type not supported",
                       0x07: "data type inconsistent", 0x0A: "object does not exist"}
HEADER_ERRORS: Final = {0x8104: "function not available (PUT/GET not permitted?)",
                        0x8500: "the request does not fit the PDU",
                        0xD201: "block name syntax error", 0xD209: "block not found",
                        0xD602: "protected by a password", 0x8404: "fatal protocol error"}


class ProtocolError(Exception):
    """An answer that is not the answer to the request (a broken or foreign peer)."""


class RefusedError(Exception):
    """The PLC refused a whole request (an error class and code in the answer's header)."""

    def __init__(self, code: int) -> None:
        self.code = code
        text = HEADER_ERRORS.get(code, "refused")
        super().__init__(f"the PLC refused the request (S7 error 0x{code:04X}: {text}): "
                         f"{REQUIREMENTS}")


@dataclass(frozen=True, slots=True)
class ItemError:
    """An item the PLC answered with a return code other than success."""

    code: int

    def reason(self, item: Item) -> str:
        """What it means for this item, and what to do."""
        block = f"DB{item.db}" if item.area == "DB" else item.area
        if self.code == 0x0A and item.area == "DB":
            return f"DB{item.db} does not exist on the PLC"
        if self.code == 0x05:
            return (f"{item.text()} is out of range: past the end of {block}"
                    + (f", or DB{item.db} has optimized block access ({REQUIREMENTS})"
                       if item.area == "DB" else ""))
        if self.code == 0x03:
            return f"access to {block} denied: {REQUIREMENTS}"
        text = RETURN_CODES.get(self.code, "error")
        return f"{text} (return code 0x{self.code:02X}) reading {item.text()}"


def _header(sequence: int, parameters: bytes, data: bytes = b"") -> bytes:
    return struct.pack(">BBHHHH", 0x32, 0x01, 0, sequence & 0xFFFF, len(parameters),
                       len(data)) + parameters + data


def _address(area: str, db: int, transport: int, count: int, address: int) -> bytes:
    return struct.pack(">BBBBHHB", 0x12, 0x0A, 0x10, transport, count,
                       db if area == "DB" else 0, AREA_CODES[area]) + address.to_bytes(3, "big")


def _item_address(item: Item) -> bytes:
    if item.area in ("T", "C"):
        return _address(item.area, 0, TIMER if item.area == "T" else COUNTER, item.size // 2,
                        item.start // 2)
    return _address(item.area, item.db, BYTE, item.size, item.start * 8)


def encode_read(request: Request, sequence: int) -> bytes:
    """The read var PDU of a planned request."""
    return _header(sequence, bytes([READ, len(request.items)])
                   + b"".join(_item_address(item) for item in request.items))


def encode_write(area: str, db: int, start: int, bit: int | None, data: bytes,
                 sequence: int) -> bytes:
    """The write var PDU of one item: a bit (`bit` given, `data` one byte 0/1), a timer or
    counter (`start` its number, `data` its word) or bytes from byte `start`."""
    if bit is not None:
        address = _address(area, db, BIT, 1, start * 8 + bit)
        payload = struct.pack(">BBH", 0, 0x03, 1) + data[:1]
    elif area in ("T", "C"):
        address = _address(area, 0, TIMER if area == "T" else COUNTER, len(data) // 2, start)
        payload = struct.pack(">BBH", 0, 0x09, len(data)) + data
    else:
        address = _address(area, db, BYTE, len(data), start * 8)
        payload = struct.pack(">BBH", 0, 0x04, len(data) * 8) + data
    return _header(sequence, bytes([WRITE, 1]) + address, payload)


def _answer(pdu: bytes, function: int, count: int, sequence: int) -> bytes:
    """The data section of an answer, after checking it answers this request."""
    if len(pdu) < 12 or pdu[0] != 0x32 or pdu[1] not in (0x02, 0x03):
        raise ProtocolError(f"not an S7 answer: {pdu[:12].hex()}")
    _, _, _, seq, parameters, data, error = struct.unpack(">BBHHHHH", pdu[:12])
    if error:
        raise RefusedError(error)
    if seq != sequence & 0xFFFF:
        raise ProtocolError(f"answer {seq} to request {sequence & 0xFFFF}")
    if len(pdu) != 12 + parameters + data or parameters < 2 or pdu[12] != function \
            or pdu[13] != count:
        raise ProtocolError("answer does not match the request")
    return pdu[12 + parameters:]


def parse_read(pdu: bytes, request: Request, sequence: int) -> list[bytes | ItemError]:
    """Each item's bytes, or its ItemError; ProtocolError / RefusedError for the answer."""
    data = _answer(pdu, READ, len(request.items), sequence)
    results: list[bytes | ItemError] = []
    at = 0
    for index, item in enumerate(request.items):
        if at + 4 > len(data):
            raise ProtocolError(f"answer ends before item {index + 1}")
        code, transport, length = struct.unpack(">BBH", data[at:at + 4])
        at += 4
        if code != SUCCESS:
            results.append(ItemError(code))
            continue
        size = (length + 7) // 8 if transport in (0x03, 0x04, 0x05) else length
        if size != item.size or at + size > len(data):
            raise ProtocolError(f"item {index + 1}: {size} bytes, {item.size} asked for")
        results.append(bytes(data[at:at + size]))
        at += size + (size % 2 if index < len(request.items) - 1 else 0)
    return results


def parse_write(pdu: bytes, sequence: int) -> ItemError | None:
    """None when the write landed, else its ItemError; ProtocolError / RefusedError."""
    data = _answer(pdu, WRITE, 1, sequence)
    if len(data) < 1:
        raise ProtocolError("write answer without a return code")
    return None if data[0] == SUCCESS else ItemError(data[0])
