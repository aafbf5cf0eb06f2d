"""`HistoryStore`: the writer of `<state_dir>/history.db` (one thread uses it).

How this works: `write(samples)` is one flush: it groups the samples by point and kind and
appends them as one `frames` row, in one transaction with fsync (so a power cut loses at most
what came after the last flush). `compact(now_ms)` folds every frame into one `blocks` row
per point and kind and upserts the numeric samples' 1-minute and 15-minute aggregates (an
aggregate row that already exists is merged: count, min, max and sample mean combine
exactly), then deletes the frames, all in one transaction: a reader sees the samples either
in the frames or in the blocks, never twice. Writing a flush as one appended row and touching
each point's own pages only at compaction is what keeps the bytes written per sample small
(docs/history.md): a row per point per flush would rewrite a page per point per flush.

`retain(now_ms)` deletes what is older than each point's retention (storage/history/config.py)
and, while the file's live size is over `max_mb`, the oldest raw blocks, then the oldest
1-minute and 15-minute rows.
A file that is not a database (or is damaged) is moved aside as `history.db.corrupt-<time>`
and a new one started: history is worth less than a gateway that keeps running.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from collections.abc import Iterable
from pathlib import Path

from storage.history.codec import (
    NUMERIC,
    OTHER,
    QUALITY_CODES,
    Sample,
    Series,
    decode_frame,
    encode_block,
    encode_frame,
    kind_of,
)
from storage.history.config import HistoryConfig
from storage.history.downsample import Buckets, add_samples, bucket_rows
from storage.history.schema import AGGREGATE_TABLES, PAGE_SIZE, open_writer

log = logging.getLogger("outpost.history")

_UPSERT = ("INSERT INTO {table} (point_id, t, n, min, max, mean) VALUES (?, ?, ?, ?, ?, ?) "
           "ON CONFLICT (point_id, t) DO UPDATE SET n = n + excluded.n, "
           "min = min(min, excluded.min), max = max(max, excluded.max), "
           "mean = (mean * n + excluded.mean * excluded.n) / (n + excluded.n)")
SIZE_STEP_ROWS = 2000  # rows deleted per round while the file is over max_mb


class HistoryStore:
    """The history file's one writer (not thread-safe: one thread calls it)."""

    def __init__(self, path: Path, config: HistoryConfig) -> None:
        self.path = path
        self.config = config
        self.conn = _open_or_move_aside(path)
        self.ids: dict[str, int] = {}
        self.units: dict[str, str | None] = {}
        for point_id, name, unit in self.conn.execute("SELECT id, name, unit FROM points"):
            self.ids[name] = point_id
            self.units[name] = unit
        self.samples_written = 0
        self.flushes = 0
        self.compactions = 0

    def write(self, samples: Iterable[Sample]) -> int:
        """One flush: the samples as one frame, committed (fsync). Returns how many."""
        groups: dict[tuple[int, int], Series] = {}
        count = 0
        now_ms = int(time.time() * 1000)
        conn = self.conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            for name, unit, ts_ms, value, quality in samples:
                point_id = self.ids.get(name)
                if point_id is None:
                    point_id = self._add_point(name, unit)
                elif self.units[name] != unit:
                    conn.execute("UPDATE points SET unit = ? WHERE id = ?", (unit, point_id))
                    self.units[name] = unit
                kind = kind_of(value)
                series = groups.get((point_id, kind))
                if series is None:
                    series = groups[(point_id, kind)] = Series(kind)
                series.add(ts_ms, value, QUALITY_CODES.get(quality, 2))
                count += 1
            if count:
                entries = [(point_id, series) for (point_id, _), series in groups.items()]
                conn.execute("INSERT INTO frames (t_ms, data) VALUES (?, ?)",
                             (now_ms, encode_frame(entries)))
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        self.samples_written += count
        self.flushes += 1
        return count

    def _add_point(self, name: str, unit: str | None) -> int:
        cursor = self.conn.execute("INSERT INTO points (name, unit) VALUES (?, ?)", (name, unit))
        point_id = int(cursor.lastrowid or 0)
        self.ids[name] = point_id
        self.units[name] = unit
        return point_id

    def compact(self) -> int:
        """Folds every frame into per-point blocks and aggregates; returns the samples moved."""
        conn = self.conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            groups: dict[tuple[int, int], Series] = {}
            last = None
            for frame_id, data in conn.execute("SELECT id, data FROM frames ORDER BY id"):
                last = frame_id
                for point_id, series in decode_frame(data):
                    found = groups.get((point_id, series.kind))
                    if found is None:
                        groups[(point_id, series.kind)] = series
                    else:
                        found.extend(series)
            moved = 0
            for (point_id, kind), series in sorted(groups.items()):
                series.sort()
                conn.execute("INSERT INTO blocks (point_id, kind, t0, t1, n, data) "
                             "VALUES (?, ?, ?, ?, ?, ?)",
                             (point_id, kind, series.ts[0], series.ts[-1], len(series.ts),
                              encode_block(series)))
                moved += len(series.ts)
                if kind == NUMERIC:
                    for step_ms, table in AGGREGATE_TABLES.items():
                        buckets: Buckets = {}
                        add_samples(buckets, series.ts, series.values, step_ms)
                        conn.executemany(_UPSERT.format(table=table), [
                            (point_id, *row) for row in bucket_rows(buckets)])
            if last is not None:
                conn.execute("DELETE FROM frames WHERE id <= ?", (last,))
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        self.compactions += 1
        return moved

    def retain(self, now_ms: int) -> int:
        """Deletes what each point's retention no longer keeps, then the oldest data while the
        file is over `max_mb`; returns the rows deleted."""
        conn = self.conn
        deleted = 0
        conn.execute("BEGIN IMMEDIATE")
        try:
            for name, point_id in self.ids.items():
                keep = self.config.retention(name)
                for sql, cutoff in (
                    ("DELETE FROM blocks WHERE point_id = ? AND kind = ? AND t1 < ?",
                     (NUMERIC, now_ms - keep.raw_ms)),
                    # Values that are not numbers are not aggregated: kept as long as minutes.
                    ("DELETE FROM blocks WHERE point_id = ? AND kind = ? AND t1 < ?",
                     (OTHER, now_ms - keep.minute_ms)),
                    ("DELETE FROM agg_1m WHERE point_id = ? AND t < ?",
                     (now_ms - keep.minute_ms,)),
                    ("DELETE FROM agg_15m WHERE point_id = ? AND t < ?",
                     (now_ms - keep.quarter_ms,)),
                ):
                    deleted += conn.execute(sql, (point_id, *cutoff)).rowcount
            deleted += self._shrink()
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        return deleted

    def live_bytes(self) -> int:
        """The bytes of the file's pages in use (free pages are reused before it grows)."""
        pages = int(self.conn.execute("PRAGMA page_count").fetchone()[0])
        free = int(self.conn.execute("PRAGMA freelist_count").fetchone()[0])
        return (pages - free) * PAGE_SIZE

    def _shrink(self) -> int:
        limit = self.config.max_mb << 20
        deleted = 0
        for sql in (
            "DELETE FROM blocks WHERE id IN (SELECT id FROM blocks ORDER BY id LIMIT ?)",
            "DELETE FROM agg_1m WHERE (point_id, t) IN "
            "(SELECT point_id, t FROM agg_1m ORDER BY t LIMIT ?)",
            "DELETE FROM agg_15m WHERE (point_id, t) IN "
            "(SELECT point_id, t FROM agg_15m ORDER BY t LIMIT ?)",
        ):
            while self.live_bytes() > limit:
                rows = self.conn.execute(sql, (SIZE_STEP_ROWS,)).rowcount
                if rows <= 0:
                    break
                deleted += rows
        if deleted:
            log.warning("history: over max_mb (%d MiB): deleted the %d oldest rows",
                        self.config.max_mb, deleted)
        return deleted

    def close(self) -> None:
        self.conn.close()


def _open_or_move_aside(path: Path) -> sqlite3.Connection:
    # No quick_check: it reads the whole file, minutes for gigabytes on an SD card; a damaged
    # page further in fails the statement that reads it, and the recorder logs that.
    try:
        return open_writer(path)
    except sqlite3.DatabaseError as exc:
        reason = str(exc)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    for suffix in ("", "-wal", "-shm"):
        source = Path(f"{path}{suffix}")
        if source.exists():
            source.rename(f"{path}.corrupt-{stamp}{suffix}")
    log.error("history: %s is unusable (%s): moved aside as %s.corrupt-%s; starting an empty "
              "history", path, reason, path.name, stamp)
    return open_writer(path)
