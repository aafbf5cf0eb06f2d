"""When the next group commit starts: right away after a burst, later for a stream.

How this works: the store's commit task awaits `CommitPacer.wait()` before it takes the
batch. The pacer tells the two kinds of work apart by what happened during the previous
commit (`streaming`, set by the store when events arrived while it ran) and by how the batch
grows while it waits (`ops`, the store's event count). `grew()` is called for every stored
event so that BIG_BATCH events end any wait at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from gateway.base.wakeable import WakeableSleep

BIG_BATCH = 2000  # events that start a commit without waiting for the interval
# While events keep arriving, a commit may wait up to this long after the first request:
# at 1,000 msg/s that is ~50 messages per fsync instead of ~2 (flash wear).
COMMIT_STRETCH_SECONDS = 0.05
COMMIT_STRETCH_STEP = 0.005


class CommitPacer:
    """The group commit's timing policy (one per store, event loop only)."""

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self.streaming = False  # events arrived while the last commit ran
        self._sleeper = WakeableSleep()

    def grew(self, ops: int) -> None:
        """The batch now holds `ops` events: a big one ends the wait."""
        if ops >= BIG_BATCH:
            self._sleeper.wake()

    async def wait(
        self, loop: asyncio.AbstractEventLoop, first: float, ops: Callable[[], int]
    ) -> None:
        """Wait until the next commit should start (group commit), by what the work looks like.

        `first` is the loop time of the first flush that asked for this commit; `ops()` the
        number of events in the batch now.

        A burst (nothing arrived while the previous commit ran: the publishers wait for their
        PUBACKs, so every millisecond of waiting is theirs): the commit starts as soon as the
        event loop has read the input that is already there, within one `interval`.

        A stream (events kept arriving during a commit, or a burst still growing after an
        interval): the commit waits `interval` after the first request, then in steps of
        COMMIT_STRETCH_STEP as long as each step brings more events, up to
        COMMIT_STRETCH_SECONDS, so a steady 1,000 msg/s shares one fsync between tens of
        messages instead of two (flash wear). A first step that brings nothing means the
        stream has ended: the next commit is treated as a burst again. BIG_BATCH events end
        any wait at once.
        """
        interval = self.interval
        if interval <= 0:
            return
        if not self.streaming:
            seen = -1
            while ops() != seen and ops() < BIG_BATCH:
                if loop.time() - first >= interval:
                    self.streaming = True  # still growing after a whole interval
                    break
                seen = ops()
                await asyncio.sleep(0)  # one loop iteration: input already there is read
            else:
                return
        await self._sleep(loop, first + interval - loop.time())
        steps = 0
        while ops() < BIG_BATCH and loop.time() - first < COMMIT_STRETCH_SECONDS:
            seen = ops()
            await self._sleep(loop, COMMIT_STRETCH_STEP)
            if ops() == seen:
                if steps == 0:
                    self.streaming = False
                return
            steps += 1

    async def _sleep(self, loop: asyncio.AbstractEventLoop, delay: float) -> None:
        """Sleep up to `delay` seconds; BIG_BATCH events wake it early."""
        if delay > 0:
            await self._sleeper.until(loop, loop.time() + delay)
