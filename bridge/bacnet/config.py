"""Configuration models of BACnet/IP devices (`[[bridge.bacnet]]`): a device, where, its points.

A device is one BACnet device instance (`device_id`) at a B/IP `address` (`host:port`, port
47808 by default); one behind a BACnet router (an MS/TP trunk, another IP network) is reached
through the router's address with its `network` number and `mac` on that network, so several
devices may share one address. Its points are objects by type and instance (`analog-input:1`,
or short `AI:1`) of the nine kinds below; each publishes its present-value with the quality its
status-flags give (bridge/bacnet/values.py). `mode = "cov"` subscribes to changes of value where
the device supports it and polls the rest every `poll_interval`; `mode = "poll"` polls all.

Pure: pydantic only.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import ConfigDict, Field, field_validator, model_validator

from bridge.driver import DeviceDescription, PointInfo
from bridge.point import Name, ReportFields, Seconds, check_unique
from gateway.base.hostport import parse_host_port
from gateway.base.settings import Section

BACNET_PORT = 47808
# object type numbers of the point kinds (ASHRAE 135: BACnetObjectType)
OBJECT_TYPES: dict[str, int] = {
    "analog-input": 0, "analog-output": 1, "analog-value": 2, "binary-input": 3,
    "binary-output": 4, "binary-value": 5, "multi-state-input": 13, "multi-state-output": 14,
    "multi-state-value": 19,
}
SHORT = {"AI": "analog-input", "AO": "analog-output", "AV": "analog-value",
         "BI": "binary-input", "BO": "binary-output", "BV": "binary-value",
         "MSI": "multi-state-input", "MSO": "multi-state-output", "MSV": "multi-state-value"}
TYPE_NAMES = {number: name for name, number in OBJECT_TYPES.items()}
_OBJECT = re.compile(r"^\s*([A-Za-z-]+)\s*[:,]\s*(\d+)\s*$")
MAX_INSTANCE = 4194302  # 4194303 is "any"


def parse_object(text: str) -> tuple[int, int]:
    """(object type, instance) of `analog-input:1`, `AI:1` or `analog-input,1`."""
    match = _OBJECT.match(text)
    if not match:
        raise ValueError(f"{text!r} is not an object (e.g. 'analog-input:1' or 'AI:1')")
    name = SHORT.get(match[1].upper(), match[1].lower())
    if name not in OBJECT_TYPES:
        raise ValueError(f"{match[1]!r} is not an object type of a point (one of "
                         f"{', '.join(OBJECT_TYPES)}, or {', '.join(SHORT)})")
    instance = int(match[2])
    if instance > MAX_INSTANCE:
        raise ValueError(f"instance {instance} is above {MAX_INSTANCE}")
    return OBJECT_TYPES[name], instance


def kind_of(object_type: int) -> str:
    """"analog", "binary" or "multi-state"."""
    return TYPE_NAMES[object_type].rsplit("-", 1)[0]


class BacnetPointConfig(ReportFields):
    """One object of the device as a point: its present-value and status-flags."""

    name: Name = Field(title="Name", description="the point's topic level")
    object: str = Field(title="Object", description="object type and instance: "
                        "'analog-input:1' or 'AI:1' (AI, AO, AV, BI, BO, BV, MSI, MSO, MSV)")
    writable: bool = Field(default=False, title="Writable",
                           description="writes from <prefix>/<device>/<point>/set "
                           "(outputs and commandable values)")
    priority: Annotated[int, Field(ge=1, le=16)] | None = Field(
        default=None, title="Write priority", description="the priority-array slot a write "
        "takes (1 highest .. 16 lowest; 6 is reserved); default: the device's")
    cov: bool | None = Field(default=None, title="Subscribe (COV)", description="subscribe to "
                             "changes of value; default: the device's mode")
    enum: dict[int, str] | None = Field(default=None, title="State labels",
                                        description="multi-state: labels of the states "
                                        "(1, 2, ...)")
    min: float | None = Field(default=None, title="Minimum", description="lowest value a "
                              "write may set")
    max: float | None = Field(default=None, title="Maximum", description="highest value a "
                              "write may set")
    device_class: Annotated[str, Field(pattern=r"^[a-z0-9_]+$")] | None = Field(
        default=None, title="Home Assistant device class")
    state_class: Literal["measurement", "total", "total_increasing"] | None = Field(
        default=None, title="Home Assistant state class")

    @field_validator("object")
    @classmethod
    def _object(cls, text: str) -> str:
        kind, instance = parse_object(text)
        return f"{TYPE_NAMES[kind]}:{instance}"

    @field_validator("priority")
    @classmethod
    def _priority(cls, value: int | None) -> int | None:
        if value == 6:
            raise ValueError("priority 6 is reserved for minimum on/off")
        return value

    @model_validator(mode="after")
    def _fits(self) -> BacnetPointConfig:
        kind = self.kind
        problems = []
        if self.enum is not None and kind != "multi-state":
            problems.append("enum is for multi-state objects")
        if (self.min is not None or self.max is not None) and kind == "binary":
            problems.append("min/max are for analog and multi-state objects")
        if self.min is not None and self.max is not None and self.min > self.max:
            problems.append("min is greater than max")
        if self.writable and self.ref[0] in (0, 3, 13):
            problems.append(f"{self.object} is an input: inputs are not writable")
        if problems:
            raise ValueError("; ".join(problems))
        return self

    @property
    def ref(self) -> tuple[int, int]:
        """(object type, instance)."""
        return parse_object(self.object)

    @property
    def kind(self) -> str:
        """"analog", "binary" or "multi-state"."""
        return kind_of(self.ref[0])

    def info(self) -> PointInfo:
        """The point, family-neutral."""
        kind = self.kind
        if kind == "binary":
            return PointInfo(self.name, "bool", self.unit, self.writable, None,
                             device_class=self.device_class, state_class=self.state_class)
        if self.enum is not None:
            return PointInfo(self.name, "string", self.unit, self.writable,
                             tuple(self.enum.values()))
        if kind == "multi-state":
            return PointInfo(self.name, "uint32", self.unit, self.writable, None,
                             1 if self.min is None else self.min,
                             2 ** 32 - 1 if self.max is None else self.max, True,
                             self.device_class, self.state_class)
        return PointInfo(self.name, "float32", self.unit, self.writable, None, self.min,
                         self.max, False, self.device_class, self.state_class)


class BacnetDeviceConfig(Section):
    """One BACnet/IP device and the objects read from it."""

    # How the console shows it (outpost/console/forms.py reads these hints from the schema):
    # where the device is (a router's address, network and MAC for one behind it) at once.
    model_config = ConfigDict(json_schema_extra={"x-ui": {
        "main": ["name", "address", "device_id", "network", "mac", "poll_interval"],
        "columns": ["name", "object", "unit", "deadband", "writable"],
        "list": ["address"],
        "labels": {"address": "device or router address", "device_id": "device instance",
                   "network": "network (behind a router)", "mac": "MAC (behind a router)"},
        "placeholders": {"address": "192.168.0.30:47808", "mac": "05"}}})

    name: Name = Field(title="Name", description="the device's topic level")
    enabled: bool = Field(default=True, title="Enabled",
                          description="false: kept in the file, not contacted")
    device_id: Annotated[int, Field(ge=0, le=MAX_INSTANCE)] = Field(
        title="Device instance", description="the device object's instance (outpost bacnet "
        "discover lists them)")
    address: Annotated[str, Field(min_length=1)] = Field(
        title="Address", description="host:port of the device, or of the router in front of "
        "it (port 47808 when left out)")
    network: Annotated[int, Field(ge=1, le=65534)] | None = Field(
        default=None, title="Network number", description="behind a router: the device's "
        "network number (with mac)")
    mac: Annotated[str, Field(pattern=r"^([0-9A-Fa-f]{2}){1,7}$")] | None = Field(
        default=None, title="MAC address", description="behind a router: the device's MAC "
        "on its network in hex (an MS/TP station 5: '05')")
    local_address: str = Field(default="0.0.0.0:0", title="Local address", description="the "
                               "bridge's UDP address for this device (port 0: any free one)")
    mode: Literal["cov", "poll"] = Field(
        default="cov", title="Mode", description="cov: subscribe to changes where the device "
        "supports it and poll the rest; poll: poll every point")
    cov_lifetime: Annotated[int, Field(ge=10, le=86400)] = Field(
        default=300, title="COV lifetime", description="seconds a subscription lasts; renewed "
        "at half of it", json_schema_extra={"unit": "s"})
    poll_interval: Seconds = Field(default=1.0, title="Poll interval",
                                   json_schema_extra={"unit": "s"})
    check_interval: Seconds = Field(
        default=5.0, title="Check interval", description="with every point subscribed: "
        "seconds between reads that check the device is still there",
        json_schema_extra={"unit": "s"})
    timeout: Seconds = Field(default=2.0, title="Timeout",
                             description="seconds to wait for an answer",
                             json_schema_extra={"unit": "s"})
    retries: Annotated[int, Field(ge=0, le=5)] = Field(
        default=1, title="Retries", description="tries more before the device counts as gone")
    max_apdu: Annotated[int, Field(ge=50, le=1476)] = Field(
        default=1476, title="Max APDU", description="largest answer asked for; the device's own "
        "limit is read when it is reached", json_schema_extra={"unit": "bytes"})
    write_priority: Annotated[int, Field(ge=1, le=16)] = Field(
        default=16, title="Write priority", description="the priority of writes of points that "
        "name none")
    reconnect_initial: Seconds = Field(default=1.0, title="Reconnect after",
                                       json_schema_extra={"unit": "s"})
    reconnect_max: Seconds = Field(default=30.0, title="Reconnect at most after",
                                   json_schema_extra={"unit": "s"})
    report: Literal["poll", "change"] = Field(default="change", title="Report")
    heartbeat: Seconds | None = Field(default=60.0, title="Heartbeat", description="on "
                                      "change: publish at least this often",
                                      json_schema_extra={"unit": "s"})
    description: str | None = Field(default=None, title="Description")
    points: list[BacnetPointConfig] = Field(default_factory=list, title="Points")

    @field_validator("address", "local_address")
    @classmethod
    def _address(cls, text: str) -> str:
        parse_host_port(text, BACNET_PORT)
        return text

    @field_validator("write_priority")
    @classmethod
    def _priority(cls, value: int) -> int:
        if value == 6:
            raise ValueError("priority 6 is reserved for minimum on/off")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> BacnetDeviceConfig:
        problems = check_unique([p.name for p in self.points], "points", "point name")
        problems += check_unique([p.object for p in self.points], "points", "object")
        if (self.network is None) != (self.mac is None):
            problems.append("network and mac go together (a device behind a router)")
        if self.reconnect_initial > self.reconnect_max:
            problems.append("reconnect_initial is greater than reconnect_max")
        if problems:
            raise ValueError("; ".join(problems))
        return self

    @property
    def host_port(self) -> tuple[str, int]:
        """The device's (or its router's) host and port."""
        found = parse_host_port(self.address, BACNET_PORT)
        return found.host, found.port

    @property
    def local(self) -> tuple[str, int]:
        """The bridge's host and port for this device."""
        found = parse_host_port(self.local_address, 0)
        return found.host, found.port

    def describe(self) -> DeviceDescription:
        """The device's points, family-neutral."""
        return DeviceDescription(self.description or f"BACnet device {self.device_id}",
                                 tuple(point.info() for point in self.points))
