"""Configuration models of serial line devices (`[[bridge.serial]]`).

A serial line device is read, not polled: bytes are cut into frames (a delimiter, a fixed
length, or start/end markers), each frame is parsed (regex with named groups, a struct format,
or NMEA 0183 with its checksum) and the configured fields are published like Modbus points.
Commands are templates written to the port (`"RATE {value}\\r\\n"`); an optional `poll` string
is written every `poll_interval` for devices that answer queries.

Pure: pydantic only (plus `re`/`struct` to check patterns and formats at load time).
"""

from __future__ import annotations

import re
import struct
from typing import Annotated, Literal

from pydantic import ConfigDict, Field, field_validator, model_validator

from bridge.driver import DeviceDescription, PointInfo
from bridge.point import Name, ReportFields, Seconds, check_name, check_unique
from bridge.serial.parse import NMEA_FIELD
from gateway.base.settings import Section


def _to_bytes(value: str) -> bytes:
    try:
        return value.encode("latin-1")
    except UnicodeEncodeError:
        raise ValueError("only characters U+0000 to U+00FF (write bytes as \\u00XX)") from None


class SerialPointConfig(ReportFields):
    """One value taken from each parsed frame."""

    model_config = ConfigDict(json_schema_extra={"x-ui": {"where": ["field"]}})

    name: Name
    field: str = Field(description="regex group, struct field name, or NMEA 'GGA.9'")
    type: Literal["float", "int", "string", "bool", "coordinate"] = "float"
    scale: float = 1.0
    offset: float = 0.0
    precision: Annotated[int, Field(ge=0, le=12)] | None = None
    min: float | None = None
    max: float | None = None


class SerialDeviceConfig(Section):
    """A device on its own serial port that sends lines or frames."""

    # How the console shows it (outpost/console/forms.py reads these hints from the schema).
    model_config = ConfigDict(json_schema_extra={"x-ui": {
        "main": ["name", "device", "baudrate", "parity", "delimiter", "parser", "pattern"],
        "columns": ["name", "field", "type", "unit", "deadband"],
        "list": ["device"],
        "labels": {"device": "serial port", "baudrate": "baud rate", "delimiter": "line end",
                   "pattern": "regex (one named group per point)"},
        "choices": {"parity": {"N": "none", "E": "even", "O": "odd"}},
        "placeholders": {"device": "/dev/ttyUSB1", "pattern": r"T=(?P<temperature>[-\d.]+)"},
        "initial": {"delimiter": "\r\n"},
        "escaped": ["delimiter", "start", "end", "poll"]}})

    name: Name
    enabled: bool = Field(default=True, description="false: kept in the file, not opened")
    device: str = Field(description="serial port, e.g. /dev/ttyUSB1")
    baudrate: Annotated[int, Field(gt=0)] = 9600
    bytesize: Literal[7, 8] = 8
    parity: Literal["N", "E", "O"] = "N"
    stopbits: Literal[1, 2] = 1
    framing: Literal["line", "fixed", "markers"] = "line"
    delimiter: str = "\n"
    length: Annotated[int, Field(ge=1, le=65536)] | None = None
    start: str | None = None
    end: str | None = None
    max_frame: Annotated[int, Field(ge=1, le=65536)] = 1024
    encoding: Literal["ascii", "utf-8", "latin-1"] = "ascii"
    parser: Literal["regex", "struct", "nmea"] = "regex"
    pattern: str | None = None
    struct: str | None = Field(default=None, description="struct format, e.g. '<hHf'")
    fields: list[str] = Field(default_factory=list, description="names of the struct items")
    points: list[SerialPointConfig] = Field(default_factory=list)
    commands: dict[str, str] = Field(default_factory=dict,
                                     description="command name -> template with {value}")
    poll: str | None = Field(default=None, description="written every poll_interval")
    poll_interval: Seconds = 1.0
    silence_timeout: Seconds | None = Field(
        default=None, description="offline when no valid frame arrived for this long")
    reopen_initial: Seconds = 0.5
    reopen_max: Seconds = 30.0
    report: Literal["poll", "change"] = "change"
    heartbeat: Seconds | None = 60.0

    @field_validator("delimiter", "start", "end", "poll")
    @classmethod
    def _byte_string(cls, value: str | None) -> str | None:
        if value is not None:
            _to_bytes(value)
        return value

    @field_validator("commands")
    @classmethod
    def _commands(cls, commands: dict[str, str]) -> dict[str, str]:
        for name, template in commands.items():
            check_name(name)
            try:
                template.format(value="")
            except (KeyError, IndexError, ValueError) as exc:
                raise ValueError(f"{name}: template may only use {{value}} ({exc})") from None
        return commands

    @model_validator(mode="after")
    def _framing_and_parser(self) -> SerialDeviceConfig:
        problems = check_unique([p.name for p in self.points], "points", "point name")
        problems += [f"commands.{c}: also a point name" for c in self.commands
                     if c in {p.name for p in self.points}]
        if self.framing == "line" and not self.delimiter:
            problems.append("framing 'line' needs a non-empty delimiter")
        if self.framing == "fixed" and self.length is None:
            problems.append("framing 'fixed' needs length")
        if self.framing == "markers" and not (self.start and self.end):
            problems.append("framing 'markers' needs start and end")
        fields: set[str] = set()
        if self.parser == "regex":
            try:
                fields = set(re.compile(self.pattern or "").groupindex)
            except re.error as exc:
                problems.append(f"pattern: {exc}")
            if not self.pattern:
                problems.append("parser 'regex' needs pattern (with named groups)")
        elif self.parser == "struct":
            try:
                size = struct.calcsize(self.struct or "")
                items = len(struct.unpack(self.struct or "", bytes(size)))
            except struct.error as exc:
                problems.append(f"struct: {exc}")
            else:
                if not self.struct:
                    problems.append("parser 'struct' needs struct (a format like '<hHf')")
                if items != len(self.fields):
                    problems.append(f"struct {self.struct!r} has {items} items but fields "
                                    f"names {len(self.fields)}")
                if self.framing == "fixed" and self.length is not None and self.length != size:
                    problems.append(f"length {self.length} differs from struct size {size}")
            fields = set(self.fields)
        for i, point in enumerate(self.points):
            if self.parser == "nmea":
                if not NMEA_FIELD.match(point.field):
                    problems.append(f"points.{i} {point.name!r}: NMEA field must look like "
                                    f"'GGA.9' (sentence type, 1-based field number)")
                    continue
            elif point.field not in fields:
                problems.append(f"points.{i} {point.name!r}: field {point.field!r} is not "
                                f"produced by the parser (fields: {sorted(fields)})")
            if point.type == "coordinate" and self.parser != "nmea":
                problems.append(f"points.{i} {point.name!r}: type coordinate needs parser nmea")
        if problems:
            raise ValueError("; ".join(problems))
        return self

    def describe(self) -> DeviceDescription:
        """The device's points, family-neutral (read-only: commands are not point values)."""
        types = {"float": "float64", "coordinate": "float64", "int": "int64",
                 "string": "string", "bool": "bool"}
        return DeviceDescription(f"serial device on {self.device}",
                                 tuple(PointInfo(p.name, types[p.type], p.unit)
                                       for p in self.points))

    def framing_bytes(self) -> tuple[bytes, bytes, bytes]:
        """(delimiter, start, end) as bytes."""
        return (_to_bytes(self.delimiter), _to_bytes(self.start or ""),
                _to_bytes(self.end or ""))
