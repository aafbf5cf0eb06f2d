"""The Modbus part of the `[bridge]` section: buses (`[[bridge.buses]]`), devices and their points.

How this works: plain pydantic v2 models with `extra="forbid"`, so every mistake comes back from
`outpost check-config` with its key path (`bridge.devices.0.points.3.type: ...`). Checks that
involve several points of a device (overlaps, duplicate names, addresses in a manual's notation)
are field validators on the list that holds them, so their path names the list and the message
names the entries (`points.4 'current' overlaps points.3 'voltage'`). Checks across buses and
devices are in bridge/config.py, which aggregates these models into `BridgeConfig`.

A device's points may live in an included file (`map = "maps/sdm630.toml"`, relative to the
main config file) or in a profile shipped with outpost (`map = "profile:eastron-sdm630"`, the
files of `bridge/profiles/`): the file holds `points` and optional device defaults
(`address_base`, `byte_order`, `groups`, limits); the device's own keys win, its own points come
after the map's. A device point with the name of a map point is not a second point (which
would overlap it) but an override of that one: its keys replace the map point's, the rest is
kept, so `{ name = "import_energy", device_class = "energy" }` adds a Home Assistant class to a
profile's point without copying the profile. Errors inside a map name the file and the path
inside it.

The device key for the Modbus unit id is `unit_id`; the old spelling `unit` (which collided with
a point's engineering `unit`) is still read, with a warning naming the new key.

Pure: pydantic, tomllib and the bridge's pure converters; no I/O apart from reading map files.
"""

from __future__ import annotations

import difflib
import itertools
import logging
import tomllib
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from bridge.driver import DeviceDescription, PointInfo
from bridge.modbus.convert import (
    FLOAT_TYPES,
    INTEGER_TYPES,
    ORDERS_16,
    ORDERS_64,
    ConvertError,
    DataType,
    ValueSpec,
    check_order,
    register_count,
)
from bridge.modbus.plan import BIT_TABLES, MAX_BITS, MAX_REGISTERS, Read, Span, plan_reads
from bridge.point import Name, ReportFields, Seconds, check_unique
from gateway.base.settings import Section, format_errors

Table = Literal["coil", "discrete", "holding", "input"]
Order = Literal["ABCD", "BADC", "CDAB", "DCBA", "ABCDEFGH", "BADCFEHG", "GHEFCDAB", "HGFEDCBA",
                "AB", "BA"]
MAP_KEYS = {"address_base", "byte_order", "groups", "max_registers", "max_bits", "max_gap",
            "points", "description"}
PROFILE_PREFIX = "profile:"
PROFILE_DIR = Path(__file__).resolve().parent.parent / "profiles"
# The 5-digit / 6-digit manual notations: the leading digit names the table.
NOTATION_TABLE = {0: "coil", 1: "discrete", 3: "input", 4: "holding"}
log = logging.getLogger("outpost.config")
_INTEGER_RANGES = {"int16": (-(1 << 15), (1 << 15) - 1), "uint16": (0, (1 << 16) - 1),
                   "int32": (-(1 << 31), (1 << 31) - 1), "uint32": (0, (1 << 32) - 1),
                   "int64": (-(1 << 63), (1 << 63) - 1), "uint64": (0, (1 << 64) - 1)}
_FLOAT_RANGE = (-1e15, 1e15)  # what a float register may write, before scale and offset


class Rs485Config(Section):
    """Kernel RS-485 mode (TIOCSRS485) for UARTs that drive the transceiver's DE pin."""

    rts_level_for_tx: bool = True
    rts_level_for_rx: bool = False
    delay_before_tx: Annotated[float, Field(ge=0)] = 0.0
    delay_before_rx: Annotated[float, Field(ge=0)] = 0.0


class BusConfig(Section):
    """One Modbus line: a serial port (RTU) or a TCP connection (Modbus TCP, RTU over TCP)."""

    model_config = ConfigDict(json_schema_extra={"x-ui": {
        "main": ["name", "type", "host", "port", "device", "baudrate", "parity"],
        "labels": {"type": "type", "port": "TCP port", "device": "serial port",
                   "baudrate": "baud rate"},
        "choices": {"type": {"tcp": "Modbus TCP", "rtu-over-tcp": "RTU over TCP",
                             "rtu": "RTU (serial port)"},
                    "parity": {"N": "none", "E": "even", "O": "odd"}},
        "placeholders": {"device": "/dev/ttyUSB0"}, "initial": {"type": "tcp"}}})

    name: Name
    type: Literal["rtu", "tcp", "rtu-over-tcp"]
    device: str | None = Field(default=None, description="serial port, for type rtu")
    baudrate: Annotated[int, Field(gt=0)] = 9600
    bytesize: Literal[7, 8] = 8
    parity: Literal["N", "E", "O"] = "N"
    stopbits: Literal[1, 2] = 1
    rs485: Rs485Config | None = None
    local_echo: bool = Field(default=False, description="the adapter echoes what it sends")
    host: str | None = Field(default=None, description="for tcp and rtu-over-tcp")
    port: Annotated[int, Field(ge=1, le=65535)] = 502
    timeout: Seconds = Field(default=1.0, description="seconds to wait for a response")
    retries: Annotated[int, Field(ge=0, le=10)] = 1
    request_delay: Annotated[float, Field(ge=0)] = Field(
        default=0.0, description="seconds of silence between two transactions")
    quiet_after_timeout: Annotated[float, Field(ge=0)] = Field(
        default=0.2, description="after a timeout: wait this long, then discard what arrived")
    connect_timeout: Seconds = 3.0
    reconnect_max: Seconds = Field(default=30.0, description="longest reconnect backoff")

    @model_validator(mode="after")
    def _endpoint(self) -> BusConfig:
        if self.type == "rtu" and not self.device:
            raise ValueError("type 'rtu' needs device (the serial port, e.g. /dev/ttyUSB0)")
        if self.type != "rtu" and not self.host:
            raise ValueError(f"type {self.type!r} needs host")
        return self


class PointConfig(ReportFields):
    """One Modbus point: where it is, how to decode it, how to report it."""

    model_config = ConfigDict(json_schema_extra={"x-ui": {"where": ["table", "address"]}})

    name: Name
    table: Table = "holding"
    address: Annotated[int, Field(ge=0, description="in the device's address_base; a "
                                  "manual's 3xxxx/4xxxx notation without its leading digit")]
    type: DataType | None = Field(default=None, description="default: bool on bit tables, "
                                  "uint16 on register tables")
    count: Annotated[int, Field(ge=1)] | None = Field(default=None, description="string registers")
    bit: Annotated[int, Field(ge=0, le=15)] | None = None
    order: Order | None = Field(default=None, description="default: the device's byte_order")
    scale: float = 1.0
    offset: float = 0.0
    precision: Annotated[int, Field(ge=0, le=12)] | None = None
    min: float | None = None
    max: float | None = None
    nan: float | list[float] | None = Field(default=None, description="raw sentinel value(s)")
    enum: dict[int, str] | None = None
    encoding: Literal["ascii", "utf-8", "latin-1"] = "ascii"
    writable: bool = False
    readback: bool = True
    group: str = "default"
    device_class: Annotated[str, Field(pattern=r"^[a-z0-9_]+$")] | None = Field(
        default=None, description="Home Assistant device class, e.g. power")
    state_class: Literal["measurement", "total", "total_increasing"] | None = Field(
        default=None, description="Home Assistant state class")
    label: Annotated[str, Field(min_length=1, max_length=64)] | None = Field(
        default=None, description="the entity name Home Assistant shows; default: the name")

    @property
    def data_type(self) -> str:
        return self.type or ("bool" if self.table in BIT_TABLES else "uint16")

    @property
    def size(self) -> int:
        return register_count(self.data_type, self.count)

    def info(self) -> PointInfo:
        """The point, family-neutral: an enum is its labels, a scaled integer a float."""
        kind = self.data_type
        if self.enum is not None:
            return PointInfo(self.name, "string", self.unit, self.writable,
                             tuple(sorted(self.enum.values())), device_class=self.device_class,
                             state_class=self.state_class, label=self.label)
        if kind in ("bool", "bit", "string"):
            return PointInfo(self.name, "bool" if kind == "bit" else kind, self.unit,
                             self.writable, device_class=self.device_class,
                             state_class=self.state_class, label=self.label)
        scaled = self.scale != 1 or self.offset or self.precision is not None
        datatype = ("float32" if kind == "float32" else "float64") if scaled else kind
        low, high = _INTEGER_RANGES.get(kind, _FLOAT_RANGE)
        bounds = sorted((low * self.scale + self.offset, high * self.scale + self.offset))
        return PointInfo(self.name, datatype, self.unit, self.writable, None,
                         self.min if self.min is not None else bounds[0],
                         self.max if self.max is not None else bounds[1],
                         kind not in FLOAT_TYPES and self.scale == 1 and self.offset == 0,
                         self.device_class, self.state_class, self.label)

    @model_validator(mode="after")
    def _consistent(self) -> PointConfig:
        kind, problems = self.data_type, []
        if self.table in BIT_TABLES and kind != "bool":
            problems.append(f"a {self.table} is a single bit: type must be bool, not {kind}")
        if (kind == "bit") != (self.bit is not None):
            problems.append("bit (0-15) is required for type bit and only allowed there")
        if kind == "string" and self.count is None:
            problems.append("type string needs count (registers)")
        if kind != "string" and self.count is not None:
            problems.append(f"count is only for strings; {kind} always takes "
                            f"{register_count(kind)} register(s)")
        if self.size > MAX_REGISTERS:
            problems.append(f"{self.size} registers exceed the {MAX_REGISTERS}-register read limit")
        if self.writable and self.table in ("discrete", "input"):
            problems.append(f"writable: the {self.table} table is read-only (use coil or holding)")
        if self.order is not None:
            try:
                check_order(self.order, kind)
            except ConvertError as exc:
                problems.append(str(exc))
        numeric = kind in INTEGER_TYPES or kind in FLOAT_TYPES
        if self.enum is not None and kind not in INTEGER_TYPES:
            problems.append("enum needs an integer type")
        if (self.nan is not None or self.min is not None or self.max is not None) and not numeric:
            problems.append("nan/min/max need a numeric type")
        if self.scale == 0:
            problems.append("scale must not be 0")
        if self.min is not None and self.max is not None and self.min > self.max:
            problems.append("min is greater than max")
        if problems:
            raise ValueError("; ".join(problems))
        return self


class DeviceConfig(Section):
    """One Modbus device (a unit id on a bus) and its points."""

    # How the console shows it (outpost/console/forms.py reads these hints from the schema).
    model_config = ConfigDict(json_schema_extra={"x-ui": {
        "main": ["name", "map", "bus", "unit_id", "address_base", "poll_interval"],
        "columns": ["name", "table", "address", "type", "scale", "unit", "deadband",
                    "writable"],
        "list": ["bus", "unit_id"], "edit": ["unit_id", "poll_interval"],
        "labels": {"map": "profile", "unit_id": "unit id", "poll_interval": "poll every",
                   "address_base": "address base (empty: the profile's)"},
        "units": {"poll_interval": "s"},
        "initial": {"unit_id": 1, "poll_interval": 1},
        "profile": {"field": "map", "prefix": PROFILE_PREFIX},
        "shared": {"field": "bus", "section": "buses"}}})

    name: Name
    enabled: bool = Field(default=True, description="false: kept in the file, not polled")
    bus: str
    unit_id: Annotated[int, Field(ge=0, le=255)] = Field(description="the Modbus unit id")
    address_base: Literal[0, 1] = Field(description="1 when the manual counts registers from 1")
    byte_order: Order = "ABCD"
    poll_interval: Annotated[float, Field(ge=0)] = 1.0
    groups: dict[str, Annotated[float, Field(ge=0)]] = Field(
        default_factory=dict, description="poll group name -> interval in seconds")
    offline_after: Annotated[int, Field(ge=1)] = 3
    backoff_initial: Seconds = 1.0
    backoff_max: Seconds = 60.0
    max_registers: Annotated[int, Field(ge=1, le=MAX_REGISTERS)] = MAX_REGISTERS
    max_bits: Annotated[int, Field(ge=1, le=MAX_BITS)] = MAX_BITS
    max_gap: Annotated[int, Field(ge=0, le=MAX_REGISTERS)] = 10
    single_register_write: Literal["fc6", "fc16"] = "fc6"
    report: Literal["poll", "change"] = Field(
        default="change", description="default of the points: on change (plus heartbeat) or "
        "every poll")
    heartbeat: Seconds | None = Field(
        default=60.0, description="on change: publish at least this often anyway")
    map: str | None = Field(default=None, description="included file with more points")
    description: str | None = None
    points: list[PointConfig] = Field(default_factory=list)

    @model_validator(mode="before")
    @classmethod
    def _include_map(cls, data: Any, info: ValidationInfo) -> Any:
        if isinstance(data, dict) and "unit" in data and "unit_id" not in data:
            log.warning("device %r: the key `unit` is now `unit_id` (the Modbus unit id); "
                        "`unit` is still read", data.get("name", "?"))
            data = {("unit_id" if key == "unit" else key): value for key, value in data.items()}
        if not isinstance(data, dict) or not isinstance(data.get("map"), str):
            return data
        base = (info.context or {}).get("base_dir") or Path.cwd()
        included = load_map(Path(base), data["map"])
        return {**included, **data, "points": merge_points(
            data["map"], included.get("points", []), data.get("points", []))}

    @field_validator("points")
    @classmethod
    def _points_fit(cls, points: list[PointConfig], info: ValidationInfo) -> list[PointConfig]:
        problems = check_unique([p.name for p in points], "points", "point name")
        base = info.data.get("address_base", 0)
        byte_order = info.data.get("byte_order", "ABCD")
        groups = set(info.data.get("groups", {})) | {"default"}
        for i, point in enumerate(points):
            notation = _notation_problem(point, base)
            if notation:
                problems.append(f"points.{i} {point.name!r}: {notation}")
            elif point.address < base:
                problems.append(f"points.{i} {point.name!r}: address {point.address} is below "
                                f"address_base {base}")
            elif point.address - base + point.size > 65536:
                problems.append(f"points.{i} {point.name!r}: runs past register 65535")
            if point.group not in groups:
                problems.append(f"points.{i} {point.name!r}: unknown group {point.group!r} "
                                f"(define it in groups)")
            if point.order is None and point.size > 1 and point.data_type != "string":
                try:
                    check_order(byte_order, point.data_type)
                except ConvertError:
                    problems.append(f"points.{i} {point.name!r}: device byte_order {byte_order} "
                                    f"does not fit {point.data_type}; set order")
        problems += _overlaps(points, base)
        if problems:
            raise ValueError("; ".join(problems))
        return points

    @model_validator(mode="after")
    def _limits(self) -> DeviceConfig:
        for i, point in enumerate(self.points):
            limit = self.max_bits if point.table in BIT_TABLES else self.max_registers
            if point.size > limit:
                raise ValueError(f"points.{i} {point.name!r}: {point.size} registers exceed "
                                 f"max_registers {limit}")
        return self

    def describe(self) -> DeviceDescription:
        """The device's points, family-neutral."""
        return DeviceDescription(self.description or f"Modbus unit {self.unit_id}",
                                 tuple(point.info() for point in self.points))

    def interval(self, group: str) -> float:
        """Seconds between two polls of a group."""
        return self.groups.get(group, self.poll_interval)

    def value_spec(self, point: PointConfig) -> ValueSpec:
        """The pure converter's view of a point."""
        order: str = point.order or self.byte_order
        if point.size == 1 and order not in ORDERS_16:
            order = "BA" if order in ("BADC", "DCBA", "BADCFEHG", "HGFEDCBA") else "AB"
        elif order in ORDERS_64 and point.size != 4:
            order = ORDERS_64[order]
        nan = point.nan if isinstance(point.nan, list) else [] if point.nan is None else [point.nan]
        return ValueSpec(
            point.data_type, order, point.count or 1, point.bit, point.scale, point.offset,
            point.precision, point.min, point.max, tuple(nan), point.enum, point.encoding)

    def span(self, point: PointConfig) -> Span:
        """The point's place on the wire (0-based address)."""
        return Span(point.name, point.table, point.address - self.address_base, point.size)

    def read_plan(self) -> dict[str, list[Read]]:
        """Poll group -> the reads one poll of that group makes."""
        groups: dict[str, list[Span]] = {}
        for point in self.points:
            groups.setdefault(point.group, []).append(self.span(point))
        return {group: plan_reads(spans, self.max_registers, self.max_bits, self.max_gap)
                for group, spans in groups.items()}


def _notation_problem(point: PointConfig, base: int) -> str | None:
    """Why an address written in a manual's 3xxxx/4xxxx (or 0xxxx/1xxxx) notation is wrong.

    Manuals write input register 73 as 30073 (or 300073) and holding register 1 as 40001: the
    first digit is the table, the rest counts from 1. With `address_base = 1` (the manual's
    counting) an address of 30001-39999 on the input table, 40001-49999 on holding or
    10001-19999 on discrete inputs is that notation copied whole: the wire address would be
    30000 higher than meant and the read would fail only at run time with exception 2 (coils'
    0xxxx notation cannot be told from a plain address).
    With `address_base = 0` such addresses are real (SunSpec devices start at 40000, SMA
    inverters use 30775 on the wire), so they pass. The 6-digit notation (300001) and anything
    else past 65535 cannot exist at all.
    """
    address = point.address
    if address > 65535 + base:
        return (f"address {address} cannot exist (a table has 65536 entries: 0-65535, or "
                f"1-65536 with address_base 1){_notation_hint(point, base)}")
    if (base == 1 and 10001 <= address <= 49999
            and NOTATION_TABLE.get(address // 10000) == point.table):
        return (f"address {address} looks like the manual's {address // 10000}xxxx notation "
                f"for {point.table} register {address % 10000}: write address = "
                f"{address % 10000} (with address_base 1)")
    return None


def _notation_hint(point: PointConfig, base: int) -> str:
    digit = point.address // 100000
    if NOTATION_TABLE.get(digit) == point.table:
        number = point.address % 100000
        return (f"; {point.address} looks like the 6-digit {digit}xxxxx notation for "
                f"{point.table} register {number}: write address = {number - 1 + base}")
    return ""


def _overlaps(points: list[PointConfig], base: int) -> list[str]:
    problems = []
    by_table: dict[str, list[tuple[int, int, int]]] = {}
    for i, point in enumerate(points):
        by_table.setdefault(point.table, []).append((point.address, point.address + point.size, i))
    for spans in by_table.values():
        spans.sort()
        for (start_a, end_a, a), (start_b, _end_b, b) in itertools.pairwise(spans):
            pa, pb = points[a], points[b]
            if start_b < end_a and not (pa.data_type == pb.data_type == "bit"
                                        and start_a == start_b and pa.bit != pb.bit):
                problems.append(f"points.{b} {pb.name!r} ({pb.table} {start_b}) overlaps "
                                f"points.{a} {pa.name!r} ({pa.table} {start_a}..{end_a - 1})")
    return problems


def merge_points(name: str, mapped: list[Any], own: Any) -> Any:
    """A map's points with the device's own: an own point named like a map point overrides
    that point's keys in place, the others come after the map's."""
    if not isinstance(own, list):
        return own  # not a list: the points validator says what is wrong with it
    points = [dict(point) for point in mapped]
    index = {point.get("name"): i for i, point in enumerate(points)}
    for number, point in enumerate(own):
        if isinstance(point, dict) and point.get("name") in index:
            target = points[index[point["name"]]]
            target.update(point)
        elif isinstance(point, dict) and "address" not in point and isinstance(
                point.get("name"), str):
            close = difflib.get_close_matches(point["name"], list(index), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ValueError(f"points.{number} {point['name']!r}: no address, and map {name} "
                             f"has no point of that name to override{hint}")
        else:
            points.append(point)
    return points


def profile_names() -> list[str]:
    """The device profiles shipped with outpost (`map = "profile:NAME"`)."""
    return sorted(path.stem for path in PROFILE_DIR.glob("*.toml"))


def map_path(base: Path, name: str) -> Path:
    """Where a device map is: a shipped profile (`profile:NAME`) or a file relative to `base`."""
    if not name.startswith(PROFILE_PREFIX):
        return base / name
    profile = name.removeprefix(PROFILE_PREFIX)
    names = profile_names()
    if profile not in names:
        close = difflib.get_close_matches(profile, names, n=1)
        hint = f"did you mean 'profile:{close[0]}'? " if close else ""
        raise ValueError(f"map {name}: no such profile; {hint}profiles: {', '.join(names)}")
    return PROFILE_DIR / f"{profile}.toml"


def load_map(base: Path, name: str) -> dict[str, Any]:
    """Read an included device map; problems are raised as one ValueError naming the file."""
    path = map_path(base, name)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ValueError(f"map {name}: cannot read {path}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"map {name}: not valid TOML: {exc}") from None
    unknown = sorted(set(data) - MAP_KEYS)
    if unknown:
        raise ValueError(f"map {name}: unknown keys {unknown} (allowed: {sorted(MAP_KEYS)})")
    try:
        _MapPoints.model_validate({"points": data.get("points", [])})
    except ValidationError as exc:
        raise ValueError(f"map {name}: " + "; ".join(format_errors(exc, _MapPoints))) from None
    return data


class _MapPoints(Section):
    points: list[PointConfig]
