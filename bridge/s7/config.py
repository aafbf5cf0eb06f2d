"""Configuration models of S7 devices (`[[bridge.s7]]`): a PLC, how to reach it, its points.

A device is one S7 CPU reached over ISO-on-TCP (port 102): by `rack` and `slot` (S7-300: 0/2,
S7-400: as configured, S7-1200/1500: 0/1) or by a remote `tsap` (LOGO!, S7-200, CPs). Its
points are addresses in TIA Portal notation (`DB10.DBD4`, `DB10.DBX2.3`, `M0.1`, `IW64`,
bridge/s7/address.py) with an S7 data type (bridge/s7/values.py); each is checked to fit its
address (a REAL needs a double word: `DBD`, a BOOL a bit: `DBX2.3`). The device polls every
`poll_interval` with the reads its plan needs (bridge/s7/plan.py).

Pure: pydantic only.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import ConfigDict, Field, field_validator, model_validator

from bridge.driver import DeviceDescription, PointInfo
from bridge.point import Name, ReportFields, Seconds, check_unique
from bridge.s7 import values
from bridge.s7.address import WIDTH_BYTES, Address, parse_address
from bridge.s7.plan import MAX_PDU, MIN_PDU
from gateway.base.settings import Section

TypeName = Literal["BOOL", "BYTE", "USINT", "SINT", "CHAR", "WORD", "UINT", "INT", "DWORD",
                   "UDINT", "DINT", "REAL", "LWORD", "ULINT", "LINT", "LREAL", "STRING",
                   "WSTRING", "DATE_AND_TIME", "DT", "DTL", "COUNTER", "TIMER"]
_TSAP = re.compile(r"^(0x)?([0-9a-fA-F]{2})\.?([0-9a-fA-F]{2})$")


def parse_tsap(text: str) -> int:
    """A TSAP as the tools write it: `03.01`, `0301` or `0x0301`."""
    match = _TSAP.match(text.strip())
    if not match:
        raise ValueError(f"{text!r} is not a TSAP (two bytes in hex, e.g. '03.01' or '0x0301')")
    return int(match[2] + match[3], 16)


class S7PointConfig(ReportFields):
    """One address of the PLC as a point."""

    model_config = ConfigDict(json_schema_extra={"x-ui": {"where": ["address"]}})

    name: Name
    address: str = Field(description="TIA Portal notation: DB10.DBD4, DB10.DBX2.3, M0.1, IW64")
    type: TypeName | None = Field(
        default=None, description="S7 data type; default: BOOL for a bit address, COUNTER "
        "for C<n>, TIMER for T<n> (required otherwise)")
    length: Annotated[int, Field(ge=1, le=254)] | None = Field(
        default=None, description="STRING[n] / WSTRING[n]: n as declared (default 254)")
    enum: dict[int, str] | None = Field(default=None,
                                        description="labels of an integer's values")
    writable: bool = False
    min: float | None = None
    max: float | None = None
    device_class: Annotated[str, Field(pattern=r"^[a-z0-9_]+$")] | None = None
    state_class: Literal["measurement", "total", "total_increasing"] | None = None

    @field_validator("address")
    @classmethod
    def _address(cls, text: str) -> str:
        return str(parse_address(text))

    @model_validator(mode="after")
    def _fits(self) -> S7PointConfig:
        where = self.where
        kind = self.kind
        problems = []
        expected = {"T": "TIMER", "C": "COUNTER"}.get(where.area)
        if expected is not None and kind != expected:
            problems.append(f"{where} is a {expected.lower()}: its type is {expected}")
        elif expected is None and kind in ("TIMER", "COUNTER"):
            problems.append(f"a {kind} is addressed T<n> or C<n>, not {where}")
        elif kind == "BOOL" and where.width != "X":
            problems.append(f"a BOOL needs a bit address (e.g. {where.block}"
                            f"{'.DBX' if where.area == 'DB' else ''}{where.start}.0), not "
                            f"{where}")
        elif kind != "BOOL" and where.width == "X" and (where.bit or kind in (
                "BYTE", "USINT", "SINT", "CHAR", "WORD", "UINT", "INT", "DWORD", "UDINT",
                "DINT", "REAL")):
            problems.append(f"{where} is a bit: only a BOOL is addressed so (a {kind} takes "
                            f"a byte address)")
        elif expected is None and kind != "BOOL" and values.TYPES[kind].size <= 4 \
                and kind not in ("STRING", "WSTRING") \
                and WIDTH_BYTES[where.width] != values.TYPES[kind].size:
            letter = {1: "B", 2: "W", 4: "D"}[values.TYPES[kind].size]
            problems.append(f"a {kind} is {values.TYPES[kind].size} byte(s): address it as "
                            f"...{letter}{where.start} (not {where})")
        if self.length is not None and kind not in ("STRING", "WSTRING"):
            problems.append("length is for STRING and WSTRING")
        if self.enum is not None and kind not in values.INTEGERS:
            problems.append("enum needs an integer type")
        numeric = kind in values.INTEGERS or kind in values.FLOATS or kind == "TIMER"
        if (self.min is not None or self.max is not None) and not numeric:
            problems.append("min/max need a numeric type")
        if self.min is not None and self.max is not None and self.min > self.max:
            problems.append("min is greater than max")
        if problems:
            raise ValueError("; ".join(problems))
        return self

    @model_validator(mode="before")
    @classmethod
    def _default_type(cls, data: object) -> object:
        if isinstance(data, dict) and data.get("type") is None and isinstance(
                data.get("address"), str):
            try:
                where = parse_address(data["address"])
            except ValueError:
                return data  # the address's own error says it
            default = {"X": "BOOL", "T": "TIMER", "C": "COUNTER"}.get(where.width)
            if default is None:
                raise ValueError(f"type is required for {where} (e.g. INT, REAL, DWORD; "
                                 f"only a bit address, T<n> and C<n> have a default)")
            data = {**data, "type": default}
        return data

    @property
    def where(self) -> Address:
        """The parsed address."""
        return parse_address(self.address)

    @property
    def kind(self) -> str:
        """The type's canonical name (DT is DATE_AND_TIME)."""
        name = self.type or "BOOL"
        return values.ALIASES.get(name, name)

    @property
    def size(self) -> int:
        """Bytes the point takes from its address on."""
        return values.size_of(self.kind, self.length or 254)

    def info(self) -> PointInfo:
        """The point, family-neutral."""
        if self.enum is not None:
            return PointInfo(self.name, "string", self.unit, self.writable,
                             tuple(sorted(self.enum.values())))
        spec = values.TYPES[self.kind]
        low, high = spec.low, spec.high
        if self.kind == "TIMER":
            low, high = 0, int(values.MAX_TIMER_SECONDS)
        return PointInfo(self.name, spec.datatype, self.unit, self.writable, None,
                         self.min if self.min is not None else low,
                         self.max if self.max is not None else high,
                         self.kind in values.INTEGERS, self.device_class, self.state_class)


class S7DeviceConfig(Section):
    """One S7 PLC and the addresses read from it."""

    # How the console shows it (outpost/console/forms.py reads these hints from the schema).
    model_config = ConfigDict(json_schema_extra={"x-ui": {
        "main": ["name", "host", "port", "rack", "slot", "poll_interval"],
        "columns": ["name", "address", "type", "unit", "deadband", "writable"],
        "list": ["host"],
        "labels": {"host": "PLC address", "port": "TCP port"},
        "units": {"max_gap": "bytes", "pdu_size": "bytes"},
        "placeholders": {"host": "192.168.0.10"}}})

    name: Name
    enabled: bool = Field(default=True, description="false: kept in the file, not connected")
    host: Annotated[str, Field(min_length=1, pattern=r"^[^\s:/]+$")] = Field(
        description="the PLC's (or CP's) IP address or host name")
    port: Annotated[int, Field(ge=1, le=65535)] = 102
    rack: Annotated[int, Field(ge=0, le=7)] = 0
    slot: Annotated[int, Field(ge=0, le=31)] = Field(
        default=1, description="S7-1200/1500: 1; S7-300: 2; S7-400: as in the hardware config")
    tsap: str | None = Field(default=None, description="remote TSAP instead of rack/slot, "
                             "e.g. '02.00' (LOGO!) or '03.01'")
    local_tsap: str = Field(default="01.00", description="the bridge's own TSAP")
    connection_type: Literal["pg", "op", "basic"] = Field(
        default="pg", description="the connection resource the PLC gives (with rack/slot)")
    pdu_size: Annotated[int, Field(ge=MIN_PDU, le=MAX_PDU)] = Field(
        default=480, description="PDU size asked for; the PLC may give less (S7-300: 240, "
        "S7-1200: 240, S7-1500: 960)")
    max_gap: Annotated[int, Field(ge=0, le=256)] = Field(
        default=16, description="bytes between two points still read in one piece")
    poll_interval: Seconds = 1.0
    timeout: Seconds = Field(default=2.0, description="seconds to wait for an answer")
    reconnect_initial: Seconds = 1.0
    reconnect_max: Seconds = 30.0
    timezone: str = Field(default="UTC", description="the PLC clock's time zone (DT, DTL)")
    report: Literal["poll", "change"] = "change"
    heartbeat: Seconds | None = Field(default=60.0, description="on change: publish at least "
                                      "this often anyway")
    description: str | None = None
    points: list[S7PointConfig] = Field(default_factory=list)

    @field_validator("tsap", "local_tsap")
    @classmethod
    def _tsap(cls, text: str | None) -> str | None:
        if text is not None:
            parse_tsap(text)
        return text

    @field_validator("timezone")
    @classmethod
    def _zone(cls, text: str) -> str:
        try:
            ZoneInfo(text)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"{text!r} is not a time zone (e.g. 'UTC', 'Europe/Berlin')") \
                from None
        return text

    @model_validator(mode="after")
    def _consistent(self) -> S7DeviceConfig:
        problems = check_unique([p.name for p in self.points], "points", "point name")
        if self.reconnect_initial > self.reconnect_max:
            problems.append("reconnect_initial is greater than reconnect_max")
        if self.tsap is not None and ("rack" in self.model_fields_set
                                      or "slot" in self.model_fields_set):
            problems.append("tsap replaces rack and slot: give one or the other")
        if problems:
            raise ValueError("; ".join(problems))
        return self

    @property
    def zone(self) -> ZoneInfo:
        """The PLC clock's time zone."""
        return ZoneInfo(self.timezone)

    def remote_tsap(self) -> int:
        """The TSAP the bridge connects to: `tsap`, or made from the connection type, rack
        and slot as the PLC expects it."""
        if self.tsap is not None:
            return parse_tsap(self.tsap)
        kind = {"pg": 1, "op": 2, "basic": 3}[self.connection_type]
        return kind << 8 | self.rack << 5 | self.slot

    def describe(self) -> DeviceDescription:
        """The device's points, family-neutral."""
        return DeviceDescription(self.description or f"Siemens S7 PLC {self.host}",
                                 tuple(point.info() for point in self.points))
