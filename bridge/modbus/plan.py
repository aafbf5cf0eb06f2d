"""Read planning: the fewest requests that read every point of a poll group.

How this works: each point is a `Span` (table, wire address, size in registers or bits).
Spans of one table are sorted by address and swept left to right; a read grows to take the next
span while the whole read stays within the protocol limit (125 registers for FC 3/4, 2000 bits
for FC 1/2, or the device's lower limit) and the hole before the span is at most `max_gap`
registers (`max_gap * 16` bits for coils and discrete inputs). Reading across a hole costs a few
bytes on the wire; a request costs a round trip, so small holes are worth bridging.

The sweep is optimal: any read must start at the first span not yet covered, and taking as many
spans as fit never leaves the remaining spans harder to cover (the classic greedy argument for
covering points on a line with windows of bounded length). The planner is per (unit, table);
the poller calls it per (device, poll group).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

MAX_REGISTERS: Final = 125
MAX_BITS: Final = 2000
BIT_TABLES: Final = frozenset({"coil", "discrete"})
READ_FUNCTION: Final = {"coil": 1, "discrete": 2, "holding": 3, "input": 4}
TABLE_ORDER: Final = ("coil", "discrete", "holding", "input")


@dataclass(frozen=True, slots=True)
class Span:
    """One point's place on the wire (`address` is the 0-based wire address)."""

    key: str
    table: str
    address: int
    size: int

    @property
    def end(self) -> int:
        return self.address + self.size


@dataclass(frozen=True, slots=True)
class Read:
    """One read request: FC 1/2/3/4 from `address`, `count` registers or bits."""

    table: str
    address: int
    count: int
    spans: tuple[Span, ...]

    @property
    def function(self) -> int:
        return READ_FUNCTION[self.table]

    @property
    def unused(self) -> int:
        """Registers (or bits) read but belonging to no point."""
        covered: set[int] = set()
        for span in self.spans:
            covered.update(range(span.address, span.end))
        return self.count - len(covered)


def limit_for(table: str, max_registers: int = MAX_REGISTERS, max_bits: int = MAX_BITS) -> int:
    """The largest read allowed for a table."""
    return min(max_bits, MAX_BITS) if table in BIT_TABLES else min(max_registers, MAX_REGISTERS)


def plan_reads(
    spans: Iterable[Span],
    max_registers: int = MAX_REGISTERS,
    max_bits: int = MAX_BITS,
    max_gap: int = 0,
) -> list[Read]:
    """The minimal list of reads covering `spans`, in table then address order."""
    by_table: dict[str, list[Span]] = {}
    for span in spans:
        by_table.setdefault(span.table, []).append(span)
    reads: list[Read] = []
    for table in sorted(by_table, key=TABLE_ORDER.index):
        limit = limit_for(table, max_registers, max_bits)
        gap = max_gap * 16 if table in BIT_TABLES else max_gap
        ordered = sorted(by_table[table], key=lambda s: (s.address, -s.size, s.key))
        current: list[Span] = []
        start = end = 0
        for span in ordered:
            if span.size > limit:
                raise ValueError(f"{span.key}: {span.size} exceeds the read limit of {limit}")
            if current and max(end, span.end) - start <= limit and span.address - end <= gap:
                current.append(span)
                end = max(end, span.end)
                continue
            if current:
                reads.append(Read(table, start, end - start, tuple(current)))
            current, start, end = [span], span.address, span.end
        if current:
            reads.append(Read(table, start, end - start, tuple(current)))
    return reads


def split_gaps(read: Read) -> list[Read]:
    """The same spans read without crossing any hole (used when a device refuses a hole)."""
    return plan_reads(read.spans, max_registers=read.count, max_bits=read.count, max_gap=0)
