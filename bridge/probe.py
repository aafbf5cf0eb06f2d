"""What the S7, EtherNet/IP and BACnet probes share: a device read once, as rows and as lines.

A family's `explore` (the console's probe, bridge/driver.py) opens its own device with the
context of a `ProbeRun`, which keeps what the device publishes instead of sending it; after
one read, `rows` turns each point's state into a `Found` row: its value, unit and quality as
published, or why it failed. `outpost <family> probe` prints those rows with `point_lines`.

Pure: no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from bridge.driver import DeviceContext, Found


class ProbeRun:
    """The context of a device read once: its publishes kept by topic, nothing sent."""

    def __init__(self) -> None:
        self.published: dict[str, dict[str, object]] = {}
        self.context = DeviceContext("probe", self._keep, lambda _device, _online: None)

    def _keep(self, topic: str, payload: bytes) -> None:
        self.published[topic] = json.loads(payload)

    def rows(self, states: Iterable[Any], where: Callable[[Any], str],
             detail: Callable[[Any], str] = lambda _point: "") -> tuple[Found, ...]:
        """A row per point state (`.config`, `.error`, `.reporter`): its value, unit and
        quality as published (the unit the device tells, where it does), or why it failed;
        `where` and `detail` from its configured point."""
        rows = []
        for state in states:
            point = state.config
            if state.error is not None:
                rows.append(Found(point.name, where(point), error=state.error,
                                  detail=detail(point)))
                continue
            got = self.published.get(state.reporter.topic, {})
            unit, quality = got.get("unit"), got.get("quality")
            rows.append(Found(point.name, where(point), got.get("value"),
                              unit if isinstance(unit, str) else None,
                              quality if isinstance(quality, str) else None, None,
                              detail(point)))
        return tuple(rows)


def point_lines(rows: Sequence[Found], columns: Sequence[tuple[str, int]],
                shown: Callable[[object], str] = repr) -> tuple[list[str], int]:
    """A probe's points for a terminal: a blank line, a header (`columns`: the title and
    width of the name, where and detail columns, as many as are shown), a line per point (its
    value and unit, its quality when not good, or why it failed) and how many answered;
    (lines, points that failed). Nothing for no points."""
    if not rows:
        return [], 0

    def cells(texts: Sequence[str]) -> str:
        return "".join(f"{text:<{width}} " for text, (_, width)
                       in zip(texts[:len(columns)], columns, strict=True))

    lines = ["", cells([title for title, _ in columns]) + "result"]
    failed = 0
    for row in rows:
        where = cells([row.name, row.where, row.detail])
        if row.error is not None:
            failed += 1
            lines.append(where + f"FAILED: {row.error}")
            continue
        unit = f" {row.unit}" if row.unit else ""
        quality = "" if row.quality in ("good", None) else f" ({row.quality})"
        lines.append(where + shown(row.value) + unit + quality)
    lines.append(f"{len(rows) - failed} of {len(rows)} point(s) answered, {failed} failed")
    return lines, failed
