"""OPC UA values to bridge points and back: quality, timestamps, types, write checks (pure).

Quality: an OPC UA StatusCode's two top bits are its severity. `Good` (00) is `good`;
`Uncertain` (01) is `uncertain` and keeps the value (e.g. UncertainLastUsableValue,
UncertainSensorNotAccurate); `Bad` (10, 11) is `bad` and the value is published as null
(BadSensorFailure, BadCommunicationError, BadNodeIdUnknown, BadOutOfService, ...).

Timestamps: the point's `ts` is the value's SourceTimestamp (when the device measured it);
without one the ServerTimestamp, without both the gateway's clock.

Values: Boolean, the integers, Float/Double and String as they are; DateTime as ISO 8601
with a `Z`; an enumeration value as its integer (or its label when the point has `enum`);
ByteString as hex; arrays as JSON arrays; structures (ExtensionObjects) as JSON objects of
their fields; LocalizedText as its text, QualifiedName as `ns:Name`, NodeId as its string.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import uuid
from datetime import UTC, datetime
from typing import Any

from asyncua import ua

from bridge.driver import WriteError, written_time
from bridge.opcua.config import OpcUaPointConfig
from bridge.point import BAD, GOOD, UNCERTAIN, Value

# The declared point type -> the OPC UA built-in type it reads and writes as.
VARIANT_TYPES: dict[str, ua.VariantType] = {
    "bool": ua.VariantType.Boolean, "int8": ua.VariantType.SByte,
    "uint8": ua.VariantType.Byte, "int16": ua.VariantType.Int16,
    "uint16": ua.VariantType.UInt16, "int32": ua.VariantType.Int32,
    "uint32": ua.VariantType.UInt32, "int64": ua.VariantType.Int64,
    "uint64": ua.VariantType.UInt64, "float32": ua.VariantType.Float,
    "float64": ua.VariantType.Double, "string": ua.VariantType.String,
    "datetime": ua.VariantType.DateTime,
}
_TYPE_NAMES = {variant: name for name, variant in VARIANT_TYPES.items()}
_INTEGER_LIMITS = {ua.VariantType.SByte: (-(1 << 7), (1 << 7) - 1),
                   ua.VariantType.Byte: (0, (1 << 8) - 1),
                   ua.VariantType.Int16: (-(1 << 15), (1 << 15) - 1),
                   ua.VariantType.UInt16: (0, (1 << 16) - 1),
                   ua.VariantType.Int32: (-(1 << 31), (1 << 31) - 1),
                   ua.VariantType.UInt32: (0, (1 << 32) - 1),
                   ua.VariantType.Int64: (-(1 << 63), (1 << 63) - 1),
                   ua.VariantType.UInt64: (0, (1 << 64) - 1)}
_FLOATS = (ua.VariantType.Float, ua.VariantType.Double)


def quality(status: ua.StatusCode | None) -> str:
    """`good`, `uncertain` or `bad` from a StatusCode's severity (None: good)."""
    if status is None:
        return GOOD
    severity = status.value >> 30
    return GOOD if severity == 0 else UNCERTAIN if severity == 1 else BAD


def timestamp_ms(value: ua.DataValue, now_ms: int) -> int:
    """The SourceTimestamp, else the ServerTimestamp, else `now_ms`, in epoch ms."""
    stamp = value.SourceTimestamp or value.ServerTimestamp
    if stamp is None:
        return now_ms
    if stamp.tzinfo is None:  # asyncua hands out naive UTC datetimes
        stamp = stamp.replace(tzinfo=UTC)
    return int(stamp.timestamp() * 1000)


def type_name(variant: ua.VariantType) -> str:
    """A built-in type as a point type name where there is one (`float64`), else its name."""
    return _TYPE_NAMES.get(variant, variant.name)


def check_type(point: OpcUaPointConfig, variant: ua.VariantType) -> str | None:
    """Why a node's DataType does not fit the point's declared type (None: it fits)."""
    if point.type is None or point.type == "json":
        return None
    expected = VARIANT_TYPES[point.type]
    if variant == expected:
        return None
    if point.enum is not None and variant == ua.VariantType.Int32:
        return None  # enumerations travel as Int32
    return (f"type mismatch: the node's DataType is {type_name(variant)}, the point says "
            f"{point.type}")


def to_json(value: Any) -> Any:
    """An OPC UA value as JSON-able data (structures as objects, arrays as lists)."""
    if value is None or isinstance(value, bool | int | str):
        return value.value if isinstance(value, enum.Enum) else value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, enum.Enum):
        return to_json(value.value)
    if isinstance(value, datetime):
        stamp = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
        return stamp.astimezone(UTC).isoformat().replace("+00:00", "Z")
    if isinstance(value, bytes | bytearray):
        return bytes(value).hex()
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, list | tuple):
        return [to_json(item) for item in value]
    if isinstance(value, ua.LocalizedText):
        return value.Text
    if isinstance(value, ua.QualifiedName):
        return f"{value.NamespaceIndex}:{value.Name}"
    if isinstance(value, ua.NodeId):
        return value.to_string()
    if isinstance(value, ua.Variant):
        return to_json(value.Value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_json(getattr(value, f.name)) for f in dataclasses.fields(value)}
    return str(value)


def point_value(point: OpcUaPointConfig, value: ua.DataValue) -> tuple[Value, str]:
    """A received DataValue as the point's value and quality."""
    status = quality(value.StatusCode)
    if status == BAD or value.Value is None:
        return None, BAD if status == BAD else status
    data = to_json(value.Value.Value)
    if point.enum is not None and isinstance(data, int) and not isinstance(data, bool):
        return point.enum.get(data, str(data)), status
    return data, status


def encode(point: OpcUaPointConfig, variant: ua.VariantType, value: object) -> ua.Variant:
    """A value from `.../set` as a Variant of the node's type; WriteError when it does not
    fit (type, range, enum label)."""
    if point.enum is not None and isinstance(value, str):
        codes = {label: code for code, label in point.enum.items()}
        if value not in codes:
            raise WriteError(f"{value!r} is not one of {sorted(codes)}")
        value = codes[value]
    if variant == ua.VariantType.Boolean:
        if not isinstance(value, bool):
            raise WriteError(f"expected true or false, got {value!r}")
        return ua.Variant(value, variant)
    if variant in _INTEGER_LIMITS or variant in _FLOATS:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise WriteError(f"expected a number, got {value!r}")
        if variant in _INTEGER_LIMITS:
            if isinstance(value, float) and not value.is_integer():
                raise WriteError(f"expected a whole number for {type_name(variant)}, got "
                                 f"{value!r}")
            value = int(value)
            low, high = _INTEGER_LIMITS[variant]
            if not low <= value <= high:
                raise WriteError(f"{value} is out of range for {type_name(variant)} "
                                 f"({low}..{high})")
        elif not math.isfinite(value):
            raise WriteError(f"{value!r} is not a finite number")
        if point.min is not None and value < point.min:
            raise WriteError(f"{value} is below min {point.min:g}")
        if point.max is not None and value > point.max:
            raise WriteError(f"{value} is above max {point.max:g}")
        return ua.Variant(float(value) if variant in _FLOATS else value, variant)
    if variant == ua.VariantType.String:
        if not isinstance(value, str):
            raise WriteError(f"expected a string, got {value!r}")
        return ua.Variant(value, variant)
    if variant == ua.VariantType.DateTime:
        stamp = written_time(value)
        if stamp.tzinfo is None:
            stamp = stamp.replace(tzinfo=UTC)
        return ua.Variant(stamp.astimezone(UTC), variant)
    raise WriteError(f"writing {type_name(variant)} nodes is not supported")
