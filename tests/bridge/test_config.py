"""`[bridge]` configuration: every mistake comes back with its key path."""

from __future__ import annotations

from pathlib import Path

import pytest

from bridge.cli import format_plan
from gateway.base.settings import ConfigError
from outpost.config import load_config

EXAMPLE = """
[bridge]
prefix = "devices"

[[bridge.buses]]
name = "rs485"
type = "rtu"
device = "/dev/ttyUSB0"
baudrate = 9600
parity = "E"
timeout = 0.3

[[bridge.buses]]
name = "plc"
type = "tcp"
host = "192.168.1.10"

[[bridge.devices]]
name = "meter-1"
bus = "rs485"
unit_id = 1
address_base = 1
map = "maps/meter.toml"
groups = { energy = 60.0 }

[[bridge.devices.points]]
name = "energy"
table = "input"
address = 343
type = "float32"
unit = "kWh"
group = "energy"

[[bridge.devices]]
name = "plc-1"
bus = "plc"
unit_id = 1
address_base = 0
byte_order = "CDAB"
points = [
  { name = "run", table = "coil", address = 0, writable = true },
  { name = "speed", address = 10, type = "int32", scale = 0.1, unit = "rpm", writable = true },
  { name = "state", address = 12, enum = { 0 = "stopped", 1 = "running" } },
  { name = "alarm", address = 13, type = "bit", bit = 4 },
  { name = "serial_no", address = 20, type = "string", count = 8, report = "change" },
]

[[bridge.serial]]
name = "gps"
device = "/dev/ttyUSB1"
baudrate = 4800
delimiter = "\\r\\n"
parser = "nmea"
points = [
  { name = "lat", field = "GGA.2", type = "coordinate", unit = "deg" },
  { name = "satellites", field = "GGA.7", type = "int" },
]
"""

METER_MAP = """
address_base = 1
points = [
  { name = "voltage", table = "input", address = 1, type = "float32", unit = "V", deadband = 0.5 },
  { name = "current", table = "input", address = 7, type = "float32", unit = "A" },
  { name = "power", table = "input", address = 13, type = "float32", unit = "W" },
]
"""


def write(tmp_path: Path, text: str, meter_map: str = METER_MAP) -> Path:
    (tmp_path / "maps").mkdir(exist_ok=True)
    (tmp_path / "maps" / "meter.toml").write_text(meter_map)
    path = tmp_path / "outpost.toml"
    path.write_text(text)
    return path


def errors_of(tmp_path: Path, text: str, meter_map: str = METER_MAP) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, text, meter_map))
    return info.value.errors


def test_example_loads_with_included_map_and_plans(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, EXAMPLE)).bridge
    meter = config.devices[0]
    assert [p.name for p in meter.points] == ["voltage", "current", "power", "energy"]
    plan = {group: [(r.address, r.count) for r in reads]
            for group, reads in meter.read_plan().items()}
    assert plan == {"default": [(0, 14)], "energy": [(342, 2)]}  # address_base 1 -> wire - 1
    text = "\n".join(format_plan(config))
    assert ("FC04 input 1..14 = wire 0x0000..0x000D (14 registers, 8 unused): voltage, "
            "current, power") in text
    assert "total: 4 request(s)" in text
    plc = config.devices[1]
    assert plc.value_spec(plc.points[1]).order == "CDAB"
    assert plc.value_spec(plc.points[2]).order == "AB"  # 16-bit: the byte half of CDAB


def point_errors(tmp_path: Path, points: str, device_extra: str = "") -> str:
    text = f"""
[[bridge.buses]]
name = "b"
type = "tcp"
host = "localhost"

[[bridge.devices]]
name = "d"
bus = "b"
unit_id = 1
{device_extra or "address_base = 0"}
points = [
{points}
]
"""
    return "\n".join(errors_of(tmp_path, text))


def test_unknown_keys_name_their_path(tmp_path: Path) -> None:
    text = point_errors(tmp_path, '{ name = "a", address = 0, sclae = 0.1 },')
    assert "bridge.devices.0.points.0.sclae: Extra inputs are not permitted" in text


def test_overlapping_points(tmp_path: Path) -> None:
    text = point_errors(tmp_path, """
  { name = "a", address = 0, type = "float32" },
  { name = "b", address = 1 },
  { name = "c", address = 5, type = "bit", bit = 0 },
  { name = "e", address = 5, type = "bit", bit = 1 },""")
    assert ("bridge.devices.0.points: Value error, points.1 'b' (holding 1) overlaps "
            "points.0 'a' (holding 0..1)") in text
    assert "'e'" not in text  # two bits of one register do not overlap


def test_type_count_mismatches(tmp_path: Path) -> None:
    text = point_errors(tmp_path, """
  { name = "a", address = 0, type = "float32", count = 2 },
  { name = "s", address = 10, type = "string" },
  { name = "c", table = "coil", address = 0, type = "int16" },
  { name = "x", address = 20, type = "bit" },
  { name = "o", address = 30, type = "int32", order = "ABCDEFGH" },""")
    assert "bridge.devices.0.points.0: Value error, count is only for strings" in text
    assert "bridge.devices.0.points.1: Value error, type string needs count" in text
    assert "bridge.devices.0.points.2: Value error, a coil is a single bit" in text
    assert "bridge.devices.0.points.3: Value error, bit (0-15) is required" in text
    assert "bridge.devices.0.points.4: Value error, order ABCDEFGH is only for 64-bit" in text


def test_register_limits(tmp_path: Path) -> None:
    text = point_errors(tmp_path, '{ name = "s", address = 0, type = "string", count = 126 },')
    assert "bridge.devices.0.points.0: Value error, 126 registers exceed the 125-register" in text
    text = point_errors(tmp_path, '{ name = "s", address = 0, type = "string", count = 60 },',
                        "address_base = 0\nmax_registers = 50")
    assert "bridge.devices.0: Value error, points.0 's': 60 registers exceed max_registers" in text
    text = point_errors(tmp_path, '{ name = "a", address = 0 },',
                        "address_base = 0\nmax_registers = 126")
    assert "bridge.devices.0.max_registers: Input should be less than or equal to 125" in text


def test_duplicate_names(tmp_path: Path) -> None:
    text = point_errors(tmp_path, '{ name = "a", address = 0 },\n{ name = "a", address = 1 },')
    assert "points.1: duplicate point name 'a' (also points.0)" in text
    text = "\n".join(errors_of(tmp_path, """
[[bridge.buses]]
name = "b"
type = "tcp"
host = "h"
[[bridge.buses]]
name = "b"
type = "rtu"
device = "/dev/ttyS0"
[[bridge.devices]]
name = "d"
bus = "b"
unit_id = 1
address_base = 0
[[bridge.devices]]
name = "d"
bus = "nope"
unit_id = 2
address_base = 0
"""))
    assert "bridge.buses: Value error, buses.1: duplicate bus name 'b' (also buses.0)" in text


def test_devices_refer_to_buses_and_own_their_unit(tmp_path: Path) -> None:
    text = "\n".join(errors_of(tmp_path, """
[[bridge.buses]]
name = "line"
type = "rtu"
device = "/dev/ttyS0"
[[bridge.devices]]
name = "a"
bus = "line"
unit_id = 3
address_base = 0
[[bridge.devices]]
name = "b"
bus = "line"
unit_id = 3
address_base = 0
[[bridge.devices]]
name = "a"
bus = "lne"
unit_id = 4
address_base = 0
[[bridge.devices]]
name = "c"
bus = "line"
unit_id = 0
address_base = 0
"""))
    assert "devices.2: duplicate device name 'a' (also devices.0)" in text
    assert "devices.1 'b': unit_id 3 is already devices.0 on bus 'line'" in text
    assert "devices.2 'a': unknown bus 'lne' (buses: line)" in text
    assert "devices.3 'c': unit_id must be 1-247 on a serial line" in text
    assert text.startswith("bridge.devices: Value error")


def test_writes_on_read_only_tables_and_reserved_names(tmp_path: Path) -> None:
    text = point_errors(tmp_path, """
  { name = "a", table = "input", address = 0, writable = true },
  { name = "b", table = "discrete", address = 0, writable = true },
  { name = "status", address = 9 },""")
    assert "bridge.devices.0.points.0: Value error, writable: the input table is read-only" in text
    assert "bridge.devices.0.points.1: Value error, writable: the discrete table is read-only" \
        in text
    assert "bridge.devices.0.points.2.name: Value error, 'status' is reserved" in text


def test_address_base_is_explicit(tmp_path: Path) -> None:
    text = "\n".join(errors_of(tmp_path, """
[[bridge.buses]]
name = "b"
type = "tcp"
host = "h"
[[bridge.devices]]
name = "d"
bus = "b"
unit_id = 1
"""))
    assert "bridge.devices.0.address_base: Field required" in text
    text = point_errors(tmp_path, '{ name = "a", address = 0 },', "address_base = 1")
    assert "points.0 'a': address 0 is below address_base 1" in text


def test_errors_inside_a_map_name_the_file(tmp_path: Path) -> None:
    bad_map = 'points = [ { name = "v", table = "input", address = 1, type = "float33" } ]'
    text = "\n".join(errors_of(tmp_path, EXAMPLE, bad_map))
    assert "bridge.devices.0: Value error, map maps/meter.toml: points.0.type: Input should be" \
        in text
    text = "\n".join(errors_of(tmp_path, EXAMPLE.replace("maps/meter.toml", "maps/none.toml")))
    assert "bridge.devices.0: Value error, map maps/none.toml: cannot read" in text


def test_serial_device_errors(tmp_path: Path) -> None:
    text = "\n".join(errors_of(tmp_path, """
[[bridge.serial]]
name = "scale"
device = "/dev/ttyUSB2"
parser = "regex"
pattern = 'W=(?P<weight>[0-9.]+'
points = [ { name = "weight", field = "weight" } ]

[[bridge.serial]]
name = "probe"
device = "/dev/ttyUSB3"
framing = "fixed"
parser = "struct"
struct = "<hH"
fields = ["t"]
points = [ { name = "t", field = "temp" } ]
"""))
    assert "bridge.serial.0: Value error, pattern: missing ), unterminated subpattern" in text
    assert "bridge.serial.1: Value error, framing 'fixed' needs length" in text
    assert "struct '<hH' has 2 items but fields names 1" in text
    assert "points.0 't': field 'temp' is not produced by the parser" in text



def test_a_serial_port_has_one_user(tmp_path: Path) -> None:
    text = "\n".join(errors_of(tmp_path, """
[[bridge.buses]]
name = "line"
type = "rtu"
device = "/dev/ttyUSB0"

[[bridge.serial]]
name = "scale"
device = "/dev/ttyUSB0"
pattern = 'W=(?P<w>[0-9.]+)'
points = [ { name = "weight", field = "w" } ]
"""))
    assert "bridge: Value error, serial.0: port /dev/ttyUSB0 is already used by buses.0" in text


def test_an_rtu_over_tcp_converter_is_one_bus(tmp_path: Path) -> None:
    text = "\n".join(errors_of(tmp_path, """
[[bridge.buses]]
name = "conv-a"
type = "rtu-over-tcp"
host = "10.0.0.7"
port = 4001

[[bridge.buses]]
name = "conv-b"
type = "rtu-over-tcp"
host = "10.0.0.7"
port = 4001

[[bridge.buses]]
name = "mixed"
type = "tcp"
host = "10.0.0.7"
port = 4001
"""))
    assert ("bridge.buses: Value error, buses.1 'conv-b': 10.0.0.7:4001 is already used by "
            "buses.0 'conv-a'; an RTU-over-TCP converter is one serial line: put its devices "
            "on one bus") in text
    assert "buses.2 'mixed': 10.0.0.7:4001 is already used by buses.0 'conv-a'" in text
    # Modbus TCP gateways take several connections; another port of the converter is another line
    config = load_config(write(tmp_path, """
[[bridge.buses]]
name = "plc-a"
type = "tcp"
host = "10.0.0.9"

[[bridge.buses]]
name = "plc-b"
type = "tcp"
host = "10.0.0.9"

[[bridge.buses]]
name = "conv-a"
type = "rtu-over-tcp"
host = "10.0.0.7"
port = 4001

[[bridge.buses]]
name = "conv-b"
type = "rtu-over-tcp"
host = "10.0.0.7"
port = 4002
""")).bridge
    assert [b.name for b in config.buses] == ["plc-a", "plc-b", "conv-a", "conv-b"]


def test_manual_notation_and_impossible_addresses(tmp_path: Path) -> None:
    text = point_errors(tmp_path, """
  { name = "energy", table = "input", address = 30073, type = "float32" },
  { name = "setpoint", address = 40001 },
  { name = "six", table = "input", address = 300073 },
  { name = "far", address = 70000 },
  { name = "ok_input", table = "input", address = 73, type = "float32" },
  { name = "ok_holding", address = 1 },
""", "address_base = 1")
    assert ("points.0 'energy': address 30073 looks like the manual's 3xxxx notation for input "
            "register 73: write address = 73 (with address_base 1)") in text
    assert "points.1 'setpoint': address 40001 looks like the manual's 4xxxx notation" in text
    assert ("points.2 'six': address 300073 cannot exist (a table has 65536 entries: 0-65535, or "
            "1-65536 with address_base 1); 300073 looks like the 6-digit 3xxxxx notation for "
            "input register 73: write address = 73") in text
    assert "points.3 'far': address 70000 cannot exist" in text
    assert "ok_input" not in text and "ok_holding" not in text


def test_real_high_addresses_pass_with_address_base_0(tmp_path: Path) -> None:
    """SunSpec maps start at wire 40000, SMA inverters use 30775: real, not notation."""
    text = EXAMPLE.replace('{ name = "run", table', """{ name = "sunspec", address = 40002 },
  { name = "sma", table = "input", address = 30775, type = "int32" },
  { name = "run", table""")
    points = load_config(write(tmp_path, text)).bridge.devices[1].points
    assert [p.address for p in points[:2]] == [40002, 30775]


def test_device_unit_is_read_as_unit_id_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    text = EXAMPLE.replace("unit_id = 1\naddress_base = 0", "unit = 9\naddress_base = 0")
    with caplog.at_level("WARNING", logger="outpost.config"):
        config = load_config(write(tmp_path, text)).bridge
    assert config.devices[1].unit_id == 9
    assert ("device 'plc-1': the key `unit` is now `unit_id` (the Modbus unit id); `unit` is "
            "still read") in caplog.text


def test_profiles_are_maps_by_name(tmp_path: Path) -> None:
    text = EXAMPLE.replace('map = "maps/meter.toml"', 'map = "profile:eastron-sdm630"')
    text = text.replace('name = "energy"', 'name = "energy_again"').replace("343", "345")
    with pytest.raises(ConfigError) as info:  # the profile's points are there: overlaps
        load_config(write(tmp_path, text))
    assert "'energy_again' (input 345) overlaps points.31 'total_reactive_energy'" \
        in str(info.value)
    meter = load_config(write(tmp_path, text.replace("345", "1001"))).bridge.devices[0]
    assert meter.points[0].name == "voltage_l1" and meter.points[-1].name == "energy_again"
    assert meter.span(meter.points[0]).address == 0  # the profile's address_base 1
    text = point_errors(tmp_path, "", 'map = "profile:sdm630"\naddress_base = 1')
    assert "map profile:sdm630: no such profile; did you mean 'profile:eastron-sdm630'?" in text


def test_errors_teach_the_fix(tmp_path: Path) -> None:
    text = point_errors(tmp_path, """
  { name = "a", address = 1, byte_order = "ABCD", tabel = "input" },
""", 'order = "ABCD"')
    assert "bridge.devices.0.order: Extra inputs are not permitted (did you mean byte_order?)" \
        in text
    assert ("bridge.devices.0.points.0.byte_order: Extra inputs are not permitted (did you "
            "mean order?)") in text
    assert "bridge.devices.0.points.0.tabel: Extra inputs are not permitted (did you mean table?)" \
        in text
    assert ("bridge.devices.0.address_base: Field required: one of 0, 1 (1 when the manual "
            "counts registers from 1)") in text
    nothing_close = point_errors(tmp_path, '{ name = "a", address = 1, zzz = 1 },')
    assert "points.0.zzz: Extra inputs are not permitted (valid keys: unit, report," \
        in nothing_close


def test_field_and_reference_errors_in_one_pass(tmp_path: Path) -> None:
    text = "\n".join(errors_of(tmp_path, """
[[bridge.buses]]
name = "lab"
type = "tcp"
host = "localhost"

[[bridge.devices]]
name = "meter"
bus = "lab1"
unit_id = 1
address_base = 0
points = [{ name = "a", address = 1, sclae = 2 }]
"""))
    assert "bridge.devices.0.points.0.sclae: Extra inputs are not permitted" in text
    assert "bridge.devices: Value error, devices.0 'meter': unknown bus 'lab1' (buses: lab)" \
        in text


def test_a_disabled_device_stays_in_the_configuration_and_is_checked(tmp_path: Path) -> None:
    """`enabled = false` in every family: the device is kept (names, units and ports stay
    taken) and its points are still checked."""
    config = load_config(write(tmp_path, EXAMPLE.replace(
        'name = "plc-1"', 'name = "plc-1"\nenabled = false'))).bridge
    assert [(d.name, d.enabled) for d in config.device_configs()][:2] == [
        ("meter-1", True), ("plc-1", False)]
    text = "\n".join(errors_of(tmp_path, """
[[bridge.buses]]
name = "b"
type = "tcp"
host = "localhost"

[[bridge.devices]]
name = "d"
enabled = false
bus = "b"
unit_id = 1
address_base = 0
points = [ { name = "a", address = 0, sclae = 0.1 } ]

[[bridge.serial]]
name = "scale"
enabled = false
device = "/dev/ttyUSB2"
pattern = 'W=(?P<weight>[0-9.]+'
points = [ { name = "weight", field = "weight" } ]

[[bridge.opcua]]
name = "plc"
enabled = "maybe"
endpoint = "opc.tcp://plc:4840"
points = [ { name = "t", node = "ns=2;s=T" } ]
"""))
    assert "bridge.devices.0.points.0.sclae: Extra inputs are not permitted" in text
    assert "bridge.serial.0: Value error, pattern: missing ), unterminated subpattern" in text
    assert "bridge.opcua.0.enabled: Input should be a valid boolean" in text
