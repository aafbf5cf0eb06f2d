"""Configuration models of OPC UA devices (`[[bridge.opcua]]`): a server, its security, its nodes.

A device is one OPC UA server endpoint (`opc.tcp://plc:4840`); its points are nodes, named by
NodeId (`ns=2;s=Line1.Temperature`, `ns=3;i=1001`, `i=2258`) or by a browse path from the
Objects folder (`/2:PLC/2:Line1/2:Temperature`, each step `namespace:BrowseName`). Values come
by subscription (monitored items with a sampling interval, a queue size and an optional
server-side absolute deadband) or, with `mode = "poll"`, by reading every `poll_interval`.

Security: `security_policy` (None, Basic256Sha256, Aes128_Sha256_RsaOaep,
Aes256_Sha256_RsaPss) with `security_mode` (Sign, SignAndEncrypt; None only with policy
None); the user identity is anonymous, `username` + `password`, or an X.509 certificate
(`user_certificate` + `user_key`). The server's certificate must be in `trusted_certificates`
or, with `trust_on_first_use`, is pinned at the first connection (bridge/opcua/pki.py).

Pure: pydantic only.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Literal

from pydantic import ConfigDict, Field, field_validator, model_validator

from bridge.driver import DeviceDescription, PointInfo
from bridge.point import Name, ReportFields, Seconds, check_unique
from gateway.base.settings import Section

SecurityPolicy = Literal["None", "Basic256Sha256", "Aes128_Sha256_RsaOaep",
                         "Aes256_Sha256_RsaPss"]
SecurityMode = Literal["None", "Sign", "SignAndEncrypt"]
# The types a point may declare; None: whatever the server sends (published as JSON).
PointType = Literal["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
                    "uint64", "float32", "float64", "string", "datetime", "json"]
INTEGER_TYPES = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
_NODE_ID = re.compile(r"^(ns=\d+;)?(i=\d+|s=.+|g=[0-9a-fA-F-]{36}|b=\S+)$")
_BROWSE_STEP = re.compile(r"^\d+:[^/]+$")
_INTEGER_RANGES = {"int8": (-(1 << 7), (1 << 7) - 1), "uint8": (0, (1 << 8) - 1),
                   "int16": (-(1 << 15), (1 << 15) - 1), "uint16": (0, (1 << 16) - 1),
                   "int32": (-(1 << 31), (1 << 31) - 1), "uint32": (0, (1 << 32) - 1),
                   "int64": (-(1 << 63), (1 << 63) - 1), "uint64": (0, (1 << 64) - 1)}


def check_node(node: str) -> str:
    """A NodeId (`ns=2;s=Tag`, `ns=2;i=7`, `i=2258`) or a browse path (`/2:PLC/2:Tag`)."""
    if node.startswith("/"):
        steps = node[1:].split("/")
        bad = [step for step in steps if not _BROWSE_STEP.match(step)]
        if bad:
            raise ValueError(f"browse path step {bad[0]!r} must be 'namespace:BrowseName' "
                             f"(e.g. '/2:PLC/2:Temperature', from the Objects folder)")
        return node
    if not _NODE_ID.match(node):
        raise ValueError("must be a NodeId like 'ns=2;s=Line1.Temp' or 'ns=3;i=1001', or a "
                         "browse path like '/2:PLC/2:Temperature'")
    return node


class OpcUaPointConfig(ReportFields):
    """One OPC UA variable node as a point."""

    model_config = ConfigDict(json_schema_extra={"x-ui": {"where": ["node"]}})

    name: Name
    node: str = Field(description="NodeId (ns=2;s=...) or browse path (/2:PLC/2:Temp)")
    type: PointType | None = Field(
        default=None, description="expected type, checked against the node's DataType; "
        "default: as the server sends it")
    enum: dict[int, str] | None = Field(default=None,
                                        description="labels of an enumeration's values")
    writable: bool = False
    min: float | None = None
    max: float | None = None
    sampling_interval: Annotated[float, Field(ge=0)] | None = Field(
        default=None, description="seconds; default: the device's")
    queue_size: Annotated[int, Field(ge=1, le=1000)] | None = None
    filter_deadband: Annotated[float, Field(gt=0)] | None = Field(
        default=None, description="server-side absolute deadband of the data change filter")
    device_class: Annotated[str, Field(pattern=r"^[a-z0-9_]+$")] | None = None
    state_class: Literal["measurement", "total", "total_increasing"] | None = None

    @field_validator("node")
    @classmethod
    def _node(cls, node: str) -> str:
        return check_node(node)

    @model_validator(mode="after")
    def _consistent(self) -> OpcUaPointConfig:
        problems = []
        numeric = self.type is None or self.type in INTEGER_TYPES or self.type in (
            "float32", "float64")
        if self.enum is not None and self.type not in (None, *INTEGER_TYPES):
            problems.append("enum needs an integer type")
        if (self.min is not None or self.max is not None) and not numeric:
            problems.append("min/max need a numeric type")
        if self.min is not None and self.max is not None and self.min > self.max:
            problems.append("min is greater than max")
        if self.writable and self.type == "json":
            problems.append("a json point (array or structure) is read-only")
        if problems:
            raise ValueError("; ".join(problems))
        return self

    def info(self) -> PointInfo:
        """The point, family-neutral."""
        if self.enum is not None:
            return PointInfo(self.name, "string", self.unit, self.writable,
                             tuple(sorted(self.enum.values())))
        datatype = self.type or "json"
        low, high = _INTEGER_RANGES.get(datatype, (None, None))
        return PointInfo(self.name, datatype, self.unit, self.writable, None,
                         self.min if self.min is not None else low,
                         self.max if self.max is not None else high,
                         datatype in INTEGER_TYPES, self.device_class, self.state_class)


class OpcUaDeviceConfig(Section):
    """One OPC UA server and the nodes read from it."""

    # How the console shows it (outpost/console/forms.py reads these hints from the schema).
    model_config = ConfigDict(json_schema_extra={"x-ui": {
        "main": ["name", "endpoint", "security_policy", "security_mode", "username",
                 "password", "trust_on_first_use", "mode", "publishing_interval",
                 "poll_interval"],
        "columns": ["name", "node", "type", "unit", "deadband", "writable"],
        "list": ["endpoint"],
        "labels": {"trust_on_first_use": "trust the server's certificate at first use",
                   "publishing_interval": "publishing interval (subscription)",
                   "poll_interval": "poll every (mode poll)"},
        "units": {"sampling_interval": "s"},
        "placeholders": {"endpoint": "opc.tcp://plc:4840"},
        "secret": ["password"]}})

    name: Name
    enabled: bool = Field(default=True, description="false: kept in the file, not connected")
    endpoint: Annotated[str, Field(pattern=r"^opc\.tcp://[^/:\s]+(:\d+)?(/\S*)?$")] = Field(
        description="opc.tcp://host:port/path")
    security_policy: SecurityPolicy = "None"
    security_mode: SecurityMode = "None"
    username: str | None = None
    password: str | None = None
    user_certificate: Path | None = Field(default=None,
                                          description="X.509 user identity (PEM or DER)")
    user_key: Path | None = None
    trusted_certificates: list[Path] = Field(
        default_factory=list, description="server certificates trusted explicitly")
    trust_on_first_use: bool = Field(
        default=False, description="pin the server's certificate at the first connection")
    mode: Literal["subscription", "poll"] = "subscription"
    publishing_interval: Seconds = Field(default=0.5, description="subscription, seconds")
    sampling_interval: Annotated[float, Field(ge=0)] = Field(
        default=0.25, description="monitored items, seconds (0: the server's fastest)")
    queue_size: Annotated[int, Field(ge=1, le=1000)] = 1
    poll_interval: Seconds = Field(default=1.0, description="mode poll, seconds")
    session_timeout: Seconds = 60.0
    request_timeout: Seconds = 4.0
    keepalive: Seconds = Field(default=2.0, description="seconds between connection checks")
    reconnect_initial: Seconds = 1.0
    reconnect_max: Seconds = 30.0
    report: Literal["poll", "change"] = "change"
    heartbeat: Seconds | None = Field(default=60.0, description="on change: publish at least "
                                      "this often anyway")
    description: str | None = None
    points: list[OpcUaPointConfig] = Field(default_factory=list)

    @model_validator(mode="after")
    def _security(self) -> OpcUaDeviceConfig:
        problems = check_unique([p.name for p in self.points], "points", "point name")
        if (self.security_policy == "None") != (self.security_mode == "None"):
            problems.append("security_policy None goes with security_mode None, and only with "
                            "it (Sign or SignAndEncrypt need a policy such as Basic256Sha256)")
        if (self.username is None) != (self.password is None):
            problems.append("username and password go together")
        if (self.user_certificate is None) != (self.user_key is None):
            problems.append("user_certificate and user_key go together")
        if self.username is not None and self.user_certificate is not None:
            problems.append("one user identity: username/password or user_certificate")
        if self.user_certificate is not None and self.security_policy == "None":
            problems.append("an X.509 user identity needs a security_policy (the user token "
                            "is signed)")
        if self.reconnect_initial > self.reconnect_max:
            problems.append("reconnect_initial is greater than reconnect_max")
        if problems:
            raise ValueError("; ".join(problems))
        return self

    def describe(self) -> DeviceDescription:
        """The device's points, family-neutral."""
        return DeviceDescription(self.description or f"OPC UA server {self.endpoint}",
                                 tuple(point.info() for point in self.points))
