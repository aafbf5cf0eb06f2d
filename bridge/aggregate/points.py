"""Which points send aggregates, on which topics, and their payload bytes (pure).

A point configured with `aggregate = "1m"` (any family: the key lives in bridge/point.py)
publishes one message per closed window on `<prefix>/<device>/<point>/agg/<window>`; with
`aggregate_send = "instead"` its raw values are not published on MQTT at all
(docs/message-format.md, "Aggregates").
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Final

from bridge.aggregate.window import Window
from bridge.config import BridgeConfig
from bridge.point import ReportFields, window_seconds

#: the level between a point's topic and the window: `<prefix>/<device>/<point>/agg/1m`
AGG_LEVEL: Final = "agg"


@dataclass(frozen=True, slots=True)
class AggregatedPoint:
    """One point that sends aggregates."""

    device: str
    point: str
    window: str  # as configured: "1m"
    width_ms: int
    instead: bool  # the raw values are not published on MQTT
    unit: str | None

    def point_topic(self, prefix: str) -> str:
        """The point's own topic (its raw values)."""
        return f"{prefix}/{self.device}/{self.point}"

    def topic(self, prefix: str) -> str:
        """The topic its aggregates are published on."""
        return aggregate_topic(prefix, self.device, self.point, self.window)


def aggregate_topic(prefix: str, device: str, point: str, window: str) -> str:
    """`<prefix>/<device>/<point>/agg/<window>`."""
    return f"{prefix}/{device}/{point}/{AGG_LEVEL}/{window}"


def aggregated_points(bridge: BridgeConfig) -> list[AggregatedPoint]:
    """Every configured point with an `aggregate` window, in configuration order."""
    found = []
    for device in bridge.device_configs():
        for point in getattr(device, "points", []):
            if isinstance(point, ReportFields) and point.aggregate is not None:
                found.append(AggregatedPoint(
                    device.name, str(getattr(point, "name", "")), point.aggregate,
                    window_seconds(point.aggregate) * 1000, point.aggregate_send == "instead",
                    point.unit))
    return found


def _number(value: float | None) -> str:
    if value is None or not math.isfinite(value):
        return "null"
    if value == int(value) and abs(value) < 1e15:
        return str(int(value))  # 12 not 12.0: fewer bytes on a metered link
    return repr(round(value, 9))


def aggregate_payload(window: Window, unit: str | None) -> bytes:
    """The JSON payload of a closed window (docs/message-format.md, "Aggregates")."""
    unit_json = "null" if unit is None else json.dumps(unit)
    return (f'{{"ts":{window.end_ms},"start":{window.start_ms},"end":{window.end_ms},'
            f'"mean":{_number(window.mean)},"min":{_number(window.min)},'
            f'"max":{_number(window.max)},"first":{_number(window.first)},'
            f'"last":{_number(window.last)},"count":{window.count},'
            f'"covered_ms":{window.covered_ms},"unit":{unit_json},'
            f'"partial":{"true" if window.partial else "false"}}}').encode()


def sample_value(payload: bytes) -> tuple[int, float | None] | None:
    """(ts_ms, value) of a point payload the bridge published; the value is None when it is
    not a good or uncertain number (bad quality, null, a string): a gap in the signal.
    None when the payload is not a point payload at all."""
    try:
        data = json.loads(payload)
        ts_ms = int(data["ts"])
    except (ValueError, KeyError, TypeError):
        return None
    value = data.get("value")
    if data.get("quality") == "bad" or value is None or isinstance(value, str | list | dict):
        return ts_ms, None
    number = float(value)  # a bool counts as 0 / 1: its mean is the share of time it was on
    return ts_ms, number if math.isfinite(number) else None
