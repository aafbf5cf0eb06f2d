"""The history file's tables, and opening it for writing or reading.

- `points`: one row per `device/point` name (its id, its unit as last published).
- `frames`: one row per flush: every point's samples since the previous flush in one zlib
  blob (storage/history/codec.py). Appended at the end of the table, so a flush writes about
  the size of its data and not one page per point.
- `blocks`: one row per point and kind per compaction: that point's samples from the frames
  folded, one blob each; `blocks_point` finds a point's blocks by time.
- `agg_1m`, `agg_15m`: per point and aligned minute / quarter of an hour: count, min, max and
  sample mean of its numeric values (storage/history/downsample.py), clustered by
  `(point_id, t)` so that a point's range is one scan.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Final

FILE_NAME: Final = "history.db"  # in the state directory
SCHEMA_VERSION: Final = 1
PAGE_SIZE: Final = 4096
CHECKPOINT_PAGES: Final = 2048  # 8 MiB of WAL between checkpoints: the WAL file is reused

_TABLES = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS points (
    id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, unit TEXT);
CREATE TABLE IF NOT EXISTS frames (id INTEGER PRIMARY KEY, t_ms INTEGER NOT NULL,
    data BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS blocks (
    id INTEGER PRIMARY KEY, point_id INTEGER NOT NULL, kind INTEGER NOT NULL,
    t0 INTEGER NOT NULL, t1 INTEGER NOT NULL, n INTEGER NOT NULL, data BLOB NOT NULL);
CREATE INDEX IF NOT EXISTS blocks_point ON blocks (point_id, t1);
CREATE TABLE IF NOT EXISTS agg_1m (
    point_id INTEGER NOT NULL, t INTEGER NOT NULL, n INTEGER NOT NULL,
    min REAL NOT NULL, max REAL NOT NULL, mean REAL NOT NULL,
    PRIMARY KEY (point_id, t)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS agg_15m (
    point_id INTEGER NOT NULL, t INTEGER NOT NULL, n INTEGER NOT NULL,
    min REAL NOT NULL, max REAL NOT NULL, mean REAL NOT NULL,
    PRIMARY KEY (point_id, t)) WITHOUT ROWID;
"""
AGGREGATE_TABLES: Final = {60_000: "agg_1m", 900_000: "agg_15m"}


class HistoryFileError(Exception):
    """The history file cannot be used (not there, not a history file, newer schema)."""


def open_writer(path: Path) -> sqlite3.Connection:
    """The file opened for the one writer (created with its tables when missing)."""
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    try:
        conn.execute(f"PRAGMA page_size = {PAGE_SIZE}")  # only takes effect on a new file
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = FULL")  # a committed flush survives a power cut
        conn.execute(f"PRAGMA wal_autocheckpoint = {CHECKPOINT_PAGES}")
        conn.execute(f"PRAGMA journal_size_limit = {2 * CHECKPOINT_PAGES * PAGE_SIZE}")
        conn.execute("PRAGMA busy_timeout = 5000")
        conn.executescript(_TABLES)
        found = conn.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()
        if found is None:
            conn.execute("INSERT INTO meta VALUES ('schema', ?)", (SCHEMA_VERSION,))
        elif int(found[0]) > SCHEMA_VERSION:
            raise HistoryFileError(f"{path}: written by a newer outpost (schema {found[0]})")
    except BaseException:
        conn.close()
        raise
    return conn


def open_reader(path: Path) -> sqlite3.Connection:
    """The file opened read-only (beside a running writer: WAL lets both go on)."""
    if not path.exists():
        raise HistoryFileError(f"{path}: no history file (is [history] enabled, and is this "
                               f"the daemon's state directory?)")
    try:
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True,
                               isolation_level=None, check_same_thread=False)
        conn.execute("PRAGMA busy_timeout = 5000")
        conn.execute("SELECT 1 FROM points LIMIT 1").fetchall()
    except sqlite3.DatabaseError as exc:
        raise HistoryFileError(f"{path}: cannot read the history: {exc}") from None
    return conn
