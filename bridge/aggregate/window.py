"""Aligned windows over one point's samples: time-weighted mean, min, max, first, last (pure).

How this works: a point's samples describe a step signal: each value holds from its time until
the next sample (`None`, a bad or non-numeric reading, ends the hold: the signal is unknown
until the next good sample). `WindowAccumulator` integrates that signal over windows aligned
to UTC (a window is `[k·width, (k+1)·width)` in epoch milliseconds):

- `add(ts_ms, value)` closes every window that ended at or before `ts_ms` and returns them,
  then takes the sample into the open window;
- `advance(now_ms)` does the same without a sample (the runtime's clock tick), so a window
  closes when its time is over even if the point is quiet;
- a window opens at the first sample inside it, or at its start when a value is held across
  the boundary: the first sample of a window is weighted from the window's start with the
  value carried from the previous window, so a window's mean covers the whole window;
- closed `Window`s carry the time-weighted mean (∫ value dt / covered time), min and max of
  the signal over the window (the carried value included), first, last and count of the
  samples inside it, `covered_ms` (how long the signal was known) and `partial`: the window
  was not watched whole (covered < width: the first window after a start, a gap) or the
  process was interrupted inside it (`restore`).

Times never go back: a sample older than the last one (a wall clock stepped back) counts at
the last one's time. No clock is read and nothing is written here; the runtime
(bridge/aggregate/publisher.py) passes the times in and saves `snapshot()`s.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

#: a step that would close more windows than this (a clock jumped years ahead) drops the
#: held value instead: windows of nothing but a carried value are not worth 10,000 messages
MAX_WINDOWS_PER_STEP: Final = 10_000


@dataclass(frozen=True, slots=True)
class Window:
    """A closed window of one point."""

    start_ms: int
    end_ms: int
    mean: float | None  # time-weighted; None when the signal was never known in the window
    min: float | None
    max: float | None
    first: float | None  # the samples inside the window (None: no sample, value carried)
    last: float | None
    count: int
    covered_ms: int  # how long the signal was known (the mean's weight)
    partial: bool


class WindowAccumulator:
    """The open window and the held value of one point."""

    __slots__ = ("count", "covered", "cursor", "first", "held", "hi", "interrupted", "last",
                 "lo", "start", "weighted", "width")

    def __init__(self, width_ms: int) -> None:
        if width_ms <= 0:
            raise ValueError(f"window width must be positive, got {width_ms} ms")
        self.width = width_ms
        self.start: int | None = None  # the open window's start (None: no window open)
        self.weighted = 0.0  # ∫ value dt in value·ms
        self.covered = 0
        self.lo: float | None = None
        self.hi: float | None = None
        self.first: float | None = None
        self.last: float | None = None
        self.count = 0
        self.interrupted = False
        self.held: float | None = None  # the signal's value now (None: unknown)
        self.cursor: int | None = None  # integrated up to this time

    def add(self, ts_ms: int, value: float | None) -> list[Window]:
        """Take a sample (None: the signal is unknown from now on); the windows it closed."""
        if self.cursor is not None and ts_ms < self.cursor:
            ts_ms = self.cursor
        closed = self.advance(ts_ms)
        if self.start is None:
            if value is None:
                self.cursor = ts_ms
                self.held = None
                return closed
            self._open(ts_ms - ts_ms % self.width, carried=None)
        self._hold_until(ts_ms)
        if value is not None:
            self.count += 1
            if self.first is None:
                self.first = value
            self.last = value
            self.lo = value if self.lo is None else min(self.lo, value)
            self.hi = value if self.hi is None else max(self.hi, value)
        self.held = value
        return closed

    def advance(self, now_ms: int) -> list[Window]:
        """Close every window that ended at or before `now_ms`; integrate up to it."""
        closed: list[Window] = []
        if self.cursor is not None and now_ms < self.cursor:
            return closed
        while self.start is not None and self.start + self.width <= now_ms:
            end = self.start + self.width
            self._hold_until(end)
            closed.append(self._close())
            if self.held is None:
                self.start = None
            elif len(closed) >= MAX_WINDOWS_PER_STEP:
                self.start, self.held = None, None
            else:
                self._open(end, carried=self.held)
        if self.start is not None:
            self._hold_until(now_ms)
        else:
            self.cursor = now_ms if self.cursor is None else max(self.cursor, now_ms)
        return closed

    def _open(self, start: int, carried: float | None) -> None:
        self.start = start
        self.weighted, self.covered, self.count = 0.0, 0, 0
        self.lo = self.hi = carried
        self.first = self.last = None
        self.interrupted = False
        if self.cursor is None or self.cursor < start:
            self.cursor = start

    def _hold_until(self, ts_ms: int) -> None:
        if self.cursor is None:
            self.cursor = ts_ms
            return
        if ts_ms <= self.cursor:
            return
        if self.held is not None:
            self.weighted += self.held * (ts_ms - self.cursor)
            self.covered += ts_ms - self.cursor
        self.cursor = ts_ms

    def _close(self) -> Window:
        assert self.start is not None
        return Window(
            self.start, self.start + self.width,
            self.weighted / self.covered if self.covered > 0 else None,
            self.lo, self.hi, self.first, self.last, self.count, self.covered,
            self.interrupted or self.covered < self.width,
        )

    # -- saved and restored ----------------------------------------------------------------

    def snapshot(self) -> dict[str, Any] | None:
        """The open window as JSON-able data (None: nothing open, nothing to save)."""
        if self.start is None:
            return None
        return {"start": self.start, "weighted": self.weighted, "covered": self.covered,
                "min": self.lo, "max": self.hi, "first": self.first, "last": self.last,
                "count": self.count, "cursor": self.cursor, "held": self.held}

    @classmethod
    def restore(cls, width_ms: int, saved: dict[str, Any]) -> WindowAccumulator:
        """An accumulator whose open window is one a previous process saved: it is marked
        interrupted (its window closes `partial`), and the held value is dropped (what the
        point did between the save and now is unknown). Raises ValueError on bad data."""
        acc = cls(width_ms)
        try:
            start, cursor = int(saved["start"]), int(saved["cursor"])
            if start % width_ms or not start <= cursor <= start + width_ms:
                raise ValueError(f"window start {start} / cursor {cursor} do not fit a "
                                 f"{width_ms} ms window")
            acc.start, acc.cursor = start, cursor
            acc.weighted, acc.covered = float(saved["weighted"]), int(saved["covered"])
            acc.count = int(saved["count"])
            acc.lo, acc.hi = _number(saved["min"]), _number(saved["max"])
            acc.first, acc.last = _number(saved["first"]), _number(saved["last"])
        except (KeyError, TypeError) as exc:
            raise ValueError(f"saved window is incomplete: {exc!r}") from None
        acc.interrupted = True
        return acc


def _number(value: object) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"not a number: {value!r}")
    return float(value)
