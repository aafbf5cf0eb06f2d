"""The S7, BACnet/IP and EtherNet/IP families through `outpost run` to a Sparkplug B host
application and to Home Assistant, each against its test peer (node-snap7's server,
@bacnet-js/client devices, cpppo's Logix simulator).

Sparkplug metric datatypes and Home Assistant entities are made from a device's family-neutral
description (bridge/driver.py `PointInfo`), so nothing of a family should leak into them. For
each family one gateway runs one device with points of every neutral datatype the family has,
`[sparkplug]` towards a mosquitto and `[homeassistant]` discovery, and the test checks what a
host application decodes (tests/bridge/sparkplug/host.py) and what Home Assistant reads:

- the device's DBIRTH has every point as a metric with its Sparkplug datatype, its current
  value and its unit as `engUnit`;
- a DDATA follows a value the peer changes by itself (the S7 and BACnet peers count), and a
  DCMD writes a point through the family and comes back as a DDATA with the new value;
- a retained discovery config exists for every point, of the component its kind makes and with
  its unit;
- the peer killed: a DDEATH; started again: a DBIRTH with its fresh values and nothing between
  the two (the outage of bridge/sessions.py or the BACnet device's, seen by a host).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol
from unittest.mock import ANY

import pytest

from tests.bridge.bacnet.support import NodeDevice
from tests.bridge.enip.support import LogixSimulator
from tests.bridge.homeassistant.ha import GATEWAY_ENTITIES, home_assistant
from tests.bridge.s7.support import S7Server
from tests.bridge.sparkplug.host import DATATYPES, BirthMetric, SparkplugHost, metric_command
from tests.support.broker_proc import BrokerProcess
from tests.support.mosquitto import Mosquitto
from tests.support.waiting import TIMEOUT

GATEWAY, GROUP = "gw1", "plant"
DATATYPE_NUMBERS = {name: number for number, name in DATATYPES.items()}


@dataclass(frozen=True)
class Write:
    """A DCMD of one metric: its datatype, the protobuf value field and the value."""

    point: str
    datatype: str
    field: str
    value: Any


class Peer(Protocol):
    """A family's test peer: a process that can be killed and started again."""

    def start(self) -> object:
        """Start it (again on the same address)."""

    def kill(self) -> None:
        """Stop it (SIGKILL)."""


@dataclass(frozen=True)
class FamilyCase:
    """One family's peer and device in the gateway, and what a Sparkplug host and Home
    Assistant should make of it."""

    peer: Peer
    device: str
    table: str  # the device's `[[bridge.<family>]]` table without its points
    points: str  # its `points = [...]` entries
    births: dict[str, BirthMetric]  # metric -> what its DBIRTH says
    entities: dict[str, tuple[str, str | None]]  # point -> Home Assistant component, unit
    write: Write
    changing: str | None = None  # a point the peer changes by itself


def s7_case(plc: S7Server) -> FamilyCase:
    """A node-snap7 test PLC (tests/bridge/s7/node_server/server.js lays out DB1)."""
    return FamilyCase(
        peer=plc,
        device="plc",
        table=f'[[bridge.s7]]\nname = "plc"\nhost = "127.0.0.1"\nport = {plc.port}\n'
              "poll_interval = 0.1",
        points="""
  { name = "temperature", address = "DB1.DBD14", type = "REAL", unit = "°C" },
  { name = "precise", address = "DB1.DBB18", type = "LREAL", unit = "m" },
  { name = "pressure", address = "DB1.DBW8", type = "INT", unit = "bar" },
  { name = "word", address = "DB1.DBW2", type = "WORD" },
  { name = "huge", address = "DB1.DBB108", type = "ULINT" },
  { name = "running", address = "DB1.DBX0.0" },
  { name = "label", address = "DB1.DBB26", type = "STRING", length = 20 },
  { name = "stamp", address = "DB1.DBB80", type = "DTL" },
  { name = "mode", address = "DB1.DBB93", type = "USINT", enum = { 0 = "off", 200 = "auto" } },
  { name = "dwell", address = "T2", unit = "s" },
  { name = "ticks", address = "DB1.DBD124", type = "DINT", unit = "pulses" },
  { name = "setpoint", address = "DB1.DBD120", type = "REAL", unit = "rpm", writable = true },
""",
        births={
            "temperature": BirthMetric("Float", 21.5, "°C"),
            "precise": BirthMetric("Double", pytest.approx(math.pi), "m"),
            "pressure": BirthMetric("Int16", -1234 & 0xFFFFFFFF, "bar"),  # two's complement
            "word": BirthMetric("UInt16", 0xBEEF, None),
            "huge": BirthMetric("UInt64", 18000000000000000000, None),
            "running": BirthMetric("Boolean", True, None),
            "label": BirthMetric("String", "hello S7", None),
            "stamp": BirthMetric("String", "2024-03-15T13:45:30.123Z", None),
            "mode": BirthMetric("String", "auto", None),
            "dwell": BirthMetric("Double", pytest.approx(12.3), "s"),
            "ticks": BirthMetric("Int32", ANY, "pulses"),
            "setpoint": BirthMetric("Float", 50.0, "rpm"),
        },
        entities={
            "temperature": ("sensor", "°C"), "precise": ("sensor", "m"),
            "pressure": ("sensor", "bar"), "word": ("sensor", None), "huge": ("sensor", None),
            "running": ("binary_sensor", None), "label": ("sensor", None),
            "stamp": ("sensor", None), "mode": ("sensor", None), "dwell": ("sensor", "s"),
            "ticks": ("sensor", "pulses"), "setpoint": ("number", "rpm"),
        },
        write=Write("setpoint", "Float", "float_value", 61.25),
        changing="ticks",
    )


def bacnet_case(devices: NodeDevice) -> FamilyCase:
    """Device 1001 of the @bacnet-js/client test devices (tests/bridge/bacnet/node_device/
    device.js lists its objects), subscribed with COV and checked every half second.

    `temperature` names no unit: the DBIRTH has the one the device states (degrees-Celsius,
    published with the values), Home Assistant none (discovery is made from the configuration
    before the device is asked, docs/bridge.md)."""
    return FamilyCase(
        peer=devices,
        device="ahu",
        table=f'[[bridge.bacnet]]\nname = "ahu"\ndevice_id = 1001\naddress = "{devices.address}"'
              '\nlocal_address = "127.0.0.1:0"\npoll_interval = 0.1\ncheck_interval = 0.5\n'
              "timeout = 1.0\nreconnect_initial = 0.2\nreconnect_max = 0.5",
        points="""
  { name = "temperature", object = "AI:1" },
  { name = "valve", object = "AO:1", unit = "%" },
  { name = "counter", object = "AV:2", unit = "pulses" },
  { name = "door", object = "BI:1" },
  { name = "pump", object = "BO:1", writable = true },
  { name = "mode", object = "MSI:1" },
  { name = "fan", object = "MSO:1", writable = true, enum = { 1 = "off", 2 = "low" } },
  { name = "setpoint", object = "AV:1", unit = "°C", writable = true, priority = 8 },
""",
        births={
            "temperature": BirthMetric("Float", 21.5, "°C"),
            "valve": BirthMetric("Float", 0.0, "%"),
            "counter": BirthMetric("Float", ANY, "pulses"),
            "door": BirthMetric("Boolean", True, None),
            "pump": BirthMetric("Boolean", False, None),
            "mode": BirthMetric("UInt32", 2, None),
            "fan": BirthMetric("String", "off", None),
            "setpoint": BirthMetric("Float", 20.0, "°C"),
        },
        entities={
            "temperature": ("sensor", None), "valve": ("sensor", "%"),
            "counter": ("sensor", "pulses"), "door": ("binary_sensor", None),
            "pump": ("switch", None), "mode": ("sensor", None), "fan": ("select", None),
            "setpoint": ("number", "°C"),
        },
        write=Write("setpoint", "Float", "float_value", 23.5),
        changing="counter",
    )


def enip_case(simulator: LogixSimulator) -> FamilyCase:
    """cpppo's Logix simulator with the tags of tests/bridge/enip/support.py, all at zero."""
    return FamilyCase(
        peer=simulator,
        device="press",
        table=f'[[bridge.enip]]\nname = "press"\nhost = "127.0.0.1"\nport = {simulator.port}\n'
              "poll_interval = 0.1",
        points="""
  { name = "speed", tag = "Motor.Speed", type = "REAL", unit = "rpm" },
  { name = "precise", tag = "Precise", type = "LREAL", unit = "m" },
  { name = "small", tag = "Small", type = "SINT" },
  { name = "count", tag = "Program:Main.Count", type = "DINT", unit = "pieces" },
  { name = "big", tag = "Big", type = "LINT" },
  { name = "wide", tag = "Wide", type = "UDINT" },
  { name = "running", tag = "Motor.Running", type = "BOOL" },
  { name = "label", tag = "Label", type = "STRING" },
  { name = "recipe", tag = "Recipe", type = "DINT", elements = 3 },
  { name = "mode", tag = "Mode", type = "DINT", writable = true, enum = { 0 = "off" } },
  { name = "setpoint", tag = "Setpoint", type = "REAL", unit = "°C", writable = true, max = 99 },
""",
        births={
            "speed": BirthMetric("Float", 0.0, "rpm"),
            "precise": BirthMetric("Double", 0.0, "m"),
            "small": BirthMetric("Int8", 0, None),
            "count": BirthMetric("Int32", 0, "pieces"),
            "big": BirthMetric("Int64", 0, None),
            "wide": BirthMetric("UInt32", 0, None),
            "running": BirthMetric("Boolean", False, None),
            "label": BirthMetric("String", "", None),
            "recipe": BirthMetric("String", "[0,0,0]", None),  # an array travels as JSON
            "mode": BirthMetric("String", "off", None),
            "setpoint": BirthMetric("Float", 0.0, "°C"),
        },
        entities={
            "speed": ("sensor", "rpm"), "precise": ("sensor", "m"), "small": ("sensor", None),
            "count": ("sensor", "pieces"), "big": ("sensor", None), "wide": ("sensor", None),
            "running": ("binary_sensor", None), "label": ("sensor", None),
            "recipe": ("sensor", None), "mode": ("select", None),
            "setpoint": ("number", "°C"),
        },
        write=Write("setpoint", "Float", "float_value", 42.5),
    )


def started(family: str) -> FamilyCase:
    """The family's case with its test peer running."""
    if family == "s7":
        return s7_case(S7Server().start())
    if family == "bacnet":
        return bacnet_case(NodeDevice().start())
    return enip_case(LogixSimulator().start())


@pytest.fixture(scope="module", params=["s7", "bacnet", "enip"])
def family(request: pytest.FixtureRequest) -> Iterator[FamilyCase]:
    case = started(request.param)
    yield case
    case.peer.kill()


def gateway_config(case: FamilyCase, mosquitto: Mosquitto) -> str:
    return f"""
gateway_id = "{GATEWAY}"

[sparkplug]
enabled = true
group_id = "{GROUP}"
addresses = ["127.0.0.1:{mosquitto.port}"]
backoff_initial = 0.2

[homeassistant]
enabled = true

[bridge]
diagnostics_interval = 0

{case.table}
points = [{case.points}]
"""


def test_sparkplug_births_data_commands_and_home_assistant_discovery(
    family: FamilyCase, mosquitto: Mosquitto, host: SparkplugHost,
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    gateway = broker_factory(gateway_config(family, mosquitto))
    device = family.device

    host.wait_count("DBIRTH", 1, device, timeout=TIMEOUT)
    births = host.birth_metrics(device)
    assert births.keys() == family.births.keys()
    for name, expected in family.births.items():
        assert births[name] == expected, name

    if family.changing is not None:  # the peer changes a value: a DDATA carries it
        born = births[family.changing].value
        host.wait_value(device, family.changing, lambda value: value != born, TIMEOUT)
    write = family.write
    host.command(GROUP, GATEWAY, device, metric_command(
        write.point, DATATYPE_NUMBERS[write.datatype], **{write.field: write.value}))
    host.wait_value(device, write.point, lambda value: value == write.value, TIMEOUT)

    with home_assistant(gateway, len(family.entities) + GATEWAY_ENTITIES) as (_, configs):
        for point, (component, unit) in family.entities.items():
            topic = f"homeassistant/{component}/{GATEWAY}/{device}_{point}/config"
            assert topic in configs, (topic, sorted(configs))
            entity = configs[topic]
            assert entity["state_topic"] == f"devices/{device}/{point}", topic
            assert entity.get("unit_of_measurement") == unit, topic


def test_ddeath_while_the_peer_is_away_and_a_dbirth_with_fresh_values_when_it_is_back(
    family: FamilyCase, mosquitto: Mosquitto, host: SparkplugHost,
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    broker_factory(gateway_config(family, mosquitto))
    device = family.device
    host.wait_count("DBIRTH", 1, device, timeout=TIMEOUT)
    family.peer.kill()
    try:
        host.wait_count("DDEATH", 1, device, timeout=TIMEOUT)
    finally:
        family.peer.start()
    host.wait_count("DBIRTH", 2, device, timeout=TIMEOUT)
    # the restarted peer's values (the first test's write is gone with the old process)
    births = host.birth_metrics(device)
    for name, expected in family.births.items():
        assert births[name] == expected, name
    kinds = [seen.kind for seen in host.seen() if seen.device == device]
    death = kinds.index("DDEATH")
    assert kinds[death + 1] == "DBIRTH", kinds  # no DDATA of a dead device in between
