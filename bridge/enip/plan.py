"""Read planning: every point of a device in as few requests as the connection size allows.

How this works: a point is one Read Tag service (its tag's path and element count) whose
answer is at most `Read.answer` bytes (type and data: bridge/enip/values.py). Points are
packed, in configuration order, into Multiple Service Packets until the next one would make
the request or its largest possible answer exceed the connection size the controller granted
(Large Forward Open: up to 4,002 bytes; Forward Open: 504). A point whose answer alone is
larger goes in a request of its own and is read in fragments (Read Tag Fragmented) from the
first answer's end on. `describe` prints a plan (`outpost enip probe`).

Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from bridge.enip import wire

ANSWER_HEADER = 4 + 2  # the Multiple Service Packet answer's status and count
SERVICE_HEADER = 4  # reply service, reserved, status, extended status size


@dataclass(frozen=True, slots=True)
class Read:
    """One point's Read Tag."""

    key: str  # the point's name
    tag: str
    path: bytes
    elements: int
    answer: int  # most bytes of its answer's type and data

    @property
    def service(self) -> bytes:
        return wire.read_tag(self.path, self.elements)


@dataclass(slots=True)
class Request:
    """One Multiple Service Packet: its reads, and what it costs."""

    reads: list[Read] = field(default_factory=list)
    fragmented: bool = False  # one read larger than an answer: continued in fragments

    @property
    def services(self) -> list[bytes]:
        return [read.service for read in self.reads]

    @property
    def request_bytes(self) -> int:
        return wire.request_size(self.services)

    @property
    def answer_bytes(self) -> int:
        return answer_size(self.reads)


def answer_size(reads: list[Read]) -> int:
    """The most bytes a Multiple Service Packet's answer of these reads takes."""
    return ANSWER_HEADER + sum(2 + SERVICE_HEADER + read.answer for read in reads)


def limit(connection_size: int) -> int:
    """Bytes a request or an answer may take in a connection of that size (less the
    connected message's sequence count)."""
    return connection_size - 2


def plan_reads(reads: list[Read], connection_size: int) -> list[Request]:
    """The requests of one poll: as few as the connection size allows, in point order."""
    most = limit(connection_size)
    plan: list[Request] = []
    current = Request()
    for read in reads:
        if answer_size([read]) > most or wire.request_size([read.service]) > most:
            plan.append(Request([read], fragmented=True))
            continue
        candidate = [*current.reads, read]
        if current.reads and (answer_size(candidate) > most
                              or wire.request_size([r.service for r in candidate]) > most):
            plan.append(current)
            current = Request()
        current.reads.append(read)
    if current.reads:
        plan.append(current)
    return plan


def describe(plan: list[Request], connection_size: int) -> list[str]:
    """One line per request: its services, its bytes, the tags it reads."""
    lines = []
    for number, request in enumerate(plan, start=1):
        tags = ", ".join(f"{read.tag}" + (f" ({read.elements} elements)"
                                          if read.elements > 1 else "")
                         for read in request.reads)
        how = (f"read in fragments of at most {limit(connection_size) - 16} bytes"
               if request.fragmented else
               f"{request.request_bytes} bytes sent, at most {request.answer_bytes} answered")
        lines.append(f"request {number}: {len(request.reads)} tag(s), {how}: {tags}")
    return lines
