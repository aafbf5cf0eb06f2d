"""The bridge's aggregates at run time: samples in from the bridge, windows out on MQTT.

How this works: the bridge (bridge/runtime.py) hands every point value it publishes to
`point(topic, payload)` and every device status to `device_status`. A point configured with
`aggregate` has one `WindowAccumulator` (bridge/aggregate/window.py) fed with the value and
the payload's `ts`; an offline device is a gap in its points' signals. A clock task ticks
every `tick` seconds: windows whose end passed are closed and published through `publish`
(the bridge's link: the uplink puts them in its outbox with their id like any message), so a
window closes on time even when its point is quiet.

Kill -9 and power cuts: the open windows are saved to `<state_dir>/aggregates.json`
(bridge/aggregate/state.py: written whole, fsync'd, renamed) every `save_interval` seconds
when something changed, at the first tick after windows were published (one write for all
the points whose windows closed at a boundary, not one per point), and at stop. At start the saved
windows come back marked interrupted: one whose end passed during the outage is published at
once, `partial: true`, with what it had; one still running goes on and closes `partial`.
Samples between the last save and the cut are lost (at most `save_interval` seconds of them,
which only the mean's coverage shows); a window is never lost silently. A window closed and
published less than a tick before a cut (before its save) can be published twice (the second
copy `partial`, with a new id): the cloud keeps the copy that covered most
(cloud_spark/jobs/silver_aggregates.py). A saved window whose point no longer aggregates (the
configuration changed) is closed and published on its old topic at start.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Final

from bridge.aggregate.points import (
    AGG_LEVEL,
    AggregatedPoint,
    aggregate_payload,
    aggregated_points,
    sample_value,
)
from bridge.aggregate.state import load_windows, save_windows
from bridge.aggregate.window import Window, WindowAccumulator
from bridge.config import BridgeConfig
from bridge.point import window_seconds

log = logging.getLogger("outpost.bridge.aggregate")

STATE_FILE: Final = "aggregates.json"
SAVE_INTERVAL: Final = 5.0
TICK: Final = 1.0


class AggregatePublisher:
    """Every aggregating point's open window, fed by the bridge, published through it."""

    def __init__(self, publish: Callable[[str, bytes], None],
                 wallclock: Callable[[], float] = time.time, state_dir: Path | None = None,
                 save_interval: float = SAVE_INTERVAL, tick: float = TICK) -> None:
        self.publish = publish
        self.wallclock = wallclock
        self.path = None if state_dir is None else Path(state_dir) / STATE_FILE
        self.save_interval = save_interval
        self.tick = tick
        self.prefix = ""
        self.points: dict[str, AggregatedPoint] = {}  # point topic -> its aggregate
        self.accumulators: dict[str, WindowAccumulator] = {}  # point topic -> open window
        self.withheld: frozenset[str] = frozenset()  # point topics not published on MQTT
        self.published = 0
        self.saves = 0
        self._dirty = False
        self._restored = False
        self._published_unsaved = False  # windows closed by a sample, saved at the next tick
        self._task: asyncio.Task[None] | None = None

    def configure(self, bridge: BridgeConfig) -> None:
        """Take the (new) configuration: points that stopped aggregating or changed their
        window have their open window closed (partial) and published now."""
        prefix = bridge.prefix
        points = {p.point_topic(prefix): p for p in aggregated_points(bridge)}
        for topic, old in list(self.points.items()):
            if points.get(topic) != old or prefix != self.prefix:
                self._flush(topic, old, self.accumulators.pop(topic, None))
        for topic, point in points.items():
            self.accumulators.setdefault(topic, WindowAccumulator(point.width_ms))
        self.prefix, self.points = prefix, points
        self.withheld = frozenset(t for t, p in points.items() if p.instead)
        if points and self.path is None:
            log.warning("aggregates: no state directory: open windows are not saved, a "
                        "restart loses them")

    def _flush(self, topic: str, point: AggregatedPoint, acc: WindowAccumulator | None
               ) -> None:
        if acc is None or acc.start is None:
            return
        acc.interrupted = True
        self._send(topic, point, acc.advance(acc.start + acc.width))

    # -- from the bridge -------------------------------------------------------------------

    def point(self, topic: str, payload: bytes) -> None:
        """A point value the bridge published (or withheld: `aggregate_send = "instead"`)."""
        point = self.points.get(topic)
        if point is None:
            return
        sample = sample_value(payload)
        if sample is None:
            return
        if self._send(topic, point, self.accumulators[topic].add(*sample)):
            self._published_unsaved = True
        self._dirty = True

    def device_status(self, device: str, online: bool) -> None:
        """An offline device is a gap in the signal of each of its points."""
        if online:
            return
        now_ms = self._now_ms()
        for topic, point in self.points.items():
            if point.device == device:
                if self._send(topic, point, self.accumulators[topic].add(now_ms, None)):
                    self._published_unsaved = True
                self._dirty = True

    # -- clock, state ----------------------------------------------------------------------

    def start(self) -> None:
        """Bring back the saved windows (closing those that ended) and start the clock; a
        second start (the bridge restarted in place by a reload) only starts the clock."""
        if not self._restored:
            self._restored = True
            self._restore()
            self.advance()
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(),
                                                                name="bridge-aggregates")

    async def stop(self) -> None:
        """Stop the clock and save the open windows (they go on after the restart)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        self.save()

    def advance(self) -> int:
        """Close and publish every window whose end passed; the number published."""
        now_ms = self._now_ms()
        sent = 0
        for topic, acc in self.accumulators.items():
            sent += self._send(topic, self.points[topic], acc.advance(now_ms))
        if sent or self._published_unsaved:
            self.save()  # published: not to be published again after a cut
        return sent

    async def _run(self) -> None:
        last_save = time.monotonic()
        while True:
            await asyncio.sleep(self.tick)
            try:
                self.advance()
                if self._dirty and time.monotonic() - last_save >= self.save_interval:
                    self.save()
                    last_save = time.monotonic()
            except Exception:  # a full disk must not stop the windows: logged, retried
                log.exception("aggregates: tick failed")

    def save(self) -> None:
        """Write the open windows to the state file (atomically, fsync'd)."""
        if self.path is None:
            return
        windows = {f"{topic} {self.points[topic].window}": snap
                   for topic, acc in self.accumulators.items()
                   if (snap := acc.snapshot()) is not None}
        save_windows(self.path, self._now_ms(), windows)
        self.saves += 1
        self._dirty = self._published_unsaved = False

    def _restore(self) -> None:
        if self.path is None:
            return
        saved = load_windows(self.path)
        for key, data in saved.items():
            topic, _, window = key.rpartition(" ")
            try:
                acc = WindowAccumulator.restore(window_seconds(window) * 1000, data)
            except ValueError as exc:
                log.warning("aggregates: saved window %s refused: %s", key, exc)
                continue
            point = self.points.get(topic)
            if point is not None and point.window == window:
                self.accumulators[topic] = acc
                log.info("aggregates: %s: window from %d resumed after a restart (partial)",
                         topic, acc.start)
                continue
            _, device, name = topic.rsplit("/", 2)
            gone = AggregatedPoint(device, name, window, acc.width, False, None)
            log.info("aggregates: %s: no longer aggregated over %s: its open window is "
                     "published as it was (partial)", topic, window)
            self._flush(topic, gone, acc)

    def _send(self, topic: str, point: AggregatedPoint, windows: list[Window]) -> int:
        """Publish closed windows of the point whose topic is `topic`."""
        for window in windows:
            if window.covered_ms == 0 and window.count == 0:
                continue  # nothing was known in it: nothing to say
            self.publish(f"{topic}/{AGG_LEVEL}/{point.window}",
                         aggregate_payload(window, point.unit))
            self.published += 1
        return len(windows)

    def _now_ms(self) -> int:
        return int(self.wallclock() * 1000)
