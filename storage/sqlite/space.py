"""Room to make progress on a full disk: the space reserve and a WAL kept short.

How this works: a store that refuses new messages once the disk is short (`min_free_bytes`)
still has to commit what frees space (subscribers' acknowledgements, deletes) and what it
already promised (a session whose CONNACK waits), and every commit first appends pages to
the WAL. So the store keeps two things in its state directory:

- `SpaceReserve`: a preallocated file (`outpost.db-reserve`, `RESERVE_BYTES`). When a commit
  fails because the disk is full, the store deletes it and commits again into its room, and
  stops accepting new QoS 1/2 messages. It is created again (and the store accepts again)
  once the file system has room for it twice over: no restart is needed. At start it is
  deleted before the database is opened if the disk has less free space than its size.
- `bound_wal`: after a commit, the WAL is checkpointed and truncated to zero when it has grown
  past its limit (a reader kept checkpoints from resetting it) or when the disk has less
  free space than twice that limit, so the WAL never eats the last of the headroom.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
from pathlib import Path

log = logging.getLogger("outpost.storage")

RESERVE_NAME = "outpost.db-reserve"
RESERVE_BYTES = 2 << 20


def disk_full(exc: BaseException) -> bool:
    """Did SQLite fail for want of space (SQLITE_FULL, any extended code)?"""
    code = getattr(exc, "sqlite_errorcode", None)
    return (isinstance(exc, sqlite3.Error) and code is not None
            and code & 0xFF == sqlite3.SQLITE_FULL)


def free_bytes(directory: Path) -> int:
    """Bytes an unprivileged process may still write on the file system of `directory`."""
    st = os.statvfs(directory)
    return st.f_bavail * st.f_frsize


class SpaceReserve:
    """A preallocated file the store deletes to get room for commits on a full disk."""

    def __init__(self, path: Path, size: int = RESERVE_BYTES) -> None:
        self.path = path
        self.size = size
        self._lock = threading.Lock()  # released on the writer thread, made on the loop's
        self.present = size == 0 or path.exists()  # size 0: no reserve

    def ensure(self, free: int) -> bool:
        """Make the reserve if it is missing and `free` bytes leave room for it twice over;
        True when the reserve exists afterwards."""
        with self._lock:
            if self.present:
                return True
            if free < 2 * self.size:
                return False
            try:
                fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o600)
                try:
                    os.posix_fallocate(fd, 0, self.size)
                    os.fsync(fd)
                finally:
                    os.close(fd)
            except OSError as exc:
                self.path.unlink(missing_ok=True)
                log.warning("cannot make the space reserve %s: %s", self.path, exc)
                return False
            self.present = True
            log.info("space reserve %s in place (%d bytes)", self.path, self.size)
            return True

    def release(self) -> bool:
        """Delete the reserve; True when there was one to give back."""
        with self._lock:
            if not self.present or self.size == 0:
                return False
            self.path.unlink(missing_ok=True)
            self.present = False
            return True


def bound_wal(conn: sqlite3.Connection, wal: Path, limit: int, free: int) -> bool:
    """Checkpoint and truncate the WAL when it is over `limit` bytes or `free` is below twice
    that; True when a checkpoint ran (it may still leave pages a reader needs)."""
    try:
        size = wal.stat().st_size
    except FileNotFoundError:
        return False
    if size == 0 or (size <= limit and free >= 2 * limit):
        return False
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
    return True
