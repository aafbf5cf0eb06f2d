"""Which occurrence of a repeated event gets a log line.

Refusals and drops can come by the thousand (a flood, a full queue); each kind keeps its own
counter, which is published on `$SYS`, and logs only the first few occurrences and then one
every so many, so a flood cannot flood the journal (flash wear) while the log still says that
it goes on and how far.
"""

from __future__ import annotations


def worth_logging(count: int, every: int, first: int = 10) -> bool:
    """True for occurrences 1..`first` of an event, then for every `every`-th one."""
    return count <= first or count % every == 0
