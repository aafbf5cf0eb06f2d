"""Which occurrence of a repeated event gets a log line, and how client data appears in one.

Refusals and drops can come by the thousand (a flood, a full queue); each kind keeps its own
counter, which is published on `$SYS`, and logs only the first few occurrences and then one
every so many, so a flood cannot flood the journal (flash wear) while the log still says that
it goes on and how far. Events a client provokes at will (refused CONNECTs, protocol errors)
are counted per source address (`SourceCounts`), so one noisy address is sampled without
hiding the first lines about another.

Client ids, usernames and topics are the client's to choose, up to 65,535 bytes each, with any
character in them: `clip` makes them fit for a log line (escaped, cut, length stated).
"""

from __future__ import annotations

from collections import OrderedDict

CLIP_CHARS = 64  # characters of a client-supplied string kept in a log line


def worth_logging(count: int, every: int, first: int = 10) -> bool:
    """True for occurrences 1..`first` of an event, then for every `every`-th one."""
    return count <= first or count % every == 0


def clip(text: str | None, limit: int = CLIP_CHARS) -> str:
    """`text` (client-supplied) for a log line: control characters escaped, at most `limit`
    characters of it, and its full length when it was cut."""
    if text is None:
        return "(none)"
    shown = text[:limit]
    if not shown.isprintable():
        shown = repr(shown)[1:-1]  # a newline in a client id must not start a new log line
    if len(text) > limit:
        return f"{shown}...({len(text)} chars)"
    return shown


class SourceCounts:
    """How often an event came from each source address (the latest `max_sources` of them)."""

    def __init__(self, max_sources: int = 4096) -> None:
        self.max_sources = max_sources
        self._counts: OrderedDict[str, int] = OrderedDict()

    def add(self, source: str) -> int:
        """Count one more occurrence from `source`; returns its count."""
        count = self._counts.pop(source, 0) + 1
        self._counts[source] = count  # most recent last: the oldest is forgotten first
        if len(self._counts) > self.max_sources:
            self._counts.popitem(last=False)
        return count
