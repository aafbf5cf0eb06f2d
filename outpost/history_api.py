"""The history answer: query parameters in, the JSON-ready series of the points asked out.

How this works: `history_answer(reader, params, now_ms)` is what the status listener's
`/history.json`, the console's `/console/history.json` and `outpost history` all answer with
(docs/history.md). Parameters: `point` (repeatable, `device/point`), `since` and `until`
(ISO 8601, epoch ms, `now`, or relative to now: `-1h`, `-24h`, `-7d`, `-30m`, `-10s`;
default: the last hour), `max_points` (default 1500) and `step` (`10s`, `1m`, `1h`, or ms).

Without a step the answer picks one per point: the raw samples when there are no more than
`max_points` of them in the range, else the smallest round step that makes at most
`max_points` buckets; a step of a minute or more reads the stored 1-minute (or, when it is a
multiple of 15 minutes, 15-minute) aggregates, so a day of a 1 s point is 1,440 rows read,
not 86,400 samples; a step the raw samples no longer cover (older than their retention) is
raised to the finest stored resolution that does. A bucket's `t` is its start, `value` its
sample mean, `min`/`max` its extremes; buckets without samples are left out.

Values that are not numbers (strings, JSON) are served raw (a step keeps each bucket's last
value): `value` holds booleans as 0/1 and None for the others, whose text is in `text`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Final

from storage.history.codec import NUMERIC, QUALITY_NAMES
from storage.history.reader import HistoryReader, HistoryView, PointInfo

DEFAULT_SPAN_MS: Final = 3_600_000
DEFAULT_MAX_POINTS: Final = 1500
MAX_BUCKETS: Final = 100_000
MINUTE: Final = 60_000
QUARTER: Final = 900_000
_UNITS: Final = {"ms": 1, "s": 1000, "m": MINUTE, "h": 3_600_000, "d": 86_400_000,
                 "w": 7 * 86_400_000}
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h|d|w)$")
NICE_STEPS: Final = tuple(n * unit for n, unit in (
    (1, 1000), (2, 1000), (5, 1000), (10, 1000), (15, 1000), (30, 1000),
    (1, MINUTE), (2, MINUTE), (5, MINUTE), (10, MINUTE), (15, MINUTE), (30, MINUTE),
    (1, 3_600_000), (2, 3_600_000), (3, 3_600_000), (6, 3_600_000), (12, 3_600_000),
    (1, 86_400_000), (2, 86_400_000), (7, 86_400_000)))


class HistoryRequestError(ValueError):
    """A parameter is wrong; the message names it (the HTTP layers answer 400 with it)."""


def parse_duration(text: str, name: str = "step") -> int:
    """`10s`, `1m`, `1.5h`, `7d`, `500ms` or a number of ms, in ms (> 0)."""
    text = text.strip()
    if text.isdigit():
        value = int(text)
    else:
        match = _DURATION.match(text)
        if match is None:
            raise HistoryRequestError(f"{name}: {text!r} is not a duration (e.g. 10s, 1m, 1h, "
                                      f"7d, or milliseconds)")
        value = round(float(match.group(1)) * _UNITS[match.group(2)])
    if value <= 0:
        raise HistoryRequestError(f"{name}: {text!r} must be longer than 0")
    return value


def parse_time(text: str, now_ms: int, name: str) -> int:
    """ISO 8601 (UTC unless it says otherwise), epoch milliseconds, `now`, or `-<duration>`
    before now; in epoch ms."""
    text = text.strip()
    if text == "now":
        return now_ms
    if text.startswith("-"):
        return now_ms - parse_duration(text[1:], name)
    if text.isdigit():
        return int(text)
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise HistoryRequestError(
            f"{name}: {text!r} is not a time: ISO 8601 (2026-12-06T21:00:00Z), epoch ms, "
            f"now, or relative (-1h, -24h, -7d)") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def _one(params: Mapping[str, str | list[str]], key: str) -> str | None:
    value = params.get(key)
    if isinstance(value, list):
        return value[-1] if value else None
    return value


def _points(params: Mapping[str, str | list[str]]) -> list[str]:
    value = params.get("point")
    names = [value] if isinstance(value, str) else list(value or [])
    names = [name for name in names if name]
    if not names:
        raise HistoryRequestError("point: at least one device/point is required")
    for name in names:
        if name.count("/") < 1 or name.startswith("/") or name.endswith("/"):
            raise HistoryRequestError(f"point: {name!r} is not device/point")
    return names


def history_answer(reader: HistoryReader, params: Mapping[str, str | list[str]],
                   now_ms: int) -> dict[str, Any]:
    """The series of the points asked (see the module comment); raises HistoryRequestError
    for a bad parameter."""
    names = _points(params)
    since_text, until_text = _one(params, "since"), _one(params, "until")
    until_ms = now_ms if until_text is None else parse_time(until_text, now_ms, "until")
    since_ms = (until_ms - DEFAULT_SPAN_MS if since_text is None
                else parse_time(since_text, now_ms, "since"))
    if since_ms >= until_ms:
        raise HistoryRequestError(f"since ({since_ms}) must be before until ({until_ms})")
    max_text = _one(params, "max_points")
    try:
        max_points = DEFAULT_MAX_POINTS if max_text is None else int(max_text)
    except ValueError:
        raise HistoryRequestError(f"max_points: {max_text!r} is not a whole number") from None
    if not 1 <= max_points <= MAX_BUCKETS:
        raise HistoryRequestError(f"max_points: {max_points} is not within 1..{MAX_BUCKETS}")
    step_text = _one(params, "step")
    step_ms = None if step_text is None else parse_duration(step_text)
    if step_ms is not None and (until_ms - since_ms) // step_ms > MAX_BUCKETS:
        raise HistoryRequestError(f"step: {step_text} makes more than {MAX_BUCKETS} buckets "
                                  f"over this range; choose a longer step or a shorter range")
    with reader.view() as view:
        series = [_series(view, name, since_ms, until_ms, step_ms, max_points)
                  for name in names]
    return {"since_ms": since_ms, "until_ms": until_ms, "series": series}


def _series(view: HistoryView, name: str, since_ms: int, until_ms: int, step_ms: int | None,
            max_points: int) -> dict[str, Any]:
    point = view.point(name)
    if point is None:
        return {"point": name, "unit": None, "step_ms": 0, "t": [], "value": [], "min": None,
                "max": None, "error": "unknown point"}
    if step_ms is None:
        if view.raw_count(point, since_ms, until_ms) <= max_points:
            raw = view.raw(point, since_ms, until_ms)
            if raw.kind != NUMERIC:
                return _other(point, raw.ts, raw.values, raw.quality, 0)
            return {"point": name, "unit": point.unit, "step_ms": 0, "t": raw.ts,
                    "value": raw.values, "min": None, "max": None,
                    "quality": [QUALITY_NAMES[q] for q in raw.quality]}
        span = until_ms - since_ms
        step_ms = next((s for s in NICE_STEPS if -(-span // s) <= max_points),
                       NICE_STEPS[-1] * -(-span // (NICE_STEPS[-1] * max_points)))
    resolution = _resolution(view, point, since_ms, step_ms)
    if resolution:
        step_ms = -(-step_ms // resolution) * resolution  # a whole number of stored rows
    else:
        raw = view.raw(point, since_ms, until_ms)
        if raw.kind != NUMERIC:  # not numbers: each bucket's last value
            return _last_per_bucket(point, raw.ts, raw.values, raw.quality, step_ms)
    rows = view.buckets(point, since_ms, until_ms, step_ms, resolution)
    return {"point": name, "unit": point.unit, "step_ms": step_ms,
            "t": [row[0] for row in rows], "value": [row[4] for row in rows],
            "min": [row[2] for row in rows], "max": [row[3] for row in rows]}


def _resolution(view: HistoryView, point: PointInfo, since_ms: int, step_ms: int) -> int:
    """The stored resolution a step is read from: the coarsest that divides the step and
    still holds data from `since` (the figures are the same: sample means merge exactly)."""
    fitting = [r for r in (QUARTER, MINUTE, 0) if r == 0 or step_ms % r == 0]
    oldest = {r: view.oldest(point, r) for r in (QUARTER, MINUTE, 0)}
    for resolution in fitting:
        found = oldest[resolution]
        if found is not None and found <= since_ms:
            return resolution
    # None reaches back to `since`: the coarsest dividing one with data, unless a coarser
    # one reaches further back by more than its own window (its retention is longer).
    best = next((r for r in fitting if oldest[r] is not None), fitting[0])
    for resolution in (MINUTE, QUARTER):
        found, best_found = oldest[resolution], oldest[best]
        if resolution > best and found is not None and (
                best_found is None or found + resolution <= best_found):
            best = resolution
    return best


def _other(point: PointInfo, ts: list[int], values: list[Any], quality: bytearray,
           step_ms: int) -> dict[str, Any]:
    numbers: list[float | None] = []
    texts: list[str | None] = []
    for value in values:
        if isinstance(value, bool):
            numbers.append(1.0 if value else 0.0)
            texts.append(None)
        elif isinstance(value, int | float):
            numbers.append(float(value))
            texts.append(None)
        else:
            numbers.append(None)
            texts.append(None if value is None else value if isinstance(value, str)
                         else repr(value))
    return {"point": point.name, "unit": point.unit, "step_ms": step_ms, "t": ts,
            "value": numbers, "text": texts, "min": None, "max": None,
            "quality": [QUALITY_NAMES[q] for q in quality]}


def _last_per_bucket(point: PointInfo, ts: list[int], values: list[Any], quality: bytearray,
                     step_ms: int) -> dict[str, Any]:
    last: dict[int, int] = {}
    for i, t in enumerate(ts):
        last[t - t % step_ms] = i
    order = sorted(last)
    return _other(point, order, [values[last[b]] for b in order],
                  bytearray(quality[last[b]] for b in order), step_ms)
