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


#: what Sparkplug and Home Assistant show of a window, as `<point>_<statistic>_<window>`
SHOWN_STATISTICS: Final = ("mean", "min", "max")


def shown_name(point: str, statistic: str, window: str) -> str:
    """`power`, `mean`, `1m` -> `power_mean_1m` (a Sparkplug metric, a Home Assistant entity)."""
    return f"{point}_{statistic}_{window}"


def aggregate_as_points(rest: str, payload: bytes) -> list[tuple[str, bytes]]:
    """A published window as point payloads, for observers that know points only:
    `<point>/agg/<window>` (the topic below `<prefix>/<device>/`) and its payload ->
    [(`<point>_mean_<window>`, point payload), ... min, max], `ts` the window's end, quality
    `uncertain` when the window is partial. [] when `rest` is not an aggregate's topic."""
    parts = rest.split("/")
    if len(parts) != 3 or parts[1] != AGG_LEVEL:
        return []
    try:
        data = json.loads(payload)
        ts_ms, partial, unit = int(data["end"]), bool(data["partial"]), data.get("unit")
        values = [(name, data[name]) for name in SHOWN_STATISTICS]
    except (ValueError, KeyError, TypeError):
        return []
    quality = "uncertain" if partial else "good"
    unit_json = "null" if unit is None else json.dumps(unit)
    return [(shown_name(parts[0], name, parts[2]),
             f'{{"value":{_number(value if isinstance(value, int | float) else None)},'
             f'"unit":{unit_json},"ts":{ts_ms},"quality":"{quality}"}}'.encode())
            for name, value in values]


def home_assistant_sensors(bridge: BridgeConfig, device: str
                           ) -> list[tuple[str, str, str, str | None]]:
    """The sensors of a device's aggregates: (name, state topic, value template, unit)."""
    return [(shown_name(p.point, statistic, p.window), p.topic(bridge.prefix),
             f"{{{{ value_json.{statistic} }}}}", p.unit)
            for p in aggregated_points(bridge) if p.device == device
            for statistic in SHOWN_STATISTICS]
