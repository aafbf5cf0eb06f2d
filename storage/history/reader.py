"""`HistoryReader`: reads the history file beside its writer (any thread, any process).

How this works: every question is asked inside `view()`, one read transaction on a read-only
connection, so the writer's compaction (frames -> blocks) is seen either wholly or not at all.
Raw samples come from the point's blocks plus the frames not yet compacted; buckets come from
the aggregate table of the resolution asked (`agg_1m`, `agg_15m`) plus the frames' samples
bucketed on the fly, or from the raw samples for steps under a minute.

The writer's process may also hand its reader the values it received but has not flushed
yet (`unflushed`, up to a flush interval of them): a view takes them before its snapshot and
counts them as one more frame, keeping only those newer than the newest sample the file holds
for their point. So a value is never missing between the writer's queue and the file, and
one the flush committed in between is not counted twice.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Protocol

from storage.history.codec import (
    NUMERIC,
    OTHER,
    QUALITY_CODES,
    Sample,
    Series,
    decode_block,
    decode_frame,
    kind_of,
)
from storage.history.downsample import Buckets, add_rows, add_samples, bucket_rows
from storage.history.schema import AGGREGATE_TABLES, open_reader

RESOLUTIONS: Final = (0, 60_000, 900_000)  # raw, 1 minute, 15 minutes
BucketRow = tuple[int, int, float, float, float]  # (start, n, min, max, mean)


@dataclass(frozen=True, slots=True)
class PointInfo:
    """A point the history knows."""

    id: int
    name: str
    unit: str | None


class Unflushed(Protocol):
    """The values a writer holds in memory, as of one moment."""

    def names(self) -> Iterable[str]:
        """The points among them."""

    def samples(self, name: str) -> Sequence[Sample]:
        """Those of one point, in the order received."""


class HistoryReader:
    """Opens a read transaction on `path` per `view()`; `unflushed`, when given, is called
    for the writer's values not in the file yet (see the module comment)."""

    def __init__(self, path: Path, unflushed: Callable[[], Unflushed] | None = None) -> None:
        self.path = path
        self.unflushed = unflushed

    @contextmanager
    def view(self) -> Iterator[HistoryView]:
        """One consistent snapshot of the file (and of the writer's queue just before it)."""
        unflushed = self.unflushed() if self.unflushed is not None else None
        conn = open_reader(self.path)
        try:
            conn.execute("BEGIN")
            conn.execute("SELECT count(*) FROM points").fetchone()  # the snapshot starts here
            yield HistoryView(conn, unflushed)
        finally:
            conn.close()


class HistoryView:
    """Questions to one snapshot."""

    def __init__(self, conn: sqlite3.Connection, unflushed: Unflushed | None = None) -> None:
        self.conn = conn
        self.unflushed = unflushed
        self._frames: list[bytes] | None = None
        self._newer: dict[str, list[Series]] = {}  # per point: its unflushed samples kept

    def points(self) -> list[str]:
        """Every point name the history has seen, sorted."""
        stored = [row[0] for row in self.conn.execute("SELECT name FROM points")]
        return sorted({*stored, *(self.unflushed.names() if self.unflushed else ())})

    def point(self, name: str) -> PointInfo | None:
        row = self.conn.execute("SELECT id, unit FROM points WHERE name = ?", (name,)).fetchone()
        if row is not None:
            return PointInfo(int(row[0]), name, row[1])
        waiting = self.unflushed.samples(name) if self.unflushed else ()
        return PointInfo(-1, name, waiting[-1][1]) if waiting else None  # not flushed yet

    def _frame_series(self, point: PointInfo) -> list[Series]:
        """The samples not compacted yet: the file's frames, then the writer's unflushed."""
        if self._frames is None:
            self._frames = [row[0] for row in
                            self.conn.execute("SELECT data FROM frames ORDER BY id")]
        found = [series for data in self._frames for _, series in decode_frame(data, point.id)]
        newer = self._newer.get(point.name)
        if newer is None:  # parsed and filtered once per point and view
            newer = self._newer[point.name] = self._newer_than_file(point, found)
        return found + newer

    def _newer_than_file(self, point: PointInfo, frames: list[Series]) -> list[Series]:
        """The unflushed samples newer than the newest the file holds for `point` (one series
        per kind), so a flush committed after they were taken does not count them twice."""
        waiting = self.unflushed.samples(point.name) if self.unflushed else ()
        if not waiting:
            return []
        (in_blocks,) = self.conn.execute("SELECT max(t1) FROM blocks WHERE point_id = ?",
                                         (point.id,)).fetchone()
        times = [max(series.ts) for series in frames if series.ts]
        newest = max([*times, in_blocks] if in_blocks is not None else times, default=None)
        by_kind: dict[int, Series] = {}
        for _, _, ts_ms, value, quality in waiting:
            if newest is None or ts_ms > newest:
                kind = kind_of(value)
                by_kind.setdefault(kind, Series(kind)).add(ts_ms, _stored(value, kind),
                                                           QUALITY_CODES.get(quality, 2))
        return list(by_kind.values())

    def raw(self, point: PointInfo, since_ms: int, until_ms: int) -> Series:
        """The samples with since <= ts < until in time order (OTHER when any value is not a
        number: then numbers stay numbers and the kinds interleave)."""
        parts = [decode_block(kind, data) for kind, data in self.conn.execute(
            "SELECT kind, data FROM blocks WHERE point_id = ? AND t1 >= ? AND t0 < ? "
            "ORDER BY t0", (point.id, since_ms, until_ms))]
        parts += self._frame_series(point)
        kinds = {part.kind for part in parts}
        merged = Series(OTHER if OTHER in kinds else NUMERIC)
        for part in parts:
            for t, value, quality in zip(part.ts, part.values, part.quality, strict=True):
                if since_ms <= t < until_ms:
                    merged.add(t, value, quality)
        merged.sort()
        return merged

    def raw_count(self, point: PointInfo, since_ms: int, until_ms: int) -> int:
        """How many raw samples lie in [since, until) (only the blocks across an edge are
        decoded)."""
        inside = self.conn.execute(
            "SELECT coalesce(sum(n), 0) FROM blocks WHERE point_id = ? AND t0 >= ? AND t1 < ?",
            (point.id, since_ms, until_ms)).fetchone()[0]
        edges = [decode_block(kind, data) for kind, data in self.conn.execute(
            "SELECT kind, data FROM blocks WHERE point_id = ? AND t1 >= ? AND t0 < ? "
            "AND NOT (t0 >= ? AND t1 < ?)", (point.id, since_ms, until_ms, since_ms, until_ms))]
        edges += self._frame_series(point)
        return int(inside) + sum(since_ms <= t < until_ms for s in edges for t in s.ts)

    def oldest(self, point: PointInfo, resolution: int) -> int | None:
        """The time of the oldest data kept at `resolution` (0: raw), None when there is none
        (the frames count as raw and as every aggregate: compaction turns them into both)."""
        if resolution == 0:
            # The block that ends first (found by the index) starts first, give or take a
            # clock step: the whole list of a point's blocks is not read for this.
            row = self.conn.execute("SELECT t0 FROM blocks WHERE point_id = ? ORDER BY t1 "
                                    "LIMIT 1", (point.id,)).fetchone() or (None,)
        else:
            row = self.conn.execute(
                f"SELECT min(t) FROM {AGGREGATE_TABLES[resolution]} WHERE point_id = ?",
                (point.id,)).fetchone()
        frames = [s.ts[0] for s in self._frame_series(point)
                  if s.ts and (resolution == 0 or s.kind == NUMERIC)]
        found = [t for t in [row[0], *frames] if t is not None]
        return min(found) if found else None

    def buckets(self, point: PointInfo, since_ms: int, until_ms: int, step_ms: int,
                resolution: int) -> list[BucketRow]:
        """Numeric buckets of `step_ms` over [since, until) made from the data kept at
        `resolution` (0: raw samples; else a stored aggregate whose resolution divides the
        step), plus the frames not yet compacted."""
        buckets: Buckets = {}
        if resolution == 0:
            raw = self.raw(point, since_ms, until_ms)
            values = [v if isinstance(v, int | float) and not isinstance(v, bool) else None
                      for v in raw.values]
            add_samples(buckets, raw.ts, values, step_ms)
            return bucket_rows(buckets)
        if step_ms % resolution:
            raise ValueError(f"a step of {step_ms} ms is not a multiple of {resolution} ms")
        table = AGGREGATE_TABLES[resolution]
        # Rows of a partly covered first window are left out (they hold older samples too).
        first = since_ms + (-since_ms) % resolution
        add_rows(buckets, self.conn.execute(
            f"SELECT t, n, min, max, mean FROM {table} WHERE point_id = ? AND t >= ? "
            f"AND t < ? ORDER BY t", (point.id, first, until_ms)), step_ms)
        for series in self._frame_series(point):
            if series.kind == NUMERIC:
                add_samples(buckets, series.ts, series.values, step_ms, first, until_ms)
        return bucket_rows(buckets)



def _stored(value: Any, kind: int) -> Any:
    """A value as a frame gives it back (a number as a float)."""
    return float(value) if kind == NUMERIC and value is not None else value
