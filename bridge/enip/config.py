"""Configuration models of EtherNet/IP devices (`[[bridge.enip]]`): a Logix controller, how
to reach it, its tags.

A device is one ControlLogix, CompactLogix or GuardLogix controller (or a Micro800 / another
CIP device that serves Logix tags) reached over EtherNet/IP (TCP port 44818) and, through a
chassis, by a route (`path = "1,0"`: the backplane, slot 0, where ControlLogix CPUs usually
sit; `""` for a controller with nothing in between). Its points are tags by name, as Studio
5000 shows them (bridge/enip/tags.py), with a Logix data type (bridge/enip/values.py):
`elements > 1` reads an array from that element on and publishes a JSON list. The device
polls every `poll_interval` with the requests its plan needs (bridge/enip/plan.py).

Pure: pydantic only.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import ConfigDict, Field, field_validator, model_validator

from bridge.driver import DeviceDescription, PointInfo
from bridge.enip import values
from bridge.enip.tags import canonical
from bridge.point import Name, ReportFields, Seconds, check_unique
from gateway.base.settings import Section

TypeName = Literal["BOOL", "SINT", "INT", "DINT", "LINT", "USINT", "UINT", "UDINT", "ULINT",
                   "REAL", "LREAL", "STRING"]


class EnipPointConfig(ReportFields):
    """One tag (or tag element, UDT member, array slice) of the controller as a point."""

    model_config = ConfigDict(json_schema_extra={"x-ui": {"where": ["tag"]}})

    name: Name = Field(title="Name", description="the point's topic level")
    tag: str = Field(title="Tag", description="the tag as Studio 5000 names it: Speed, "
                     "Recipe[3], Motor.Speed, Program:Main.Count (outpost enip browse lists "
                     "them)")
    type: TypeName = Field(title="Data type", description="the tag's Logix data type "
                           "(checked against the controller's at every read)")
    elements: Annotated[int, Field(ge=1, le=1000)] = Field(
        default=1, title="Elements", description="more than 1: this many array elements from "
        "the tag's on, published as a JSON list (read-only)")
    enum: dict[int, str] | None = Field(default=None, title="Labels",
                                        description="labels of an integer's values")
    writable: bool = Field(default=False, title="Writable",
                           description="accept writes from <prefix>/<device>/<point>/set")
    min: float | None = Field(default=None, title="Minimum",
                              description="the lowest value a write may set")
    max: float | None = Field(default=None, title="Maximum",
                              description="the highest value a write may set")
    device_class: Annotated[str, Field(pattern=r"^[a-z0-9_]+$")] | None = Field(
        default=None, title="Home Assistant device class")
    state_class: Literal["measurement", "total", "total_increasing"] | None = Field(
        default=None, title="Home Assistant state class")

    @field_validator("tag")
    @classmethod
    def _tag(cls, text: str) -> str:
        return canonical(text)

    @model_validator(mode="after")
    def _fits(self) -> EnipPointConfig:
        problems = []
        if self.enum is not None and self.type not in values.INTEGERS:
            problems.append("enum needs an integer type")
        numeric = self.type in values.INTEGERS or self.type in values.FLOATS
        if (self.min is not None or self.max is not None) and not numeric:
            problems.append("min/max need a numeric type")
        if self.min is not None and self.max is not None and self.min > self.max:
            problems.append("min is greater than max")
        if self.elements > 1 and (self.writable or self.enum is not None):
            problems.append("an array of several elements is read-only and has no labels "
                            "(write an element: tag = \"Recipe[3]\")")
        if problems:
            raise ValueError("; ".join(problems))
        return self

    def info(self) -> PointInfo:
        """The point, family-neutral."""
        if self.elements > 1:
            return PointInfo(self.name, "json", self.unit)
        if self.enum is not None:
            return PointInfo(self.name, "string", self.unit, self.writable,
                             tuple(sorted(self.enum.values())))
        if self.type == "STRING":
            return PointInfo(self.name, "string", self.unit, self.writable)
        spec = values.TYPES[self.type]
        return PointInfo(self.name, spec.datatype, self.unit, self.writable, None,
                         self.min if self.min is not None else spec.low,
                         self.max if self.max is not None else spec.high,
                         self.type in values.INTEGERS, self.device_class, self.state_class)


class EnipDeviceConfig(Section):
    """One Logix controller and the tags read from it."""

    # How the console shows it (outpost/console/forms.py reads these hints from the schema).
    model_config = ConfigDict(json_schema_extra={"x-ui": {
        "main": ["name", "host", "port", "path", "poll_interval"],
        "columns": ["name", "tag", "type", "elements", "unit", "deadband", "writable"],
        "list": ["host"],
        "labels": {"host": "controller address", "port": "TCP port",
                   "path": "route (port,slot)"},
        "units": {"connection_size": "bytes"},
        "placeholders": {"host": "192.168.0.20", "path": "1,0"}}})

    name: Name = Field(title="Name", description="the device's topic level")
    enabled: bool = Field(default=True, title="Enabled",
                          description="false: kept in the file, not connected")
    host: Annotated[str, Field(min_length=1, pattern=r"^[^\s:/]+$")] = Field(
        title="Host", description="the controller's (or its Ethernet module's) IP address or "
        "host name")
    port: Annotated[int, Field(ge=1, le=65535)] = Field(default=44818, title="Port")
    path: Annotated[str, Field(pattern=r"^(\d+\s*,\s*[\w.]+(\s*,\s*\d+\s*,\s*[\w.]+)*)?$")] \
        = Field(default="1,0", title="Route",
                description="port,link pairs to the controller: \"1,0\" is the backplane, "
                "slot 0 (ControlLogix: the CPU's slot); \"\" when the address is the "
                "controller's own (CompactLogix, Micro800)")
    connection_size: Annotated[int, Field(ge=500, le=4000)] = Field(
        default=4000, title="Connection size", description="bytes asked for with a Large "
        "Forward Open (v20 and later); a controller that refuses it gets a Forward Open of "
        "500", json_schema_extra={"unit": "bytes"})
    poll_interval: Seconds = Field(default=1.0, title="Poll interval",
                                   json_schema_extra={"unit": "s"})
    timeout: Seconds = Field(default=2.0, title="Timeout",
                             description="seconds to wait for an answer",
                             json_schema_extra={"unit": "s"})
    reconnect_initial: Seconds = Field(default=1.0, title="First reconnect delay",
                                       json_schema_extra={"unit": "s"})
    reconnect_max: Seconds = Field(default=30.0, title="Longest reconnect delay",
                                   json_schema_extra={"unit": "s"})
    report: Literal["poll", "change"] = Field(default="change", title="Report",
                                              description="every poll, or on change")
    heartbeat: Seconds | None = Field(default=60.0, title="Heartbeat", description="on "
                                      "change: publish at least this often anyway",
                                      json_schema_extra={"unit": "s"})
    description: str | None = Field(default=None, title="Description")
    points: list[EnipPointConfig] = Field(default_factory=list, title="Points")

    @model_validator(mode="after")
    def _consistent(self) -> EnipDeviceConfig:
        problems = check_unique([p.name for p in self.points], "points", "point name")
        if self.reconnect_initial > self.reconnect_max:
            problems.append("reconnect_initial is greater than reconnect_max")
        if problems:
            raise ValueError("; ".join(problems))
        return self

    @property
    def route(self) -> str:
        """The connection path as pycomm3 takes it: `host:port/1/0`."""
        hops = [hop.strip() for hop in self.path.split(",") if hop.strip()]
        return "/".join([f"{self.host}:{self.port}", *hops])

    def describe(self) -> DeviceDescription:
        """The device's points, family-neutral."""
        return DeviceDescription(self.description or f"Logix controller {self.host}",
                                 tuple(point.info() for point in self.points))
