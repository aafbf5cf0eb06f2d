"""When a point is published, and the exact bytes of what the bridge publishes (pure).

How this works: every point has a `Reporter` holding the last value, quality and time it
published. `offer(value, quality, now, ts_ms)` returns the payload to publish or None:

- mode "poll": every poll;
- mode "change": when the quality changed, when a non-numeric value changed, when a number
  moved by more than `deadband` (absolute) or `deadband_percent` of the last published value
  (no deadband: any change), or when `heartbeat` seconds passed since the last publish.

Payloads follow docs/message-format.md (cloud_spark/contract.py): a point is
`{"value": ..., "unit": ..., "ts": <epoch ms>, "quality": "good"|"uncertain"|"bad"}`, the
retained status is `online` / `offline`, diagnostics carry cumulative counters. `now` is the
loop's monotonic clock, `ts_ms` the wall clock; neither is read here.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Final

from bridge.point import ReportFields, Value

ONLINE: Final = b"online"
OFFLINE: Final = b"offline"


@dataclass(frozen=True, slots=True)
class ReportPolicy:
    """How one point is reported."""

    mode: str = "poll"  # "poll" or "change"
    deadband: float | None = None
    deadband_percent: float | None = None
    heartbeat: float | None = None

    @staticmethod
    def resolve(report: str | None, default: str, deadband: float | None,
                deadband_percent: float | None, heartbeat: float | None) -> ReportPolicy:
        """A point's policy: its own `report`, else change when it has a deadband, else the
        device default."""
        mode = report or ("change" if deadband is not None or deadband_percent is not None
                          else default)
        return ReportPolicy(mode, deadband, deadband_percent, heartbeat)


def format_value(value: Value) -> str:
    """A value as JSON (NaN and infinities, which JSON lacks, become null)."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else "null"
    if isinstance(value, int):
        return str(value)
    return json.dumps(value)


def point_payload(value: Value, unit_json: str, ts_ms: int, quality: str) -> bytes:
    """The JSON payload of one point value (`unit_json` is already JSON: `"kW"` or `null`)."""
    return (f'{{"value":{format_value(value)},"unit":{unit_json},"ts":{ts_ms},'
            f'"quality":"{quality}"}}').encode()


def diagnostics_payload(ts_ms: int, requests: int, timeouts: int, crc_errors: int,
                        exceptions: int, stale_frames: int, latency_ms: float | None) -> bytes:
    """The diagnostics payload of one device (cumulative counters, mean latency)."""
    return json.dumps({
        "ts": ts_ms, "requests": requests, "timeouts": timeouts, "crc_errors": crc_errors,
        "exceptions": exceptions, "stale_frames": stale_frames, "latency_ms": latency_ms,
    }, separators=(",", ":")).encode()


class Reporter:
    """The publish decision and payload of one point."""

    __slots__ = ("_last_time", "_last_ts", "_last_value", "_quality", "policy", "topic", "unit",
                 "unit_json")

    def __init__(self, topic: str, unit: str | None, policy: ReportPolicy) -> None:
        self.topic = topic
        self.unit = unit
        self.unit_json = "null" if unit is None else json.dumps(unit)
        self.policy = policy
        self._last_value: Value = None
        self._quality: str | None = None
        self._last_time = -math.inf
        self._last_ts = 0

    @property
    def quality(self) -> str | None:
        """The quality last published (None before the first publish)."""
        return self._quality

    def last(self, now: float) -> dict[str, object] | None:
        """The last published value for the status page (None before the first publish)."""
        if self._quality is None:
            return None
        return {"value": self._last_value, "unit": self.unit, "quality": self._quality,
                "ts": self._last_ts, "age_s": round(now - self._last_time, 3)}

    def offer(self, value: Value, quality: str, now: float, ts_ms: int,
              force: bool = False) -> bytes | None:
        """The payload to publish for a new reading, or None to stay silent."""
        if force or self.policy.mode == "poll" or self._changed(value, quality, now):
            self._last_value, self._quality, self._last_time = value, quality, now
            self._last_ts = ts_ms
            return point_payload(value, self.unit_json, ts_ms, quality)
        return None

    def _changed(self, value: Value, quality: str, now: float) -> bool:
        policy = self.policy
        if quality != self._quality:
            return True
        if policy.heartbeat is not None and now - self._last_time >= policy.heartbeat:
            return True
        last = self._last_value
        if isinstance(value, bool) or isinstance(last, bool) or not (
            isinstance(value, int | float) and isinstance(last, int | float)
        ):
            return value != last or type(value) is not type(last)
        delta = abs(value - last)
        if policy.deadband is None and policy.deadband_percent is None:
            return delta != 0
        if policy.deadband is not None and delta > policy.deadband:
            return True
        return policy.deadband_percent is not None and (
            delta > abs(last) * policy.deadband_percent / 100.0
            or (last == 0 and delta != 0)
        )


def point_reporter(topic: str, point: ReportFields, report: str,
                   heartbeat: float | None) -> Reporter:
    """A point's reporter: its own report fields, the device's `report` and `heartbeat` where
    it has none (every device family makes its reporters so)."""
    policy = ReportPolicy.resolve(point.report, report, point.deadband, point.deadband_percent,
                                  point.heartbeat or heartbeat)
    return Reporter(topic, point.unit, policy)
