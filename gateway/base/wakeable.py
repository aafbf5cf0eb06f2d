"""A sleep on the event loop that another callback can cut short.

How this works: `until` waits for a future that a timer resolves at the deadline; `wake`
resolves it early. One sleeper per owner: the store's commit pacer (a big batch ends its wait)
and the broker's acknowledgement hold (a new acknowledgement may end it).
"""

from __future__ import annotations

import asyncio


class WakeableSleep:
    """One task sleeps in `until`; any callback may `wake` it."""

    __slots__ = ("_wake",)

    def __init__(self) -> None:
        self._wake: asyncio.Future[None] | None = None

    @property
    def sleeping(self) -> bool:
        return self._wake is not None

    async def until(self, loop: asyncio.AbstractEventLoop, deadline: float) -> None:
        """Sleep until the loop's clock reaches `deadline`, or `wake` is called."""
        wake = self._wake = loop.create_future()
        handle = loop.call_at(deadline, _resolve, wake)
        try:
            await wake
        finally:
            handle.cancel()
            self._wake = None

    def wake(self) -> None:
        """End the sleep under way, if any."""
        if self._wake is not None:
            _resolve(self._wake)


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
