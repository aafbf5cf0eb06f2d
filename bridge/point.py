"""A bridge point, from any kind of device: its value and quality, its name, how it is reported.

Modbus devices (bridge/modbus/) and serial line devices (bridge/serial/) both produce points;
bridge/report.py publishes them. The types and config fields they share live here, below all
three, so none of them imports another for them.

Pure: pydantic and the standard library.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Final, Literal

from pydantic import AfterValidator, Field, model_validator

from gateway.base.settings import Section

# A JSON array or object is the value of an OPC UA array or structure (published as JSON).
Value = bool | int | float | str | list[Any] | dict[str, Any] | None
Quality = Literal["good", "uncertain", "bad"]
GOOD: Final = "good"
UNCERTAIN: Final = "uncertain"
BAD: Final = "bad"

_NAME = re.compile(r"^[^/+#$\s][^/+#\s]{0,63}$")
RESERVED_LEAVES = {"status", "diagnostics"}


def check_name(value: str) -> str:
    """A device or point name: one topic level, not a leaf the bridge publishes itself."""
    if not _NAME.match(value):
        raise ValueError("must be one topic level: 1-64 characters, no '/', '+', '#', "
                         "spaces or leading '$'")
    if value in RESERVED_LEAVES:
        raise ValueError(f"{value!r} is reserved (<prefix>/<device>/{value} is published by "
                         f"the bridge)")
    return value


Name = Annotated[str, AfterValidator(check_name)]
Seconds = Annotated[float, Field(gt=0, json_schema_extra={"unit": "s"})]


_WINDOW_UNITS: Final = {"s": 1, "m": 60, "h": 3600}
DAY_S: Final = 86_400


def window_seconds(text: str) -> int:
    """An aggregate window (`10s`, `1m`, `15m`, `1h`) in seconds; ValueError saying why not.

    Windows are aligned to UTC (a window starts at a whole multiple of its width since the
    epoch), so a width must divide a day: every day starts a window.
    """
    number, unit = text[:-1], text[-1:]
    if unit not in _WINDOW_UNITS or not number.isdigit() or int(number) <= 0:
        raise ValueError(f"{text!r} is not a window: a whole number and s, m or h "
                         f'(e.g. "10s", "1m", "15m", "1h")')
    seconds = int(number) * _WINDOW_UNITS[unit]
    if DAY_S % seconds:
        raise ValueError(f"window {text!r} must divide a day (24h at most), so that windows "
                         f"stay aligned to UTC (e.g. 10s, 30s, 1m, 5m, 15m, 1h)")
    return seconds


def check_window(text: str) -> str:
    """A valid aggregate window, as written."""
    window_seconds(text)
    return text


def check_unique(names: list[str], where: str, what: str) -> list[str]:
    """`where.i: duplicate <what> 'x' (also where.j)` for every repeated name."""
    seen: dict[str, int] = {}
    problems = []
    for i, name in enumerate(names):
        if name in seen:
            problems.append(f"{where}.{i}: duplicate {what} {name!r} (also {where}.{seen[name]})")
        else:
            seen[name] = i
    return problems


class ReportFields(Section):
    """How a point is reported: every poll, or on change with a deadband and a heartbeat."""

    unit: str | None = Field(default=None, description="engineering unit, e.g. kW")
    report: Literal["poll", "change"] | None = Field(
        default=None, description="default: the device's report (change when a deadband is set)")
    deadband: Annotated[float, Field(ge=0)] | None = None
    deadband_percent: Annotated[float, Field(ge=0, le=100)] | None = None
    heartbeat: Seconds | None = Field(default=None, description="publish at least this often")
    aggregate: Annotated[str, AfterValidator(check_window)] | None = Field(
        default=None, description="also publish aggregates over aligned windows of this width "
        "(e.g. 1m) on <prefix>/<device>/<point>/agg/<width>")
    aggregate_send: Literal["beside", "instead"] | None = Field(
        default=None, description='with aggregate: "beside" the raw values (default) or '
        '"instead" of them (raw values are then not published on MQTT)')

    @model_validator(mode="after")
    def _aggregate_send_needs_window(self) -> ReportFields:
        if self.aggregate_send is not None and self.aggregate is None:
            raise ValueError(f"aggregate_send = {self.aggregate_send!r} needs aggregate "
                             f'(a window such as "1m")')
        return self
