"""The `[bridge]` section of outpost.toml: where values go, and the buses and devices it polls.

How this works: `BridgeConfig` aggregates the models of each device family (Modbus buses and
devices from bridge/modbus/config.py, serial line devices from bridge/serial/config.py, OPC UA
servers from bridge/opcua/config.py, S7 PLCs from bridge/s7/config.py, BACnet/IP devices from
bridge/bacnet/config.py, Logix controllers from bridge/enip/config.py) and holds the checks
that involve several of them (duplicate names, devices on unknown buses, unit ids used twice
on a bus, one RTU-over-TCP converter behind two buses, a name used by two families, a port used
by two kinds).
Those are field validators on the list that holds the entries, so their path names the list and
the message names the entries (`devices.2 'meter-3': unknown bus 'rs485-2'`).

Pure: pydantic; no I/O apart from the device maps the Modbus models read.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    Field,
    ModelWrapValidatorHandler,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from bridge.bacnet.config import BacnetDeviceConfig
from bridge.driver import DeviceSettings
from bridge.enip.config import EnipDeviceConfig
from bridge.modbus.config import BusConfig, DeviceConfig
from bridge.opcua.config import OpcUaDeviceConfig
from bridge.point import check_unique
from bridge.s7.config import S7DeviceConfig
from bridge.serial.config import SerialDeviceConfig
from gateway.base.settings import Section

Prefix = Annotated[str, Field(pattern=r"^[^/+#$\s][^+#\s]*[^/+#\s]$|^[^/+#$\s]$")]


def _shared_converters(buses: list[BusConfig]) -> list[str]:
    """An RTU-over-TCP converter is one serial line: it must be one bus (one lock).

    Modbus TCP endpoints may be shared (a TCP gateway takes several connections and the MBAP
    transaction id keeps their answers apart); an endpoint that is `rtu-over-tcp` for any bus
    may not: two buses would each take their own lock and interleave requests on one RS-485
    line.
    """
    problems = []
    seen: dict[tuple[str, int], int] = {}
    for i, bus in enumerate(buses):
        if bus.type == "rtu" or not bus.host:
            continue
        endpoint = (bus.host.lower().rstrip("."), bus.port)
        first = seen.setdefault(endpoint, i)
        if first != i and "rtu-over-tcp" in (bus.type, buses[first].type):
            problems.append(f"buses.{i} {bus.name!r}: {bus.host}:{bus.port} is already used "
                            f"by buses.{first} {buses[first].name!r}; an RTU-over-TCP "
                            f"converter is one serial line: put its devices on one bus")
    return problems


def _unknown_buses(data: dict[str, Any]) -> list[str]:
    """`devices.N 'name': unknown bus` for the raw entries of a `[bridge]` table."""
    buses, devices = data.get("buses"), data.get("devices")
    if not isinstance(buses, list):
        buses = []
    if not isinstance(devices, list):
        return []
    names = sorted({b["name"] for b in buses if isinstance(b, dict)
                    and isinstance(b.get("name"), str)})
    return [f"devices.{i} {d.get('name')!r}: unknown bus {d['bus']!r} "
            f"(buses: {', '.join(names) or 'none'})"
            for i, d in enumerate(devices)
            if isinstance(d, dict) and isinstance(d.get("bus"), str) and d["bus"] not in names]


class BridgeConfig(Section):
    """The device bridge: where values are published and which devices are polled."""

    prefix: Prefix = Field(default="devices", description="topics are <prefix>/<device>/<point>")
    qos: Literal[0, 1] = Field(default=0, description="QoS of point values")
    retain: bool = Field(
        default=True, description="retain point values, so a client that subscribes later gets "
        "the latest value of every point at once instead of waiting for a change or heartbeat")
    diagnostics_interval: Annotated[float, Field(ge=0)] = Field(
        default=10.0, description="seconds between diagnostics; 0 disables them")
    buses: list[BusConfig] = Field(default_factory=list)
    devices: list[DeviceConfig] = Field(default_factory=list)
    serial: list[SerialDeviceConfig] = Field(default_factory=list)
    opcua: list[OpcUaDeviceConfig] = Field(default_factory=list)
    s7: list[S7DeviceConfig] = Field(default_factory=list)
    bacnet: list[BacnetDeviceConfig] = Field(default_factory=list)
    enip: list[EnipDeviceConfig] = Field(default_factory=list)

    @model_validator(mode="wrap")
    @classmethod
    def _every_error_at_once(cls, data: Any, handler: ModelWrapValidatorHandler[BridgeConfig],
                             ) -> BridgeConfig:
        """Reference errors (a device on an unknown bus) come with the field errors.

        The reference check below runs only once every device is valid; when some are not,
        the references are checked here on the raw entries, so one `check-config` run lists
        every problem.
        """
        try:
            return handler(data)
        except ValidationError as exc:
            errors: list[Any] = exc.errors()
            if any("unknown bus" in err["msg"] for err in errors) or not isinstance(data, dict):
                raise
            extra: list[Any] = [
                {"type": "value_error", "loc": ("devices",), "input": data.get("devices"),
                 "ctx": {"error": ValueError(problem)}}
                for problem in _unknown_buses(data)]
            if not extra:
                raise
            raise ValidationError.from_exception_data(exc.title, [*errors, *extra]) from None

    @field_validator("buses")
    @classmethod
    def _bus_names(cls, buses: list[BusConfig]) -> list[BusConfig]:
        problems = check_unique([b.name for b in buses], "buses", "bus name")
        problems += check_unique([b.device for b in buses if b.device], "buses", "serial port")
        problems += _shared_converters(buses)
        if problems:
            raise ValueError("; ".join(problems))
        return buses

    @field_validator("devices")
    @classmethod
    def _device_buses(cls, devices: list[DeviceConfig], info: ValidationInfo,
                      ) -> list[DeviceConfig]:
        buses = {b.name: b for b in info.data.get("buses", [])}
        problems = check_unique([d.name for d in devices], "devices", "device name")
        units: dict[tuple[str, int], int] = {}
        for i, device in enumerate(devices):
            if device.bus not in buses:
                problems.append(f"devices.{i} {device.name!r}: unknown bus {device.bus!r} "
                                f"(buses: {', '.join(sorted(buses)) or 'none'})")
                continue
            if buses[device.bus].type != "tcp" and not 1 <= device.unit_id <= 247:
                problems.append(f"devices.{i} {device.name!r}: unit_id must be 1-247 on a "
                                f"serial line")
            if (device.bus, device.unit_id) in units:
                problems.append(f"devices.{i} {device.name!r}: unit_id {device.unit_id} is "
                                f"already devices.{units[device.bus, device.unit_id]} on bus "
                                f"{device.bus!r}")
            units[device.bus, device.unit_id] = i
        if problems:
            raise ValueError("; ".join(problems))
        return devices

    @model_validator(mode="after")
    def _names_across_kinds(self) -> BridgeConfig:
        modbus = {d.name for d in self.devices}
        ports = {b.device: f"buses.{i}" for i, b in enumerate(self.buses) if b.device}
        problems = []
        for i, device in enumerate(self.serial):
            if device.name in modbus:
                problems.append(f"serial.{i}: device name {device.name!r} is also a Modbus "
                                f"device")
            if device.device in ports:
                problems.append(f"serial.{i}: port {device.device} is already used by "
                                f"{ports[device.device]}")
            ports[device.device] = f"serial.{i}"
        # every later family's names against those of the families before it
        taken = {name: "a Modbus" for name in modbus} | {d.name: "a serial" for d in self.serial}
        for key, label in (("opcua", "an OPC UA"), ("s7", "an S7"), ("bacnet", "a BACnet"),
                           ("enip", "an EtherNet/IP")):
            devices: list[DeviceSettings] = getattr(self, key)
            problems += check_unique([d.name for d in devices], key, "device name")
            problems += [f"{key}.{i}: device name {d.name!r} is also {taken[d.name]} device"
                         for i, d in enumerate(devices) if d.name in taken]
            taken |= {d.name: label for d in devices if d.name not in taken}
        if problems:
            raise ValueError("; ".join(problems))
        return self

    def device_configs(self) -> list[DeviceSettings]:
        """Every device of every family, in family then configuration order."""
        return [*self.devices, *self.serial, *self.opcua, *self.s7, *self.enip, *self.bacnet]

    def bus(self, name: str) -> BusConfig:
        """The bus called `name`."""
        return next(b for b in self.buses if b.name == name)
