"""The named parts of a remote configuration merged into the running file's text
(outpost/remote_config_parts.py), and the table scanner it stands on (outpost/toml_tables.py):
the part's arrays replaced, every other byte of the file as it was."""

from __future__ import annotations

import tomllib

import pytest

from outpost.remote_config_parts import PartError, merge_part
from outpost.toml_tables import headers

RUNNING = '''# outpost.toml of plant 7
gateway_id = "plant-7"   # never changed remotely

[bridge]
prefix = "devices"
diagnostics_interval = 5

# The PLC of line 1
[[bridge.buses]]
name = "plc"
type = "tcp"
host = "10.0.0.5"

# Meters
[[bridge.devices]]
name = "meter-1"   # the main meter
bus = "plc"
unit_id = 1
points = [
  { name = "power", address = 0, type = "f32" },
]

# the spare one
[[bridge.devices]]
name = "meter-2"
bus = "plc"
unit_id = 2

# --- the uplink ---

[uplink]
enabled = true

[[uplink.remotes]]
name = "cloud"
addresses = ["mqtt.example.com:8883"]

# what goes up
[[uplink.forward]]
filter = "devices/#"
qos = 1

[[uplink.forward]]
filter = "alarms/#"   # every alarm
qos = 1

[remote_config]
enabled = true
'''

DEVICES = '''# two meters on a new PLC
[[bridge.buses]]
name = "plc-2"
type = "tcp"
host = "10.0.0.6"

[[bridge.devices]]
name = "meter-3"
bus = "plc-2"
unit_id = 3

# its twin
[[bridge.devices]]
name = "meter-4"
bus = "plc-2"
unit_id = 4
'''


def test_a_devices_part_replaces_the_buses_and_devices_and_nothing_else() -> None:
    merged = merge_part(RUNNING, "devices", DEVICES)
    before_buses = RUNNING.index("[[bridge.buses]]")
    after_devices = RUNNING.index("\n# --- the uplink ---")
    new_buses, new_devices = DEVICES.split("\n\n[[bridge.devices]]")
    # The comment lines between the arrays stay with the running file; those inside the
    # fragment's arrays come along.
    assert merged == (RUNNING[:before_buses]
                      + new_buses.removeprefix("# two meters on a new PLC\n")
                      + "\n\n# Meters\n[[bridge.devices]]" + new_devices
                      + RUNNING[after_devices:])
    assert "# its twin\n" in merged and "# two meters" not in merged
    data, old = tomllib.loads(merged), tomllib.loads(RUNNING)
    assert [d["name"] for d in data["bridge"]["devices"]] == ["meter-3", "meter-4"]
    assert data["bridge"]["buses"] == tomllib.loads(DEVICES)["bridge"]["buses"]
    assert {k: v for k, v in data.items() if k != "bridge"} == {
        k: v for k, v in old.items() if k != "bridge"}
    assert data["bridge"]["diagnostics_interval"] == 5


def test_a_forward_part_replaces_the_forward_rules_and_nothing_else() -> None:
    fragment = '[[uplink.forward]]\nfilter = "devices/+/power"\nqos = 0\n'
    merged = merge_part(RUNNING, "forward", fragment)
    start = RUNNING.index("[[uplink.forward]]")
    end = RUNNING.index("\n[remote_config]")
    assert merged == RUNNING[:start] + fragment + RUNNING[end:]
    assert tomllib.loads(merged)["uplink"]["forward"] == [
        {"filter": "devices/+/power", "qos": 0}]


def test_an_empty_part_removes_every_entry_and_keeps_the_comments_around_them() -> None:
    merged = merge_part(RUNNING, "devices", "")
    assert "bridge.buses" not in merged and "bridge.devices" not in merged
    assert "# The PLC of line 1\n\n# Meters\n\n# --- the uplink ---\n" in merged
    assert tomllib.loads(merged)["bridge"] == {"prefix": "devices", "diagnostics_interval": 5}
    no_rules = merge_part(RUNNING, "forward", "# nothing goes up any more\n")
    assert "uplink.forward" not in no_rules and "filter" not in no_rules
    assert no_rules.endswith('# what goes up\n\n[remote_config]\nenabled = true\n')


@pytest.mark.parametrize(("part", "fragment", "found"), [
    ("forward", '[[uplink.forward]]\nfilter = "a"\n[[listeners]]\nport = 1884\n', "listeners"),
    ("forward", '[uplink]\nenabled = false\n', "uplink.enabled"),
    ("forward", '[[uplink.remotes]]\nname = "evil"\n', "uplink.remotes"),
    ("devices", '[bridge]\nprefix = "x"\n[[bridge.devices]]\nname = "m"\n', "bridge.prefix"),
    ("devices", 'gateway_id = "plant-9"\n', "gateway_id"),
    ("devices", '[[uplink.forward]]\nfilter = "a"\n', "uplink"),
    ("devices", 'bridge = 3\n', "bridge"),
])
def test_a_fragment_with_any_other_key_is_refused_naming_it(part: str, fragment: str,
                                                            found: str) -> None:
    with pytest.raises(PartError) as refused:
        merge_part(RUNNING, part, fragment)
    holds = ("uplink.forward" if part == "forward" else
             "bridge.buses, bridge.devices, bridge.serial, bridge.opcua")
    assert str(refused.value) == f"part {part!r} may only hold {holds}; found {found}"


def test_arrays_the_running_file_lacks_go_after_the_section_s_last_table() -> None:
    serial = '[[bridge.serial]]\nname = "scale"\ndevice = "/dev/ttyUSB0"\n'
    merged = merge_part(RUNNING, "devices", DEVICES + "\n" + serial)
    assert merged.index("[[bridge.serial]]") > merged.index('name = "meter-4"')
    assert "unit_id = 4\n\n[[bridge.serial]]\n" in merged
    assert merged.endswith(RUNNING[RUNNING.index("\n# --- the uplink ---"):])
    assert tomllib.loads(merged)["bridge"]["serial"] == [
        {"name": "scale", "device": "/dev/ttyUSB0"}]
    # A file without the section: the arrays go at its end.
    bare = 'gateway_id = "plant-7"\n[uplink]\nenabled = true'
    merged = merge_part(bare, "devices", DEVICES)
    assert merged.startswith(bare + "\n\n[[bridge.buses]]\n")
    # No forward rule yet: the new ones follow the uplink's last table.
    no_rules = RUNNING[:RUNNING.index("# what goes up")] + "[remote_config]\nenabled = true\n"
    merged = merge_part(no_rules, "forward", '[[uplink.forward]]\nfilter = "a/#"\n')
    assert 'addresses = ["mqtt.example.com:8883"]\n\n[[uplink.forward]]\nfilter = "a/#"\n' \
        in merged


def test_entries_split_over_the_file_and_sub_tables_are_replaced_whole() -> None:
    running = ('[[bridge.devices]]\nname = "a"\n[[bridge.devices.points]]\nname = "p"\n\n'
               '[uplink]\nenabled = true\n\n[[bridge.devices]]\nname = "b"\n')
    merged = merge_part(running, "devices", '[[bridge.devices]]\nname = "c"\n')
    assert merged == '[[bridge.devices]]\nname = "c"\n\n[uplink]\nenabled = true\n\n'


def test_arrays_written_inline_are_refused() -> None:
    inline = '[bridge]\ndevices = [{ name = "a", bus = "plc" }]\n'
    with pytest.raises(PartError, match=r"the running file writes bridge.devices otherwise "
                       r"than as \[\[bridge.devices\]\] tables"):
        merge_part(inline, "devices", DEVICES)
    with pytest.raises(PartError, match=r"part 'forward' writes uplink.forward otherwise"):
        merge_part(RUNNING, "forward", 'uplink.forward = [{ filter = "a" }]\n')


def test_a_file_with_crlf_line_ends_is_merged() -> None:
    running = RUNNING.replace("\n", "\r\n")
    merged = merge_part(running, "forward", '[[uplink.forward]]\nfilter = "a/#"\n')
    start = running.index("[[uplink.forward]]")
    end = running.index("\r\n[remote_config]")
    assert merged == running[:start] + '[[uplink.forward]]\nfilter = "a/#"\n' + running[end:]


def test_text_that_is_not_toml_is_refused() -> None:
    with pytest.raises(PartError, match=r"part 'forward' is not valid TOML"):
        merge_part(RUNNING, "forward", "[[uplink.forward]\n")
    with pytest.raises(PartError, match="unknown part 'all': one of devices, forward"):
        merge_part(RUNNING, "all", "")


def test_the_scanner_is_not_fooled_by_strings_arrays_and_comments() -> None:
    text = '''title = "a [b] # c"   # a comment with "quotes" and [brackets]
key = 'C:\\path [x]'
notes = """
[[bridge.devices]]
still inside: \\""" and ""
""\"""
raw = \'\'\'
[uplink]
\'\'\'
values = [
  [1, 2],
[3],   # a line starting with [ inside an array
]
["quoted.table" . 'b' ]   # a header with quoted keys
x = 1

# about the next one
[[arr]]
y = 2
'''
    tomllib.loads(text)  # valid TOML
    found = headers(text)
    assert [(h.path, h.array) for h in found] == [(("quoted.table", "b"), False),
                                                  (("arr",), True)]
    first, second = found
    assert text[first.start:first.content_end] == ('["quoted.table" . \'b\' ]   # a header '
                                                    'with quoted keys\nx = 1\n')
    assert text[first.content_end:first.end] == "\n# about the next one\n"
    assert text[second.start:] == "[[arr]]\ny = 2\n" and second.end == len(text)
