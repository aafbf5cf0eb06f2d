"""`HistoryReader`: reads the history file beside its writer (any thread, any process).

How this works: every question is asked inside `view()`, one read transaction on a read-only
connection, so the writer's compaction (frames -> blocks) is seen either wholly or not at all.
Raw samples come from the point's blocks plus the frames not yet compacted; buckets come from
the aggregate table of the resolution asked (`agg_1m`, `agg_15m`) plus the frames' samples
bucketed on the fly, or from the raw samples for steps under a minute.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from storage.history.codec import NUMERIC, OTHER, Series, decode_block, decode_frame
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


class HistoryReader:
    """Opens a read transaction on `path` per `view()`."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @contextmanager
    def view(self) -> Iterator[HistoryView]:
        """One consistent snapshot of the file."""
        conn = open_reader(self.path)
        try:
            conn.execute("BEGIN")
            yield HistoryView(conn)
        finally:
            conn.close()


class HistoryView:
    """Questions to one snapshot."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self._frames: list[bytes] | None = None

    def points(self) -> list[str]:
        """Every point name the history has seen, sorted."""
        return [row[0] for row in self.conn.execute("SELECT name FROM points ORDER BY name")]

    def point(self, name: str) -> PointInfo | None:
        row = self.conn.execute("SELECT id, unit FROM points WHERE name = ?", (name,)).fetchone()
        return None if row is None else PointInfo(int(row[0]), name, row[1])

    def _frame_series(self, point: PointInfo) -> list[Series]:
        if self._frames is None:
            self._frames = [row[0] for row in
                            self.conn.execute("SELECT data FROM frames ORDER BY id")]
        return [series for data in self._frames for _, series in decode_frame(data, point.id)]

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
