"""Read planning: the points of a device in as few S7 read requests as its PDU size allows.

How this works: each point is a `Span` of bytes in one memory block (a data block, the
merkers, inputs or outputs, or the timers or counters, whose elements are two bytes each).
One S7 "read var" request asks for up to 20 items (fewer when the PDU is small: each item's
address takes 12 bytes of the request), and its answer carries each item's data after a
4-byte item header (plus a fill byte after an odd length), all within the PDU negotiated at
connection: an answer has 12 bytes of header and 2 of parameters, so one item carries at most
PDU - 18 bytes (462 with the usual 480).

1. Spans of one block are sorted by address and swept left to right, as the Modbus planner
   does (bridge/modbus/plan.py): a piece grows to take the next span while it stays within
   one item's limit and the hole before the span is at most `max_gap` bytes. Each piece is
   one item. A span longer than one item (a WSTRING[254] is 512 bytes) is an item of its own
   cut into chunks of the limit, read by several items and put together again. Spans in
   `alone` (points whose shared read the PLC refused as out of range) are never merged.
2. Items are packed into requests first-fit by decreasing size (each item counted with its
   header and a fill byte when odd): a request takes items while its answer fits the PDU and
   it has fewer than the item limit. Requests are then ordered by their first address.

A point is never split between two reads unless it is longer than one item can carry (then
its chunks may come from two requests, read a few milliseconds apart).

Pure: no I/O; `outpost s7 probe` prints the plan (`describe`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

MIN_PDU: Final = 240
MAX_PDU: Final = 960
ANSWER_HEADER: Final = 12 + 2  # ack-data header (with error class and code) + function, count
ITEM_HEADER: Final = 4  # return code, transport size, length
REQUEST_HEADER: Final = 10 + 2  # job header + function, item count
REQUEST_ITEM: Final = 12  # one item's address in a request
MAX_ITEMS: Final = 20
BLOCK_ORDER: Final = ("DB", "M", "I", "Q", "T", "C")


def item_limit(pdu: int) -> int:
    """The most data bytes one item can carry in an answer of `pdu` bytes (even)."""
    limit = pdu - ANSWER_HEADER - ITEM_HEADER
    return limit - limit % 2


def items_per_request(pdu: int) -> int:
    """The most items one request may ask for."""
    return min(MAX_ITEMS, (pdu - REQUEST_HEADER) // REQUEST_ITEM)


@dataclass(frozen=True, slots=True)
class Span:
    """One point's bytes: `start` is a byte offset (a timer or counter n is at byte 2 n)."""

    key: str
    area: str  # DB, M, I, Q, T, C
    db: int
    start: int
    size: int

    @property
    def end(self) -> int:
        return self.start + self.size


@dataclass(frozen=True, slots=True)
class Item:
    """One item of a read request: `size` bytes from `start` of a block, and the spans (or
    the chunk of one long span) it carries."""

    area: str
    db: int
    start: int
    size: int
    spans: tuple[Span, ...]

    @property
    def end(self) -> int:
        return self.start + self.size

    @property
    def cost(self) -> int:
        """Bytes it takes in an answer (a fill byte after an odd length counted always)."""
        return ITEM_HEADER + self.size + self.size % 2

    @property
    def unused(self) -> int:
        """Bytes read that belong to no point."""
        covered: set[int] = set()
        for span in self.spans:
            covered.update(range(max(span.start, self.start), min(span.end, self.end)))
        return self.size - len(covered)

    def text(self) -> str:
        """Where it reads, as a person would write it: `DB10.DBB0..DBB91`, `M0..M3`, `T2..T3`."""
        last = self.end - 1
        if self.area == "DB":
            return f"DB{self.db}.DBB{self.start}..DBB{last}"
        if self.area in ("T", "C"):
            return f"{self.area}{self.start // 2}..{self.area}{last // 2}"
        return f"{self.area}B{self.start}..{self.area}B{last}"


@dataclass(frozen=True, slots=True)
class Request:
    """One read request and the answer size it asks for."""

    items: tuple[Item, ...]

    @property
    def answer_bytes(self) -> int:
        return ANSWER_HEADER + sum(item.cost for item in self.items)


def _block_key(span: Span) -> tuple[int, int]:
    return BLOCK_ORDER.index(span.area), span.db


def plan_reads(spans: Iterable[Span], pdu: int, max_gap: int = 0,
               alone: frozenset[str] = frozenset()) -> list[Request]:
    """The requests that read every span (see the module's comment)."""
    limit = item_limit(pdu)
    by_block: dict[tuple[int, int], list[Span]] = {}
    for span in spans:
        by_block.setdefault(_block_key(span), []).append(span)
    items: list[Item] = []
    for key in sorted(by_block):
        current: list[Span] = []
        start = end = 0
        for span in sorted(by_block[key], key=lambda s: (s.start, -s.size, s.key)):
            if (current and span.key not in alone and current[0].key not in alone
                    and span.size <= limit and max(end, span.end) - start <= limit
                    and span.start - end <= max_gap):
                current.append(span)
                end = max(end, span.end)
                continue
            if current:
                items.append(Item(span.area, span.db, start, end - start, tuple(current)))
            current, start, end = [span], span.start, span.end
            if span.size > limit:  # a long span: chunks of the limit
                for at in range(span.start, span.end, limit):
                    items.append(Item(span.area, span.db, at, min(limit, span.end - at),
                                      (span,)))
                current = []
        if current:
            items.append(Item(current[0].area, current[0].db, start, end - start,
                              tuple(current)))
    return _pack(items, pdu)


def _pack(items: list[Item], pdu: int) -> list[Request]:
    """First-fit decreasing: each item into the first request its answer still fits."""
    room = pdu - ANSWER_HEADER
    most = items_per_request(pdu)
    bins: list[list[Item]] = []
    used: list[int] = []
    for item in sorted(items, key=lambda i: -i.cost):
        for index, taken in enumerate(bins):
            if len(taken) < most and used[index] + item.cost <= room:
                taken.append(item)
                used[index] += item.cost
                break
        else:
            bins.append([item])
            used.append(item.cost)
    order = {BLOCK_ORDER[i]: i for i in range(len(BLOCK_ORDER))}
    requests = [Request(tuple(sorted(taken, key=lambda i: (order[i.area], i.db, i.start))))
                for taken in bins]
    return sorted(requests, key=lambda r: (order[r.items[0].area], r.items[0].db,
                                           r.items[0].start))


def describe(requests: list[Request], pdu: int) -> list[str]:
    """The plan as text: one line per request, one per item with its points."""
    lines = []
    for number, request in enumerate(requests, start=1):
        lines.append(f"request {number}: {len(request.items)} item(s), answer "
                     f"{request.answer_bytes} of {pdu} bytes")
        for item in request.items:
            names = ", ".join(dict.fromkeys(span.key for span in item.spans))
            lines.append(f"  {item.text():<24} {item.size:>4} bytes ({item.unused} unused): "
                         f"{names}")
    return lines
