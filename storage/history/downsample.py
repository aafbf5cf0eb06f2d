"""Buckets: the min, max and mean of the samples in aligned time windows (pure).

The mean is the sample mean (sum / count), not time-weighted: it merges exactly, so a
15-minute bucket made of fifteen 1-minute rows, a read-time 5-minute step made of 1-minute
rows, and one made of the raw samples all give the same figure. A bucket starts at a multiple
of its step since the epoch (UTC) and holds the samples with start <= ts < start + step.
None values (a bad reading) are not counted.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass


@dataclass(slots=True)
class Bucket:
    """Running figures of one window."""

    n: int
    low: float
    high: float
    total: float

    def add(self, value: float) -> None:
        self.n += 1
        self.total += value
        self.low = min(self.low, value)
        self.high = max(self.high, value)

    def merge(self, n: int, low: float, high: float, mean: float) -> None:
        self.n += n
        self.total += mean * n
        self.low = min(self.low, low)
        self.high = max(self.high, high)

    @property
    def mean(self) -> float:
        return self.total / self.n


Buckets = dict[int, Bucket]  # window start (epoch ms) -> its figures


def add_samples(buckets: Buckets, ts: Sequence[int], values: Sequence[float | None],
                step_ms: int, since_ms: int | None = None, until_ms: int | None = None) -> None:
    """Adds the numeric samples within [since_ms, until_ms) into `buckets` of `step_ms`."""
    for t, value in zip(ts, values, strict=True):
        if value is None or (since_ms is not None and t < since_ms) or (
                until_ms is not None and t >= until_ms):
            continue
        start = t - t % step_ms
        bucket = buckets.get(start)
        if bucket is None:
            buckets[start] = Bucket(1, value, value, value)
        else:
            bucket.add(value)


def add_rows(buckets: Buckets, rows: Iterable[tuple[int, int, float, float, float]],
             step_ms: int) -> None:
    """Merges stored aggregate rows `(start, n, min, max, mean)` into `buckets` of `step_ms`
    (a multiple of the rows' own resolution)."""
    for t, n, low, high, mean in rows:
        start = t - t % step_ms
        bucket = buckets.get(start)
        if bucket is None:
            buckets[start] = Bucket(n, low, high, mean * n)
        else:
            bucket.merge(n, low, high, mean)


def bucket_rows(buckets: Buckets) -> list[tuple[int, int, float, float, float]]:
    """`(start, n, min, max, mean)` in time order."""
    return [(start, b.n, b.low, b.high, b.mean) for start, b in sorted(buckets.items())]
