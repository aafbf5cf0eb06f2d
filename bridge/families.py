"""The device families of the driver interface (bridge/driver.py), side by side.

How this works: each family's runtime side is a small class here; everything else a family
has lives in its own package (bridge/modbus/, bridge/serial/, bridge/opcua/: configuration
model, device, protocol). They sit here, above bridge/config.py, because a family reads its
part of the `[bridge]` model, which imports every family's configuration model.

- Modbus: one `ModbusBus` per `[[bridge.buses]]` entry (one lock per line, so devices on a
  bus never interleave requests) and a `DevicePoller` per `[[bridge.devices]]` entry on its
  bus. A device's `environment` is its bus's configuration: a reload that changes a bus
  restarts its devices, and `configure` closes the changed bus and opens it again; an
  unchanged bus keeps its connection.
- Serial: a `SerialLineDevice` per `[[bridge.serial]]` entry, nothing shared.
- OPC UA: an `OpcUaDevice` per `[[bridge.opcua]]` entry, each with its own sessions; the
  shared certificate store lives under the state directory (bridge/opcua/pki.py). asyncua
  takes seconds to import on a small board, so it is imported when the first OPC UA device
  is opened, not by every gateway that has none.
- S7: an `S7Device` per `[[bridge.s7]]` entry, each with its own connection, nothing shared.
  python-snap7 is imported when the first S7 device is opened.
- BACnet/IP: a `BacnetDevice` per `[[bridge.bacnet]]` entry, each with its own UDP socket
  (COV notifications come back to the address that subscribed), nothing shared. Its device
  module is imported when the first BACnet device is opened.
- EtherNet/IP: an `EnipDevice` per `[[bridge.enip]]` entry (a Logix controller), each with its
  own connection, nothing shared. pycomm3 is imported when the first such device is opened.

`registered` lists the families: the bridge runs them, and the console (bridge/catalog.py)
renders each one's forms from its configuration model and probes through its optional
`explore` (bridge/driver.py), so a family registered here needs no code anywhere else. A
family may say how people call its devices (`title`) and which `[bridge]` list holds them
(`section`, default: its `kind`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bridge.bacnet.config import BacnetDeviceConfig
from bridge.config import BridgeConfig
from bridge.driver import Device, DeviceContext, Exploration, Family
from bridge.enip.config import EnipDeviceConfig
from bridge.modbus import probe
from bridge.modbus.bus import ModbusBus
from bridge.modbus.config import BusConfig, DeviceConfig, profile_names
from bridge.modbus.poller import DevicePoller
from bridge.opcua.config import OpcUaDeviceConfig
from bridge.s7.config import S7DeviceConfig
from bridge.serial.config import SerialDeviceConfig
from bridge.serial.reader import SerialLineDevice


def registered(state_dir: Path | None) -> list[Family[Any, BridgeConfig]]:
    """Every device family, in the order the bridge starts them and the console lists them:
    a family registers here (and its device list in `BridgeConfig`), nowhere else."""
    return [ModbusFamily(), SerialFamily(), OpcUaFamily(state_dir), S7Family(), EnipFamily(),
            BacnetFamily()]


class ModbusFamily:
    """Modbus RTU / TCP devices on their buses."""

    kind = "modbus"
    section = "devices"  # [[bridge.devices]] (the other families' lists are named as they are)
    title = "Modbus device"

    def __init__(self) -> None:
        self.buses: dict[str, ModbusBus] = {}

    def configs(self, bridge: BridgeConfig) -> Sequence[DeviceConfig]:
        """`[[bridge.devices]]`."""
        return bridge.devices

    def environment(self, device: DeviceConfig, bridge: BridgeConfig) -> BusConfig | None:
        """The device's bus."""
        return next((bus for bus in bridge.buses if bus.name == device.bus), None)

    def configure(self, bridge: BridgeConfig) -> None:
        """Keep the unchanged buses, close the changed and removed ones, open the new ones."""
        kept = {b.name: self.buses[b.name] for b in bridge.buses
                if b.name in self.buses and self.buses[b.name].config == b}
        for name, bus in self.buses.items():
            if kept.get(name) is not bus:
                bus.channel.close()
        self.buses = {b.name: kept.get(b.name) or ModbusBus(b) for b in bridge.buses}

    def open(self, device: DeviceConfig, context: DeviceContext) -> DevicePoller:
        """A poller for the device on its bus."""
        return DevicePoller(device, self.buses[device.bus], context.prefix, context.publish,
                            context.status, context.wallclock)

    def close(self) -> None:
        """Close every bus."""
        for bus in self.buses.values():
            bus.channel.close()

    def profiles(self) -> list[str]:
        """The device profiles shipped with outpost (`map = "profile:NAME"`)."""
        return profile_names()

    async def explore(self, device: DeviceConfig, bridge: BridgeConfig) -> Exploration:
        """Every point read once: on the bridge's own bus when it runs this bus unchanged."""
        bus = bridge.bus(device.bus)
        running = self.buses.get(bus.name)
        return await probe.explore(device, bus, running if running and running.config == bus
                                   else None)


class SerialFamily:
    """Devices on their own serial port that send lines or frames."""

    kind = "serial"
    title = "serial line device"

    def configs(self, bridge: BridgeConfig) -> Sequence[SerialDeviceConfig]:
        """`[[bridge.serial]]`."""
        return bridge.serial

    def environment(self, device: SerialDeviceConfig, bridge: BridgeConfig) -> None:
        """Nothing beyond the device's own configuration."""

    def configure(self, bridge: BridgeConfig) -> None:
        """Nothing shared between serial devices."""

    def open(self, device: SerialDeviceConfig, context: DeviceContext) -> SerialLineDevice:
        """A reader of the device's port."""
        return SerialLineDevice(device, context.prefix, context.publish, context.status,
                                context.wallclock)

    def close(self) -> None:
        """Nothing shared to close (each reader closes its own port)."""


class OpcUaFamily:
    """OPC UA servers, each a device."""

    kind = "opcua"
    title = "OPC UA server"

    def __init__(self, state_dir: Path | None) -> None:
        self.state_dir = state_dir

    def configs(self, bridge: BridgeConfig) -> Sequence[OpcUaDeviceConfig]:
        """`[[bridge.opcua]]`."""
        return bridge.opcua

    def environment(self, device: OpcUaDeviceConfig, bridge: BridgeConfig) -> None:
        """Nothing beyond the device's own configuration."""

    def configure(self, bridge: BridgeConfig) -> None:
        """Nothing shared to open."""

    def open(self, device: OpcUaDeviceConfig, context: DeviceContext) -> Device:
        """A device that opens its own sessions."""
        from bridge.opcua.device import OpcUaDevice  # noqa: PLC0415 (optional, slow import)
        from bridge.opcua.pki import Pki  # noqa: PLC0415

        pki = Pki(self.state_dir / "opcua") if self.state_dir is not None else None
        return OpcUaDevice(device, context, pki)

    def close(self) -> None:
        """Nothing shared to close."""

    async def explore(self, device: OpcUaDeviceConfig, bridge: BridgeConfig) -> Exploration:
        """The endpoints, every point read once, and the variables the server has."""
        from bridge.opcua import tools  # noqa: PLC0415 (optional, slow import)
        from bridge.opcua.pki import Pki  # noqa: PLC0415

        pki = Pki(self.state_dir / "opcua") if self.state_dir is not None else None
        return await tools.explore(device, pki)


class S7Family:
    """Siemens S7 PLCs, each a device with its own connection."""

    kind = "s7"
    title = "Siemens S7 PLC"

    def configs(self, bridge: BridgeConfig) -> Sequence[S7DeviceConfig]:
        """`[[bridge.s7]]`."""
        return bridge.s7

    def environment(self, device: S7DeviceConfig, bridge: BridgeConfig) -> None:
        """Nothing beyond the device's own configuration."""

    def configure(self, bridge: BridgeConfig) -> None:
        """Nothing shared to open."""

    def open(self, device: S7DeviceConfig, context: DeviceContext) -> Device:
        """A device that opens its own connections."""
        from bridge.s7.device import S7Device  # noqa: PLC0415 (python-snap7: only when used)

        return S7Device(device, context)

    def close(self) -> None:
        """Nothing shared to close."""

    async def explore(self, device: S7DeviceConfig, bridge: BridgeConfig) -> Exploration:
        """The PDU size, the read plan, and every point read once with it."""
        from bridge.s7 import tools  # noqa: PLC0415 (python-snap7: only when used)

        return await tools.explore(device)


class EnipFamily:
    """Logix controllers over EtherNet/IP, each a device with its own connection."""

    kind = "enip"
    title = "Logix controller (EtherNet/IP)"

    def configs(self, bridge: BridgeConfig) -> Sequence[EnipDeviceConfig]:
        """`[[bridge.enip]]`."""
        return bridge.enip

    def environment(self, device: EnipDeviceConfig, bridge: BridgeConfig) -> None:
        """Nothing beyond the device's own configuration."""

    def configure(self, bridge: BridgeConfig) -> None:
        """Nothing shared to open."""

    def open(self, device: EnipDeviceConfig, context: DeviceContext) -> Device:
        """A device that opens its own connections."""
        from bridge.enip.device import EnipDevice  # noqa: PLC0415 (pycomm3: only when used)

        return EnipDevice(device, context)

    def close(self) -> None:
        """Nothing shared to close."""

    async def explore(self, device: EnipDeviceConfig, bridge: BridgeConfig) -> Exploration:
        """The connection size, the read plan, every point read once, the controller's tags."""
        from bridge.enip import tools  # noqa: PLC0415 (pycomm3: only when used)

        return await tools.explore(device)


class BacnetFamily:
    """BACnet/IP devices, each with its own UDP socket."""

    kind = "bacnet"
    title = "BACnet/IP device"

    def configs(self, bridge: BridgeConfig) -> Sequence[BacnetDeviceConfig]:
        """`[[bridge.bacnet]]`."""
        return bridge.bacnet

    def environment(self, device: BacnetDeviceConfig, bridge: BridgeConfig) -> None:
        """Nothing beyond the device's own configuration."""

    def configure(self, bridge: BridgeConfig) -> None:
        """Nothing shared to open."""

    def open(self, device: BacnetDeviceConfig, context: DeviceContext) -> Device:
        """A device with its own socket."""
        from bridge.bacnet.device import BacnetDevice  # noqa: PLC0415 (only when configured)

        return BacnetDevice(device, context)

    def close(self) -> None:
        """Nothing shared to close."""

    async def explore(self, device: BacnetDeviceConfig, bridge: BridgeConfig) -> Exploration:
        """The device's max APDU, the read plan, and every point read once with it."""
        from bridge.bacnet import tools  # noqa: PLC0415 (only when used)

        return await tools.explore(device)
