"""Rolling, atomically committed bronze files (gzipped JSON lines).

How this works: the writer keeps at most one *open* file: a hidden, still empty temporary
file ``.part-….json.gz.tmp`` inside its partition directory
``<root>/bronze/ingest_date=YYYY-MM-DD/ingest_hour=HH/`` (Spark ignores names starting with
``.``) and the records appended to it, kept in memory (at most ``roll_bytes`` of them). Each
appended record carries an opaque *token* (the lander uses the MQTT packet id).

Committing has two halves, so that the lander can go on receiving while a file is made
durable: :meth:`BronzeWriter.seal` detaches the open file (cheap, on the caller's thread) and
:func:`finish` (on any thread; it touches nothing but the sealed file) makes it durable and
visible in this order:

1. gzip the records in one call (zlib releases the GIL, so this runs beside the caller),
   write them to the temp file, ``fsync`` it;
2. ``rename`` it to its final name ``part-<first ingest ms>-<lander>-<run>-<n>.json.gz``;
3. ``fsync`` the partition directory, so the rename itself survives a power cut.

Only then are the tokens of the records in that file returned, and only then may the caller
acknowledge them. A crash at any point before step 3 leaves at worst a temp file that is
never read, and the unacknowledged messages are redelivered by the broker; a crash after
step 3 but before the acks reach the broker leaves duplicates, which ``silver`` removes.

A file is rolled when its uncompressed size reaches ``roll_bytes`` or its first record is
older than ``roll_seconds`` (:meth:`BronzeWriter.due`; the caller seals it), and sealed by
:meth:`BronzeWriter.append` itself when the next record belongs to another ingest hour (a
file never spans two partitions). :meth:`BronzeWriter.commit` is seal + finish in one call.
Newly created directories are fsynced into their parent. Leftover temp files of an earlier
run of the same lander are removed by :meth:`BronzeWriter.remove_stale_temp_files`.

**Where files go** is a :class:`BronzeSink`: :class:`LocalSink` (the default) does the
temp-file, fsync, rename and directory-fsync steps above; :mod:`cloud_spark.bronze_s3` PUTs
each file as one object under the same key (a PUT is atomic: no temp object). The writer
only names files (relative to the landing root) and gzips them; a sink makes them durable.
"""

from __future__ import annotations

import gzip
import os
import re
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Generic, Protocol, TypeVar

from cloud_spark import contract as c
from cloud_spark.records import partition_dir

T = TypeVar("T")

HOUR_MS = 3_600_000


def _safe_name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", text) or "lander"


def fsync_dir(path: Path) -> None:
    """fsync a directory so that entries created or renamed in it are durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def make_dirs_durable(path: Path) -> None:
    """``mkdir -p`` that fsyncs the parent of every directory it creates."""
    missing: list[Path] = []
    probe = path
    while not probe.exists():
        missing.append(probe)
        probe = probe.parent
    for directory in reversed(missing):
        try:
            directory.mkdir()
        except FileExistsError:
            continue
        fsync_dir(directory.parent)


class BronzeSink(Protocol):
    """Where committed files go. ``rel`` is a path relative to the landing root, ``/``-separated
    (``bronze/ingest_date=…/ingest_hour=…/part-….json.gz``, ``quarantine/…``)."""

    def begin(self, rel: str) -> None:
        """A file at ``rel`` was opened (cheap; on the lander's loop thread)."""

    def store(self, rel: str, data: bytes) -> Path | str:
        """Make ``data`` durable and visible at ``rel`` (on a worker thread; thread-safe);
        returns where it is. Raises OSError when it cannot."""
        ...

    def remove_stale(self, lander: str) -> int:
        """Remove what a killed earlier run of ``lander`` left half-written; how many."""
        ...

    def location(self, rel: str) -> str:
        """Where a file at ``rel`` is or will be, for messages."""
        ...

    def give_up_after(self, seconds: float) -> None:
        """Stop retrying failed stores after ``seconds`` (the lander is stopping)."""


class LocalSink:
    """Files in a local or mounted directory: temp file, fsync, rename, directory fsync."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def _paths(self, rel: str) -> tuple[Path, Path]:
        final = self.root / rel
        return final.with_name(f".{final.name}.tmp"), final

    def begin(self, rel: str) -> None:
        temp, final = self._paths(rel)
        make_dirs_durable(final.parent)
        temp.touch()  # marks the file as open (and as this run's) until it is renamed

    def store(self, rel: str, data: bytes) -> Path:
        temp, final = self._paths(rel)
        make_dirs_durable(final.parent)  # a no-op after begin()
        with temp.open("wb") as raw:
            raw.write(data)
            raw.flush()
            os.fsync(raw.fileno())
        os.rename(temp, final)
        fsync_dir(final.parent)
        return final

    def remove_stale(self, lander: str) -> int:
        bronze = self.root / c.BRONZE_DIR
        if not bronze.exists():
            return 0
        mine = re.compile(
            rf"\.part-\d+-{re.escape(lander)}-[0-9a-f]{{8}}-\d+{re.escape(c.BRONZE_SUFFIX)}\.tmp"
        )
        removed = 0
        for path in bronze.glob("*/*/.part-*.tmp"):
            if mine.fullmatch(path.name):
                path.unlink(missing_ok=True)
                removed += 1
        return removed

    def location(self, rel: str) -> str:
        return str(self.root / rel)

    def give_up_after(self, seconds: float) -> None:
        """Nothing to do: a local store is never retried (an OSError stops the lander)."""


@dataclass
class Committed(Generic[T]):
    """A bronze file made durable, and the tokens of the records it holds."""

    path: Path | str  # a local Path, or an s3:// URI
    records: int
    tokens: list[T]


@dataclass
class Sealed(Generic[T]):
    """A file that takes no more records, not yet durable: hand it to :func:`finish`."""

    sink: BronzeSink
    rel: str  # relative to the landing root
    compresslevel: int
    lines: list[bytes] = field(default_factory=list)
    tokens: list[T] = field(default_factory=list)
    size: int = 0  # bytes of the lines

    @property
    def location(self) -> str:
        return self.sink.location(self.rel)


@dataclass
class _OpenFile(Sealed[T]):
    hour: int = 0  # ingest ms // HOUR_MS of every record in the file
    opened_at: float = 0.0


def finish(sealed: Sealed[T]) -> Committed[T]:
    """Make a sealed file durable and visible (see the module docstring); thread-safe."""
    data = gzip.compress(b"".join(sealed.lines), sealed.compresslevel, mtime=0)
    where = sealed.sink.store(sealed.rel, data)
    return Committed(where, len(sealed.lines), sealed.tokens)


class BronzeWriter(Generic[T]):
    """Append records to rolling bronze files; :meth:`commit` returns what may be acked."""

    def __init__(
        self,
        root: Path,
        lander_id: str,
        *,
        roll_bytes: int = 8 * 1024 * 1024,
        roll_seconds: float = 5.0,
        compresslevel: int = 6,
        clock: Callable[[], float] = time.monotonic,
        sink: BronzeSink | None = None,
    ) -> None:
        self.sink: BronzeSink = sink if sink is not None else LocalSink(Path(root))
        self.lander = _safe_name(lander_id)
        self.run = uuid.uuid4().hex[:8]
        self.roll_bytes = roll_bytes
        self.roll_seconds = roll_seconds
        self.compresslevel = compresslevel
        self.clock = clock
        self._counter = 0
        self._open: _OpenFile[T] | None = None

    @property
    def pending(self) -> int:
        """Messages (tokens) appended to the open file and not yet committed."""
        return len(self._open.tokens) if self._open else 0

    @property
    def open_bytes(self) -> int:
        """Bytes of the records in the open file."""
        return self._open.size if self._open else 0

    def remove_stale_temp_files(self) -> int:
        """Delete temp files left by a killed earlier run of this lander; return how many."""
        return self.sink.remove_stale(self.lander)

    def append(self, lines: bytes | list[bytes], ingest_ms: int, token: T) -> Sealed[T] | None:
        """Append the encoded records of one message (one, or a batch's rows, which stay in one
        file under one token); returns the open file sealed first, if any.

        The open file is sealed before the records when they belong to another ingest hour;
        the caller must acknowledge its records before those of any file sealed later.
        """
        if isinstance(lines, bytes):
            lines = [lines]
        sealed = None
        hour = ingest_ms // HOUR_MS  # partitions are UTC hours: no date formatting per record
        if self._open is not None and self._open.hour != hour:
            sealed = self.seal()
        if self._open is None:
            self._open = self._start(partition_dir(ingest_ms), ingest_ms)
        self._open.lines.extend(lines)
        self._open.size += sum(map(len, lines))
        self._open.tokens.append(token)
        return sealed

    def due(self) -> bool:
        """True when the open file reached its size or age limit."""
        if self._open is None:
            return False
        if self._open.size >= self.roll_bytes:
            return True
        return self.clock() - self._open.opened_at >= self.roll_seconds

    def seal(self) -> Sealed[T] | None:
        """Detach the open file (None if none is open); :func:`finish` makes it durable."""
        open_file, self._open = self._open, None
        if open_file is None:
            return None
        return Sealed(open_file.sink, open_file.rel, open_file.compresslevel,
                      open_file.lines, open_file.tokens, open_file.size)  # fmt: skip

    def commit(self) -> Committed[T] | None:
        """Seal and finish the open file on this thread; None if none is open."""
        sealed = self.seal()
        return None if sealed is None else finish(sealed)

    def _start(self, partition: str, ingest_ms: int) -> _OpenFile[T]:
        self._counter += 1
        name = f"part-{ingest_ms}-{self.lander}-{self.run}-{self._counter:06d}{c.BRONZE_SUFFIX}"
        rel = f"{c.BRONZE_DIR}/{partition}/{name}"
        self.sink.begin(rel)
        return _OpenFile(
            self.sink, rel, self.compresslevel,
            hour=ingest_ms // HOUR_MS, opened_at=self.clock(),
        )  # fmt: skip
