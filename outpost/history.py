"""`HistoryRecorder`: every point value the bridge publishes, kept in `<state_dir>/history.db`.

How this works: the recorder is a `BridgeObserver`. On the event loop, `point(topic, payload)`
only appends the pair to a deque (no parsing, no I/O: a fraction of a microsecond). A thread
wakes every `flush_interval` seconds, takes what the deque holds, parses each payload
(bridge/report.py's format: value, unit, ts, quality), drops the points a `[[history.points]]`
rule turns off, and hands the rest to `HistoryStore.write` (storage/history/store.py): one
frame, one transaction, one fsync. Every `compact_interval` the same thread compacts the
frames into per-point blocks and aggregates, and at most once an hour applies retention.
`stop()` (clean shutdown) wakes the thread for a last flush and closes the file; a kill or a
power cut loses the values received since the last flush (at most `flush_interval` seconds).

Readers in this process (`/history.json`, the console's charts and sparklines) still see those
values: `recorder.reader` takes `unflushed()`, a copy of the queue and of the batch being
written, before each snapshot of the file (storage/history/reader.py keeps only what the file
does not hold yet). A lock makes moving a batch out of the queue and copying both one step.

While the store cannot write (disk full, I/O error) the values wait in memory, at most
`MAX_PENDING` of them; beyond that the oldest are dropped, counted (`dropped`) and logged.
"""

from __future__ import annotations

import collections
import json
import logging
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any, Final

from bridge.runtime import Bridge
from outpost.config import Config, StatusConfig
from outpost.daemon import Daemon
from outpost.status import StatusBoard
from outpost.status_http import StatusEndpoint, StatusServer
from storage.history.codec import Sample
from storage.history.config import HistoryConfig
from storage.history.reader import HistoryReader
from storage.history.schema import FILE_NAME, HistoryFileError
from storage.history.store import HistoryStore

log = logging.getLogger("outpost.history")

MAX_PENDING: Final = 1_000_000  # values waiting for a store that cannot write (~100 MiB)
RETAIN_EVERY_S: Final = 3600.0  # retention deletes scatter over every point's pages: rarely


class HistoryRecorder:
    """Records the bridge's point values (a `BridgeObserver`) on its own thread."""

    def __init__(self, config: HistoryConfig, state_dir: Path, prefix: str) -> None:
        self.config = config
        self.path = Path(state_dir) / FILE_NAME
        self.prefix = prefix + "/"
        self.store = HistoryStore(self.path, config)
        self.reader = HistoryReader(self.path, self.unflushed)
        self._pending: collections.deque[tuple[str, bytes]] = collections.deque()
        self._in_flight: list[tuple[str, bytes]] = []  # the batch being written
        self._lock = threading.Lock()  # moving a batch out of _pending; copying both
        self._enabled: dict[str, bool] = {}
        self._wake = threading.Event()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self.received = 0
        self.dropped = 0
        self.unreadable = 0
        self.failures = 0
        self._last_compact = self._last_retain = time.monotonic()

    # -- the BridgeObserver side (event loop) ---------------------------------------------

    def point(self, topic: str, payload: bytes) -> None:
        """A point value was published (called on the event loop: append only)."""
        self._pending.append((topic, payload))
        self.received += 1

    def device_status(self, device: str, online: bool) -> None:
        """Statuses are not history (the bridge's `status` topic and the status page keep
        them)."""

    # -- lifecycle --------------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="outpost-history", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """The last flush, then the file is closed (clean shutdown)."""
        self._stopping = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                log.error("history: the last flush did not finish within %.0f s", timeout)
                return
        self.store.close()

    def reload(self, config: HistoryConfig) -> None:
        """A changed `[history]`: rules, retention and intervals apply from the next flush."""
        self.config = self.store.config = config
        self._enabled = {}

    def status(self) -> dict[str, Any]:
        """The "point_history" section of `/status`."""
        return {"path": str(self.path), "points": len(self.store.ids),
                "received": self.received, "stored": self.store.samples_written,
                "pending": len(self._pending), "dropped": self.dropped,
                "unreadable": self.unreadable, "flushes": self.store.flushes,
                "failures": self.failures, "flush_interval_s": self.config.flush_interval}

    # -- the thread ---------------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            self._wake.wait(self.config.flush_interval)
            self._wake.clear()
            stopping = self._stopping
            self._flush()
            if stopping:
                return
            now = time.monotonic()
            try:
                if now - self._last_compact >= self.config.compact_interval:
                    self._last_compact = now
                    self.store.compact()
                if now - self._last_retain >= RETAIN_EVERY_S:
                    self._last_retain = now
                    self.store.retain(int(time.time() * 1000))
            except Exception:
                self.failures += 1
                log.exception("history: compaction or retention failed (retried later)")

    def unflushed(self) -> UnflushedValues:
        """The values received and not yet in the file, as of now (any thread)."""
        with self._lock:
            waiting = self._in_flight + list(self._pending)
        return UnflushedValues(self, waiting)

    def _flush(self) -> None:
        pending = self._pending
        with self._lock:
            batch = self._in_flight = [pending.popleft() for _ in range(len(pending))]
        samples = [sample for sample in (self._sample(*pair) for pair in batch)
                   if sample is not None]
        try:
            if samples:
                self.store.write(samples)
        except Exception:
            self.failures += 1
            log.exception("history: writing %d values failed (kept for the next flush)",
                          len(samples))
            with self._lock:
                self._keep(samples)
                self._in_flight = []
            return
        with self._lock:
            self._in_flight = []

    def _keep(self, samples: list[Sample]) -> None:
        """Puts values a failed flush could not write back in front (bounded)."""
        room = MAX_PENDING - len(self._pending)
        if len(samples) > room:
            lost = len(samples) - max(room, 0)
            self.dropped += lost
            log.warning("history: %d values dropped: the store has not written for a while "
                        "and %d are waiting", lost, MAX_PENDING)
            samples = samples[lost:]
        # Parsed again at the next flush: re-encode as the payload they came from is cheaper
        # than a second queue type; this only happens while the disk fails.
        for name, unit, ts_ms, value, quality in reversed(samples):
            payload = json.dumps({"value": value, "unit": unit, "ts": ts_ms,
                                  "quality": quality}).encode()
            self._pending.appendleft((self.prefix + name, payload))

    def recorded(self, topic: str) -> str | None:
        """The `device/point` name of `topic` when its values are kept, else None."""
        if not topic.startswith(self.prefix):
            return None
        name = topic[len(self.prefix):]
        if name.count("/") != 1:  # `<device>/<point>` only: not a point's `/agg/<window>`
            return None
        enabled = self._enabled.get(name)
        if enabled is None:
            enabled = self._enabled[name] = self.config.retention(name).enabled
        return name if enabled else None

    def _sample(self, topic: str, payload: bytes) -> Sample | None:
        name = self.recorded(topic)
        if name is None:
            return None
        sample = parse_sample(name, payload)
        if sample is None:
            self.unreadable += 1
        return sample


def parse_sample(name: str, payload: bytes) -> Sample | None:
    """A point value's payload (bridge/report.py's format) as a history sample; None when it
    is not one."""
    try:
        data = json.loads(payload)
        return (name, data.get("unit"), int(data["ts"]), data.get("value"),
                str(data.get("quality", "good")))
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


class UnflushedValues:
    """A copy of a recorder's values not in the file yet (storage/history/reader.py's
    `Unflushed`): indexed by point on first use, each point's payloads parsed when asked."""

    def __init__(self, recorder: HistoryRecorder, waiting: list[tuple[str, bytes]]) -> None:
        self._recorder = recorder
        self._waiting = waiting
        self._by_name: dict[str, list[bytes]] | None = None

    def _index(self) -> dict[str, list[bytes]]:
        if self._by_name is None:
            self._by_name = {}
            for topic, payload in self._waiting:
                name = self._recorder.recorded(topic)
                if name is not None:
                    self._by_name.setdefault(name, []).append(payload)
        return self._by_name

    def names(self) -> list[str]:
        return list(self._index())

    def samples(self, name: str) -> list[Sample]:
        parsed = (parse_sample(name, payload) for payload in self._index().get(name, ()))
        return [sample for sample in parsed if sample is not None]


def start_history(config: Config, bridge: Bridge, daemon: Daemon,
                  state_dir: Path | None) -> HistoryRecorder | None:
    """The recorder, observing `bridge` (call before the bridge starts), when `[history]` is
    enabled and there is a state directory; serves `/history.json` on the status listener
    (the console, when it takes the listener, gets `recorder.reader` through ConsoleParts)."""
    if not config.history.enabled:
        return None
    if state_dir is None or config.storage.durability == "memory":
        log.info("history: off (no state directory, or durability is memory)")
        return None
    try:
        recorder = HistoryRecorder(config.history, Path(state_dir), config.bridge.prefix)
    except (sqlite3.Error, OSError, HistoryFileError) as exc:
        log.error("history: off: cannot open %s: %s", Path(state_dir) / FILE_NAME, exc)
        return None
    bridge.observers.append(recorder)
    recorder.start()
    daemon.board.add_provider("point_history", recorder)
    daemon.reloader.register("history", lambda new: recorder.reload(new.history),
                             sections=("history",))
    reader = daemon.history = recorder.reader  # the console's ConsoleParts.history_reader

    def endpoint(board: StatusBoard, status: StatusConfig) -> StatusEndpoint:
        return StatusServer.for_config(board, status, history=reader)

    daemon.endpoint = endpoint
    log.info("history: %s (flush every %.0f s)", recorder.path, config.history.flush_interval)
    return recorder
