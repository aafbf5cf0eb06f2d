"""ReadPropertyMultiple planning: the points' objects in as few requests as the APDU size allows.

How this works: every object asked for costs a known number of bytes in the request (its
identifier, the list's opening and closing tags, two bytes per property) and at most a known
number in the answer: the identifier, the tags, and per property its identifier, the value's
opening and closing tags and the value itself or an error (class and code), 9 bytes at most
for the properties read here (a REAL, an unsigned or enumerated of up to 4 bytes, a 4-bit
status-flags, an error of two enumerations). Objects are packed in configuration order into
requests while both the request and the worst-case answer fit the APDU size (the device's
max-APDU-length-accepted, capped at the configured `max_apdu`): no answer is ever segmented.
All objects cost the same per property, so the greedy fill is the minimum: ceil(objects /
objects per answer).

Pure.
"""

from __future__ import annotations

from dataclasses import dataclass

REQUEST_HEADER = 4  # a confirmed request's APDU header
ANSWER_HEADER = 3  # a complex ack's APDU header
PER_OBJECT = 7  # the object identifier (5) and the list's opening and closing tags
PER_PROPERTY_ASKED = 2
PER_PROPERTY_ANSWERED = 9


@dataclass(frozen=True, slots=True)
class Read:
    """One ReadPropertyMultiple: (object type, instance, properties) per object."""

    objects: tuple[tuple[int, int, tuple[int, ...]], ...]

    @property
    def answer_bytes(self) -> int:
        """The largest answer it may get."""
        return ANSWER_HEADER + sum(PER_OBJECT + PER_PROPERTY_ANSWERED * len(props)
                                   for _, _, props in self.objects)


def plan_reads(objects: list[tuple[int, int, tuple[int, ...]]], max_apdu: int) -> list[Read]:
    """The requests that read every object's properties, none larger than `max_apdu`."""
    reads: list[Read] = []
    current: list[tuple[int, int, tuple[int, ...]]] = []
    asked, answered = REQUEST_HEADER, ANSWER_HEADER
    for obj in objects:
        props = len(obj[2])
        ask = PER_OBJECT + PER_PROPERTY_ASKED * props
        answer = PER_OBJECT + PER_PROPERTY_ANSWERED * props
        if current and (asked + ask > max_apdu or answered + answer > max_apdu):
            reads.append(Read(tuple(current)))
            current, asked, answered = [], REQUEST_HEADER, ANSWER_HEADER
        current.append(obj)
        asked += ask
        answered += answer
    if current:
        reads.append(Read(tuple(current)))
    return reads
