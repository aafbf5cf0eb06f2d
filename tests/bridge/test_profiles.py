"""The shipped device profiles: each one loaded into the pymodbus simulator (as its device would
hold the values) and read back through `outpost run` to an MQTT client, with values and units.

The registers are encoded here with `struct` from the vendors' documented formats (float32
high word first, int32 low word first, tenths in int16 ...), independently of the bridge's
converter, so a wrong type, order, scale or address in a profile shows up as a wrong value.
"""

from __future__ import annotations

import logging
import struct
import tomllib
from collections.abc import Callable
from typing import Any

import pytest

from bench.bridge.simulator import Simulator
from bridge.modbus.config import PROFILE_DIR, profile_names
from tests.bridge.support import Watcher
from tests.support.broker_proc import BrokerProcess

logging.getLogger("pymodbus").setLevel(logging.CRITICAL)


def f32_abcd(value: float) -> list[int]:
    high, low = struct.unpack(">HH", struct.pack(">f", value))
    return [high, low]


def i32_cdab(value: int) -> list[int]:
    high, low = struct.unpack(">HH", struct.pack(">i", value))
    return [low, high]


def u32_abcd(value: int) -> list[int]:
    return list(struct.unpack(">HH", struct.pack(">I", value)))


def i16(value: int) -> list[int]:
    return [value & 0xFFFF]


def text(value: str, registers: int) -> list[int]:
    data = value.encode().ljust(2 * registers, b"\0")
    return list(struct.unpack(f">{registers}H", data))


# profile -> {point: (registers at the point's wire address, expected value, expected unit)}
Expected = dict[str, tuple[list[int], Any, str | None]]
EXPECTED: dict[str, Expected] = {
    "eastron-sdm630": {
        "voltage_l1": (f32_abcd(230.1), 230.1, "V"),
        "voltage_l3": (f32_abcd(229.4), 229.4, "V"),
        "current_l2": (f32_abcd(4.125), 4.125, "A"),
        "power": (f32_abcd(2845.5), 2845.5, "W"),
        "power_factor": (f32_abcd(0.985), 0.985, None),
        "frequency": (f32_abcd(49.98), 49.98, "Hz"),
        "import_energy": (f32_abcd(12345.678), 12345.678, "kWh"),
        "voltage_l1_l2": (f32_abcd(398.7), 398.7, "V"),
        "total_energy": (f32_abcd(23456.5), 23456.5, "kWh"),
    },
    "eastron-sdm120": {
        "voltage": (f32_abcd(231.5), 231.5, "V"),
        "current": (f32_abcd(1.25), 1.25, "A"),
        "power": (f32_abcd(-289.5), -289.5, "W"),
        "frequency": (f32_abcd(50.01), 50.01, "Hz"),
        "export_energy": (f32_abcd(17.25), 17.25, "kWh"),
        "total_energy": (f32_abcd(1042.125), 1042.125, "kWh"),
    },
    "carlo-gavazzi-em24": {
        "voltage_l1": (i32_cdab(2301), 230.1, "V"),
        "current_l1": (i32_cdab(15250), 15.25, "A"),
        "power": (i32_cdab(-35012), -3501.2, "W"),
        "power_factor": (i16(-950), -0.95, None),
        "frequency": (i16(500), 50.0, "Hz"),
        "import_energy": (i32_cdab(1234567), 123456.7, "kWh"),
        "export_energy": (i32_cdab(89), 8.9, "kWh"),
    },
    "xy-md02": {
        "temperature": (i16(-57), -5.7, "°C"),
        "humidity": (i16(634), 63.4, "%RH"),
    },
    "sunspec-common": {
        "sunspec_marker": (u32_abcd(0x53756E53), 0x53756E53, None),
        "model_id": (i16(1), 1, None),
        "model_length": (i16(65), 65, None),
        "manufacturer": (text("Outpost Solar", 16), "Outpost Solar", None),
        "serial_number": (text("SN-0042", 16), "SN-0042", None),
    },
    "sunspec-meter": {
        "model_id": (i16(203), 203, None),
        "model_length": (i16(105), 105, None),
        "current": (i16(1234), 1234, None),
        "current_sf": (i16(-2), -2, None),
        "power": (i16(-4120), -4120, None),
        "power_sf": (i16(0), 0, None),
        "voltage_l2": (i16(0x8000), None, None),  # SunSpec "not implemented"
        "import_energy": (u32_abcd(98765432), 98765432, None),
        "energy_sf": (i16(1), 1, None),
    },
}


def load_profile(name: str) -> dict[str, Any]:
    return tomllib.loads((PROFILE_DIR / f"{name}.toml").read_text(encoding="utf-8"))


def test_every_profile_is_tested_and_names_its_source() -> None:
    assert sorted(EXPECTED) == profile_names()
    for name in profile_names():
        header = (PROFILE_DIR / f"{name}.toml").read_text(encoding="utf-8").split("\n\n")[0]
        assert "Source:" in header, f"{name}: no source of the register table"


def test_profiles_read_back_end_to_end(
    broker_factory: Callable[..., BrokerProcess]
) -> None:
    names = profile_names()
    # SunSpec maps sit at 40000: only their simulator holds tables that large (quick to start).
    big = [name for name in names if name.startswith("sunspec")]
    small = [name for name in names if name not in big]
    sims = {"big": Simulator(range(1, len(big) + 1), "tcp", size=40200),
            "small": Simulator(range(1, len(small) + 1), "tcp", size=400)}
    ports = {bus: sim.start() for bus, sim in sims.items()}
    try:
        devices = []
        for bus, group in (("big", big), ("small", small)):
            for unit, name in enumerate(group, start=1):
                profile = load_profile(name)
                base = profile["address_base"]
                points = {p["name"]: p for p in profile["points"]}
                for point, (registers, _, _) in EXPECTED[name].items():
                    spec = points[point]
                    sims[bus].set_registers(unit, spec.get("table", "holding"),
                                            spec["address"] - base, registers)
                devices.append(f'[[bridge.devices]]\nname = "{name}"\nbus = "{bus}"\n'
                               f'unit_id = {unit}\nmap = "profile:{name}"\n'
                               f'poll_interval = 0.2\ngroups = {{ energy = 0.2 }}\n')
        config = "".join(f'[[bridge.buses]]\nname = "{bus}"\ntype = "tcp"\n'
                         f'host = "127.0.0.1"\nport = {port}\n\n'
                         for bus, port in ports.items()) + "\n".join(devices)
        with Watcher(broker_factory(config)) as mqtt:
            for name in names:
                assert mqtt.wait(f"devices/{name}/status", lambda s: s == "online")
                units = {p["name"]: p.get("unit") for p in load_profile(name)["points"]}
                for point, (_, value, unit) in EXPECTED[name].items():
                    got = mqtt.wait(f"devices/{name}/{point}")
                    if isinstance(value, float):
                        assert got["value"] == pytest.approx(value, abs=1e-3), (name, point)
                    else:
                        assert got["value"] == value, (name, point, got)
                    assert got["unit"] == unit == units[point], (name, point)
                    assert got["quality"] == ("bad" if value is None else "good"), (name, point)
                for point, unit in units.items():  # every point of the profile answers
                    got = mqtt.wait(f"devices/{name}/{point}")
                    assert got["unit"] == unit, (name, point)
            # A client that subscribes now, with every value stable, gets them at once.
            with Watcher(mqtt.broker) as late:
                got = late.wait("devices/eastron-sdm630/voltage_l1")
                assert got["value"] == pytest.approx(230.1)
                assert next(m.retain for m in late.messages
                            if m.topic == "devices/eastron-sdm630/voltage_l1") is True
    finally:
        for sim in sims.values():
            sim.stop()
