"""Sparkplug B payloads of the edge node: metric catalogue, encoding, command decoding (pure).

Every bridged point is one metric of its device. Its Sparkplug datatype comes from the point's
family-neutral description (bridge/driver.py `PointInfo`): a Modbus integer type stays that
type unless scale, offset or precision turn it into a Double; an enum is a String (the label);
serial `float` / `coordinate` points are Doubles, `int` Int64; OPC UA points have the type they
declare, DateTime, arrays and structures (and undeclared types) travel as Strings (ISO 8601,
JSON). Aliases are numbered 1.. across all devices of the node in configuration
order, so they are unique within the edge node as the specification requires; births carry
name + alias + datatype (+ the engineering unit as the property `engUnit`: the point's own, else
the one its values carried, as a device may state it), DATA messages the alias only.

A point that sends aggregates (bridge/aggregate) adds `<point>_mean_<window>`, `_min_` and
`_max_` Double metrics (without `point`: a DBIRTH does not wait for them, a DCMD cannot write
them).

Signed integers travel as two's complement in the unsigned protobuf fields (Int8/16/32 in
`int_value`, Int64 in `long_value`), as Sparkplug 3.0 specifies.

`parse_command` turns a DCMD / NCMD metric back into a value for the bridge's write path and
refuses (with `CommandRefusedError`) what does not fit the catalogue: unknown metric, a datatype or
value field that is not the metric's, a read-only point, and for Modbus points a value the
write path would refuse (min / max, the register type's range after scaling, an enum label):
it encodes the value exactly as the write will, without writing, so a DCMD can be checked
whole before any of it is written.

The generated `sparkplug_b_pb2.py` / `.pyi` come from the official Eclipse Tahu
`sparkplug_b.proto` next to this file; regenerate them from the repository root with
`python -m grpc_tools.protoc --proto_path=. --python_out=. --pyi_out=.
bridge/sparkplug/sparkplug_b.proto` (grpcio-tools 1.76).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final

from bridge.aggregate.points import SHOWN_STATISTICS, aggregated_points, shown_name
from bridge.config import BridgeConfig
from bridge.driver import PointInfo
from bridge.point import Value
from bridge.sparkplug.sparkplug_b_pb2 import Payload

NAMESPACE: Final = "spBv1.0"
REBIRTH: Final = "Node Control/Rebirth"
BDSEQ: Final = "bdSeq"

INT8, INT16, INT32, INT64 = 1, 2, 3, 4
UINT8, UINT16, UINT32, UINT64 = 5, 6, 7, 8
FLOAT, DOUBLE, BOOLEAN, STRING = 9, 10, 11, 12

_BITS = {INT8: 8, INT16: 16, INT32: 32, INT64: 64, UINT8: 8, UINT16: 16, UINT32: 32,
         UINT64: 64}
_SIGNED = {INT8, INT16, INT32, INT64}
# The value field of the protobuf `oneof value` each datatype uses.
VALUE_FIELD: Final = {
    INT8: "int_value", INT16: "int_value", INT32: "int_value", UINT8: "int_value",
    UINT16: "int_value", UINT32: "int_value", INT64: "long_value", UINT64: "long_value",
    FLOAT: "float_value", DOUBLE: "double_value", BOOLEAN: "boolean_value",
    STRING: "string_value",
}
# The bridge's neutral data types (bridge/driver.py DATATYPES) as Sparkplug datatypes.
_DATATYPES = {"bool": BOOLEAN, "int8": INT8, "int16": INT16, "int32": INT32, "int64": INT64,
              "uint8": UINT8, "uint16": UINT16, "uint32": UINT32, "uint64": UINT64,
              "float32": FLOAT, "float64": DOUBLE, "string": STRING, "datetime": STRING,
              "json": STRING}


class CommandRefusedError(ValueError):
    """A DCMD / NCMD metric that is not written; the message says why."""


@dataclass(frozen=True, slots=True)
class MetricSpec:
    """One point as a Sparkplug metric."""

    name: str
    alias: int
    datatype: int
    unit: str | None
    writable: bool
    point: PointInfo | None = field(default=None, compare=False)  # what a write must fit


def catalogue(bridge: BridgeConfig) -> dict[str, list[MetricSpec]]:
    """Device name -> its metrics, aliases unique across the node."""
    devices: dict[str, list[MetricSpec]] = {}
    alias = 1
    for device in bridge.device_configs():
        metrics = devices[device.name] = []
        for point in device.describe().points:
            metrics.append(MetricSpec(point.name, alias, _DATATYPES[point.datatype], point.unit,
                                      point.writable, point))
            alias += 1
    for agg in aggregated_points(bridge):  # `<point>_mean_1m` ...: read-only Doubles
        for statistic in SHOWN_STATISTICS:
            devices[agg.device].append(MetricSpec(
                shown_name(agg.point, statistic, agg.window), alias, DOUBLE, agg.unit, False))
            alias += 1
    return devices


def set_value(metric: Payload.Metric, datatype: int, value: Value) -> None:
    """Put `value` into the metric's field for `datatype` (None: `is_null`)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        metric.is_null = True
        return
    field = VALUE_FIELD[datatype]
    if isinstance(value, list | dict):  # an array or structure: JSON in a String metric
        if datatype == STRING:
            metric.string_value = json.dumps(value, separators=(",", ":"))
        else:
            metric.is_null = True
    elif datatype in _BITS:
        number = int(value) if not isinstance(value, str) else int(float(value))
        setattr(metric, field, number & ((1 << (32 if field == "int_value" else 64)) - 1))
    elif datatype in (FLOAT, DOUBLE):
        setattr(metric, field, float(value) if not isinstance(value, str) else float("nan"))
    elif datatype == BOOLEAN:
        metric.boolean_value = bool(value)
    else:
        metric.string_value = value if isinstance(value, str) else str(value)


def get_value(metric: Payload.Metric, datatype: int) -> Value:
    """The value of a received metric that must be of `datatype` (CommandRefusedError if not)."""
    field = metric.WhichOneof("value")
    if metric.is_null or field is None:
        raise CommandRefusedError("no value")
    if field != VALUE_FIELD.get(datatype):
        raise CommandRefusedError(f"wrong datatype: the value is in {field}, expected "
                             f"{VALUE_FIELD.get(datatype)}")
    raw = getattr(metric, field)
    if datatype in _BITS:
        bits = _BITS[datatype]
        width = 32 if field == "int_value" else 64
        if datatype in _SIGNED:
            raw = raw - (1 << width) if raw >= 1 << (width - 1) else raw
            if not -(1 << (bits - 1)) <= raw < 1 << (bits - 1):
                raise CommandRefusedError(f"{raw} does not fit the metric's datatype")
        elif raw >= 1 << bits:
            raise CommandRefusedError(f"{raw} does not fit the metric's datatype")
        return int(raw)
    if datatype in (FLOAT, DOUBLE, BOOLEAN, STRING):
        return raw  # type: ignore[no-any-return]
    raise CommandRefusedError(f"datatype {datatype} is not supported")


def metric_of(metric: Payload.Metric, metrics: Iterable[MetricSpec]) -> MetricSpec:
    """The catalogue entry a received metric names (by name, else by alias)."""
    for spec in metrics:
        if (metric.name and spec.name == metric.name) or (
                not metric.name and metric.HasField("alias") and spec.alias == metric.alias):
            return spec
    label = metric.name or f"alias {metric.alias}"
    raise CommandRefusedError(f"unknown metric {label!r}")


def parse_command(metric: Payload.Metric, metrics: Iterable[MetricSpec]) -> tuple[str, Value]:
    """A DCMD metric as (point name, value), checked against the catalogue."""
    spec = metric_of(metric, metrics)
    if metric.HasField("datatype") and metric.datatype != spec.datatype:
        raise CommandRefusedError(f"{spec.name!r}: wrong datatype {metric.datatype} "
                             f"(the metric is {spec.datatype})")
    if not spec.writable:
        raise CommandRefusedError(f"{spec.name!r} is read-only")
    try:
        value = get_value(metric, spec.datatype)
        if spec.point is not None:
            spec.point.check_write(value)  # refuses what the write would refuse
    except ValueError as exc:
        raise CommandRefusedError(f"{spec.name!r}: {exc}") from None
    return spec.name, value


def birth_metric(payload: Payload, spec: MetricSpec, value: Value, ts_ms: int,
                 published_unit: str | None = None) -> None:
    """Append a birth metric: name, alias, datatype, unit property, current value. The unit is
    the point's, else `published_unit` (the one its values carried)."""
    metric = payload.metrics.add(name=spec.name, alias=spec.alias, datatype=spec.datatype,
                                 timestamp=ts_ms)
    unit = spec.unit if spec.unit is not None else published_unit
    if unit is not None:
        metric.properties.keys.append("engUnit")
        metric.properties.values.add(type=STRING, string_value=unit)
    set_value(metric, spec.datatype, value)


def data_metric(payload: Payload, spec: MetricSpec, value: Value, ts_ms: int,
                historical: bool = False) -> None:
    """Append a DATA metric: alias, timestamp, value (and is_historical for held data)."""
    metric = payload.metrics.add(alias=spec.alias, timestamp=ts_ms)
    if historical:
        metric.is_historical = True
    set_value(metric, spec.datatype, value)


def node_birth(seq: int, bdseq: int, ts_ms: int) -> Payload:
    """The NBIRTH payload: bdSeq and the rebirth control."""
    payload = Payload(timestamp=ts_ms, seq=seq)
    payload.metrics.add(name=BDSEQ, datatype=INT64, long_value=bdseq, timestamp=ts_ms)
    payload.metrics.add(name=REBIRTH, datatype=BOOLEAN, boolean_value=False, timestamp=ts_ms)
    return payload


def node_death(bdseq: int, ts_ms: int) -> bytes:
    """The NDEATH payload (the will of the session): bdSeq only, no seq."""
    payload = Payload(timestamp=ts_ms)
    payload.metrics.add(name=BDSEQ, datatype=INT64, long_value=bdseq, timestamp=ts_ms)
    return payload.SerializeToString()
