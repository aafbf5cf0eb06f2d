"""BACnet values to point values and back: present-value, status-flags, units, writes.

- Analog objects' present-value is a REAL: published as a number (NaN or infinite: `bad`).
  Binary objects' is `inactive` / `active`: published as false / true. Multi-state objects'
  is a state number from 1: published as it is, or as its label from the point's `enum`.
- status-flags (in-alarm, fault, overridden, out-of-service) give the quality: `fault` is
  `bad`, `overridden` or `out-of-service` `uncertain`, otherwise `good` (an alarm is a valid
  value). A present-value the device cannot read (an error in the answer) is `bad`.
- A write of `null` relinquishes the point's priority slot; otherwise the value is checked
  (a finite number within min/max for analog, true/false for binary, a state number or label
  for multi-state) and encoded as the object type expects (REAL, ENUMERATED, Unsigned).

Pure.
"""

from __future__ import annotations

import math
import struct
from typing import Any

from bridge.bacnet import tags
from bridge.bacnet.config import BacnetPointConfig
from bridge.bacnet.wire import PropertyError
from bridge.driver import WriteError
from bridge.point import BAD, GOOD, UNCERTAIN, Value

FLOAT32_MAX = 3.4028234663852886e38


def quality_of(flags: Any) -> str:
    """The quality status-flags give (no flags: good)."""
    if not isinstance(flags, list) or len(flags) < 4:
        return GOOD
    if flags[1]:
        return BAD
    return UNCERTAIN if flags[2] or flags[3] else GOOD


def point_value(point: BacnetPointConfig, kind: str, present: Any, flags: Any,
                ) -> tuple[Value, str]:
    """A point's value and quality from its present-value and status-flags."""
    if isinstance(present, PropertyError) or present is None:
        return None, BAD
    quality = quality_of(flags)
    if kind == "analog":
        if not isinstance(present, float | int) or isinstance(present, bool):
            return None, BAD
        value = float(present)
        return (value, quality) if math.isfinite(value) else (None, BAD)
    if kind == "binary":
        if not isinstance(present, int):
            return None, BAD
        return bool(present), quality
    if not isinstance(present, int) or isinstance(present, bool):
        return None, BAD
    if point.enum is not None:
        return point.enum.get(present, present), quality
    return present, quality


def encode(point: BacnetPointConfig, value: object) -> tuple[bytes, object]:
    """(application-tagged bytes, the value as it will read back); WriteError why not."""
    if value is None:
        return tags.app_null(), None
    kind = point.kind
    if kind == "binary":
        if value in ("active", "inactive"):
            value = value == "active"
        if not isinstance(value, bool):
            raise WriteError(f"{value!r}: expected true or false (or null to relinquish)")
        return tags.app_unsigned(int(value), tags.ENUMERATED), value
    if kind == "multi-state" and point.enum is not None and isinstance(value, str):
        numbers = {label: number for number, label in point.enum.items()}
        if value not in numbers:
            raise WriteError(f"{value!r} is not one of {list(point.enum.values())}")
        value = numbers[value]
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise WriteError(f"{value!r} is not a number (or null to relinquish)")
    if point.min is not None and value < point.min:
        raise WriteError(f"{value:g} is below min {point.min:g}")
    if point.max is not None and value > point.max:
        raise WriteError(f"{value:g} is above max {point.max:g}")
    if kind == "multi-state":
        if value != int(value) or value < 1 or value >= 2 ** 32:
            raise WriteError(f"{value:g} is not a state number (1, 2, ...)")
        number = int(value)
        written = point.enum.get(number, number) if point.enum else number
        return tags.app_unsigned(number), written
    if not math.isfinite(value) or abs(value) > FLOAT32_MAX:
        raise WriteError(f"{value:g} does not fit a REAL")
    encoded = tags.app_real(float(value))
    return encoded, struct.unpack(">f", encoded[1:])[0]
