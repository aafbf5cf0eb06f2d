"""Holding a slow, pipelining publisher's acknowledgements so its messages share a commit.

How this works: a durable PUBACK / PUBREC waits for the store's commit, and with
`durability = "full"` every commit is an fsync that writes at least one 4 KiB block. The
store's own pacer gathers the messages of a fast stream into one commit, but at a few
messages per second each message arrives after the previous commit has finished, so each is
its own fsync (flash wear: ~6.8 KiB written per 64-byte message at 10 msg/s). Waiting a
while before committing would fix that for a publisher that keeps several messages in
flight, and would cost one that waits for each PUBACK (lock-step) the whole wait per
message. The two can only be told apart by holding an acknowledgement and watching.

Every connection that has had a durable acknowledgement gets an `AckPace`: the average gap
between its acknowledged publishes, when the oldest acknowledgement still waiting for a
commit was requested, whether other output is waiting too, and what was learned about its
window. Before each commit the server asks `hold_until` for every connection the commit
would answer. The commit waits while all of them are publishers with a gap between
MIN_GAP and half the hold (faster streams are the pacer's; slower ones would not send a
second message in time), have fewer than half their window (or of the server's Receive
Maximum) outstanding, so they never stop for us while the commit runs, and have sent their
next message when expected. The wait ends at the first of: `seconds` after the oldest
acknowledgement, a publisher OVERDUE_GAPS gaps late
(it waits for us: its outstanding count is its window, 1 for a lock-step publisher), other
output for a held connection (a delivery is never delayed), or a connection that cannot be
held. A learned window is forgotten after RELEARN_SECONDS, so a publisher that only paused
is tried again; a lock-step publisher so pays one overdue wait a minute. While it holds, the
server tells the hooks when it will flush (`BrokerHooks.flush_coming`), so that the store's
idle commit does not commit the held messages on its own.

Nothing is acknowledged before its commit: durability is unchanged, only the time of the
acknowledgement moves.
"""

from __future__ import annotations

from collections.abc import Iterable

# Publishers faster than this (about 200 msg/s) are batched by the store's pacer already.
MIN_GAP = 0.005
# A publisher whose next message is this many average gaps late is waiting for our PUBACK.
OVERDUE_GAPS = 3.0
# How long a learned window (a lock-step publisher's is 1) is trusted.
RELEARN_SECONDS = 60.0
_SMOOTHING = 0.25  # weight of the newest gap in the average


class AckPace:
    """One publisher's durable acknowledgements, as `hold_until` needs them."""

    __slots__ = ("gap", "last", "other", "since", "window", "window_until")

    def __init__(self) -> None:
        self.last: float | None = None  # when its latest acknowledged publish arrived
        self.gap: float | None = None  # average gap between acknowledged publishes
        self.since: float | None = None  # its oldest acknowledgement waiting for a commit
        self.other = False  # output other than acknowledgements waits behind the commit
        self.window = 0  # most acknowledgements it keeps outstanding (0: unknown)
        self.window_until = 0.0

    def acknowledged(self, now: float) -> None:
        """A PUBACK / PUBREC for a publish that arrived `now` waits for the next commit."""
        last = self.last
        if last is not None:
            gap = now - last
            self.gap = gap if self.gap is None else self.gap + _SMOOTHING * (gap - self.gap)
        self.last = now
        if self.since is None:
            self.since = now

    def committing(self) -> None:
        """What waited is in the commit that starts now."""
        self.since = None
        self.other = False


def hold_until(
    waiting: Iterable[tuple[AckPace | None, int]], seconds: float, receive_maximum: int,
    now: float,
) -> float | None:
    """Until when the next commit may wait for more acknowledgements, or None: commit now.

    `waiting` holds, for every connection the commit would answer, its pace (None: it waits
    for something other than a publish's acknowledgement, a CONNACK or SUBACK say) and how
    many acknowledgements it has outstanding. A publisher found overdue has its window
    learned here.
    """
    if seconds <= 0:
        return None
    deadline = None
    for pace, outstanding in waiting:
        if pace is None or pace.other or pace.since is None or pace.last is None:
            return None
        gap = pace.gap
        if gap is None or gap < MIN_GAP or 2 * gap > seconds:
            return None
        if pace.window and now >= pace.window_until:
            pace.window = 0
        # Half its window: the publisher never stops for us while the commit runs.
        if 2 * outstanding >= (pace.window or receive_maximum):
            return None
        overdue = pace.last + OVERDUE_GAPS * gap
        if now >= overdue:
            pace.window, pace.window_until = outstanding, now + RELEARN_SECONDS
            return None
        until = min(pace.since + seconds, overdue)
        if deadline is None or until < deadline:
            deadline = until
    if deadline is None or now >= deadline:
        return None
    return deadline
