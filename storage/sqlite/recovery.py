"""Opening the database file: lock, check, move a bad file aside, create, migrate.

Theory of operation: the broker must never refuse to start because of its own database (a
power cut can leave an SD card's file truncated or zero-filled, see mosquitto #2639). So
`open_database`:

1. takes an exclusive `flock` on `<state_dir>/outpost.lock`, held for the life of the store,
   so two brokers never share a file and `outpost db vacuum` can tell a broker is running;
2. opens an existing file and runs `PRAGMA quick_check`; a file that is not a database, is
   malformed, fails the check, or cannot be migrated is *moved aside* — renamed to
   `outpost.db.corrupt-<UTC timestamp>` together with its `-wal` and `-shm` (renamed so the
   pair still opens together for forensics) — with an ERROR log line, and the broker starts
   with an empty store. A file written by a newer outpost that this one cannot use (see
   schema.py: expand-then-contract) is moved aside the same way as
   `outpost.db.newer-<timestamp>` so an upgrade can bring it back;
3. errors that say nothing about the file (disk full, I/O error, permission) are raised:
   moving a good file aside because the disk is full would throw data away;
4. creates a new file with the chosen page size in WAL mode and applies pending migrations.

The number of files moved aside is kept in `meta.moved_aside` of the new database and
returned in `Opened.moved`.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path

from storage.sqlite import schema

log = logging.getLogger("outpost.storage")

DB_NAME = "outpost.db"
LOCK_NAME = "outpost.lock"
DEFAULT_PAGE_SIZE = 4096

# Errors that are about the environment, not the file: never move the file aside for these.
_ENVIRONMENT_ERRORS = {
    "SQLITE_FULL", "SQLITE_IOERR", "SQLITE_PERM", "SQLITE_CANTOPEN", "SQLITE_BUSY",
    "SQLITE_LOCKED", "SQLITE_READONLY", "SQLITE_NOMEM", "SQLITE_AUTH", "SQLITE_INTERRUPT",
}


class StoreLockedError(OSError):
    """Another process (a running broker) holds the state directory's lock."""


class UnreadableError(Exception):
    """The database file cannot be used; it will be moved aside."""

    def __init__(self, reason: str, kind: str = "corrupt") -> None:
        super().__init__(reason)
        self.kind = kind


@dataclass
class Opened:
    """What `open_database` found and did."""

    path: Path
    created: bool = False
    migrated: list[str] = field(default_factory=list)
    moved: list[Path] = field(default_factory=list)  # files moved aside (db, -wal, -shm)
    reason: str = ""


def lock_state_dir(state_dir: Path) -> int:
    """Take the exclusive lock of `state_dir`; returns the file descriptor to keep open."""
    state_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(state_dir / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise StoreLockedError(
            f"{state_dir / LOCK_NAME} is locked: another outpost is using this state directory"
        ) from None
    return fd


def unlock(fd: int) -> None:
    with contextlib.suppress(OSError):
        fcntl.flock(fd, fcntl.LOCK_UN)
    os.close(fd)


def connect(path: Path, readonly: bool = False) -> sqlite3.Connection:
    """A connection with explicit transactions (BEGIN/COMMIT written by us)."""
    if readonly:
        conn = sqlite3.connect(
            f"file:{path}?mode=ro", uri=True, isolation_level=None, check_same_thread=False
        )
        conn.execute("PRAGMA query_only = 1")
    else:
        conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA busy_timeout = 5000")
    return conn


def check_file(path: Path) -> None:
    """Raise `UnreadableError` unless `path` is a sound outpost database of a version we know."""
    try:
        conn = connect(path)
    except sqlite3.Error as exc:
        _classify(exc)
        raise
    try:
        rows = [str(r[0]) for r in conn.execute("PRAGMA quick_check")]
        if rows != ["ok"]:
            raise UnreadableError("quick_check: " + "; ".join(rows[:5]))
        tables = {str(r[0]) for r in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table'")}
        if tables and "_sqlite_migrations" not in tables:
            raise UnreadableError(f"not an outpost database (tables: {sorted(tables)[:5]})")
        if tables:
            try:  # a newer outpost's file is used as it is when its migrations allow it
                schema.readable_newer_migrations(conn)
            except schema.NewerSchemaError as exc:
                raise UnreadableError(f"written by a newer outpost: {exc}", "newer") from exc
    except sqlite3.Error as exc:
        _classify(exc)
        raise
    finally:
        conn.close()


def _classify(exc: sqlite3.Error) -> None:
    """Turn a file-level SQLite error into `UnreadableError`; leave environment errors alone."""
    name = getattr(exc, "sqlite_errorname", "") or ""
    if any(name.startswith(env) for env in _ENVIRONMENT_ERRORS):
        return
    raise UnreadableError(f"{name or type(exc).__name__}: {exc}") from exc


def move_aside(path: Path, kind: str) -> list[Path]:
    """Rename `path` and its -wal/-shm to `<name>.<kind>-<UTC timestamp>[-wal|-shm]`."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    base = path.with_name(f"{path.name}.{kind}-{stamp}")
    n = 1
    while base.exists():
        n += 1
        base = path.with_name(f"{path.name}.{kind}-{stamp}.{n}")
    moved: list[Path] = []
    for suffix in ("", "-wal", "-shm"):
        source = Path(f"{path}{suffix}")
        if source.exists():
            target = Path(f"{base}{suffix}")
            os.replace(source, target)
            moved.append(target)
    fsync_dir(path.parent)
    return moved


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def open_database(
    path: Path, gateway_id: str, page_size: int = DEFAULT_PAGE_SIZE
) -> Opened:
    """Check, repair by moving aside, create and migrate `path` (see the module comment)."""
    opened = Opened(path)
    if path.exists() and path.stat().st_size > 0:
        # Opening a file runs WAL recovery and, at close, may delete the WAL: keep a hard
        # link to it so a file that turns out to be bad is moved aside with its WAL intact.
        wal, keep = Path(f"{path}-wal"), Path(f"{path}-wal.keep")
        keep.unlink(missing_ok=True)
        if wal.exists():
            os.link(wal, keep)
        try:
            check_file(path)
            _migrate(path, gateway_id, opened)
            return opened
        except (UnreadableError, schema.NewerSchemaError) as exc:
            kind = exc.kind if isinstance(exc, UnreadableError) else "newer"
            opened.reason = str(exc)
            if keep.exists():
                os.replace(keep, wal)
            opened.moved = move_aside(path, kind)
            log.error(
                "database %s is unusable (%s): moved aside as %s; starting with an empty store",
                path, opened.reason, opened.moved[0].name,
            )
        finally:
            keep.unlink(missing_ok=True)
    elif path.exists():
        # A zero-length file: SQLite would treat it as new; remove leftovers of a lost WAL.
        for suffix in ("-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
    opened.created = True
    conn = connect(path)
    try:
        conn.execute(f"PRAGMA page_size = {int(page_size)}")
        conn.execute("PRAGMA journal_mode = WAL")
    finally:
        conn.close()
    _migrate(path, gateway_id, opened)
    if opened.moved:
        conn = connect(path)
        try:
            with conn:
                conn.execute("BEGIN")
                conn.execute(
                    "INSERT INTO meta (key, value) VALUES ('moved_aside', ?) "
                    "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                    (opened.moved[0].name,),
                )
        finally:
            conn.close()
    return opened


def _migrate(path: Path, gateway_id: str, opened: Opened) -> None:
    conn = connect(path)
    try:
        conn.execute("PRAGMA journal_mode = WAL")
        try:
            opened.migrated = schema.migrate(conn, gateway_id)
        except sqlite3.Error as exc:
            _classify(exc)
            raise
        if opened.migrated and not opened.created:
            log.info("database %s migrated: %s", path, ", ".join(opened.migrated))
    finally:
        conn.close()
