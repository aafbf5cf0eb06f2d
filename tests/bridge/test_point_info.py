"""PointInfo.check_write: what a write is refused for before any device is asked (a Sparkplug
DCMD of several metrics is refused whole on the first of these)."""

from __future__ import annotations

import re

import pytest

from bridge.driver import PointInfo

SETPOINT = PointInfo("setpoint", "uint16", writable=True, minimum=0, maximum=1000, integral=True)
MODE = PointInfo("mode", "string", writable=True, options=("auto", "manual"))
PUMP = PointInfo("pump", "bool", writable=True)
SCALED = PointInfo("flow", "float64", writable=True, minimum=-3276.8, maximum=3276.7)


@pytest.mark.parametrize(("point", "value", "reason"), [
    (PointInfo("energy", "float64"), 1.0, "read-only"),
    (SETPOINT, 5000, "5000 is outside [0, 1000]"),
    (SETPOINT, -1, "-1 is outside [0, 1000]"),
    (SETPOINT, 2.5, "2.5 is not a whole number"),
    (SETPOINT, True, "True is not a number"),
    (SETPOINT, "7", "'7' is not a number"),
    (MODE, "off", "'off' is not one of ['auto', 'manual']"),
    (PUMP, 1, "1 is not a bool"),
    (SCALED, 3276.8, "3276.8 is outside [-3276.8, 3276.7]"),
])
def test_a_value_the_write_would_refuse_is_refused(point: PointInfo, value: object,
                                                    reason: str) -> None:
    with pytest.raises(ValueError, match=f"^{re.escape(reason)}$"):
        point.check_write(value)


@pytest.mark.parametrize(("point", "value"), [
    (SETPOINT, 0), (SETPOINT, 1000), (SETPOINT, 999.0), (MODE, "manual"), (PUMP, False),
    (SCALED, -3276.8), (PointInfo("name", "string", writable=True), "anything"),
])
def test_a_value_that_fits_passes(point: PointInfo, value: object) -> None:
    point.check_write(value)
