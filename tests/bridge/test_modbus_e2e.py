"""pymodbus simulator -> `outpost run` (the bridge) -> MQTT client, over every transport.

Every type and order is decoded against the known values of test_convert.py's anchor tables,
written into the simulator's registers; writes are read back from the simulator; a killed
simulator takes its device offline and a restarted one brings it back.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from bench.bridge.simulator import Simulator
from tests.bridge.support import SimulatorProcess, SocatPair, Watcher
from tests.bridge.test_convert import TELEGRAF, wire_registers, words
from tests.support.broker_proc import BrokerProcess
from tests.support.mosquitto import free_port

logging.getLogger("pymodbus").setLevel(logging.CRITICAL)

# (point name, TOML fields, registers written at its address, expected published value)
Case = tuple[str, str, list[int], Any]


def decode_cases() -> list[Case]:
    cases: list[Case] = []
    for kind, order, hexbytes, expected in TELEGRAF:
        regs = words(bytes.fromhex(hexbytes.replace(" ", "")))
        cases.append((f"tg_{kind}_{order}", f'type = "{kind}", order = "{order}"', regs,
                      expected))
    for order in ("ABCD", "BADC", "CDAB", "DCBA"):
        cases.append((f"f32_{order}", f'type = "float32", order = "{order}"',
                      wire_registers("float32", 123456.0, order), 123456.0))
        cases.append((f"f64_{order}", f'type = "float64", order = "{order}"',
                      wire_registers("float64", 2.718281828459045, order), 2.718281828459045))
    cases += [
        ("scaled", 'type = "int16", scale = 0.01, offset = 100, unit = "kPa"', [0xABCD], -115.55),
        ("sentinel", 'type = "uint16", nan = 65535', [0xFFFF], None),
        ("state", 'type = "uint16", enum = { 0 = "stopped", 1 = "running" }', [1], "running"),
        ("flag3", 'type = "bit", bit = 3', [0b1000], True),
        ("label", 'type = "string", count = 3', [0x4F75, 0x7470, 0x6F73], "Outpos"),
    ]
    return cases


CASES = decode_cases()


def broker_log(mqtt: Watcher) -> str:
    return mqtt.broker.log()[-3000:]


def device_toml(cases: list[Case]) -> tuple[str, dict[str, int]]:
    lines, addresses, address = [], {}, 0
    for name, fields, regs, _ in cases:
        lines.append(f'  {{ name = "{name}", address = {address}, {fields} }},')
        addresses[name] = address
        address += len(regs) + 1
    return "\n".join(lines), addresses


def config(bus: str, points: str, extra: str = "") -> str:
    return f"""
[bridge]
diagnostics_interval = 0.5

[[bridge.buses]]
name = "line"
{bus}
timeout = 0.5
quiet_after_timeout = 0.05

[[bridge.devices]]
name = "plc"
bus = "line"
unit_id = 1
address_base = 0
poll_interval = 0.1
report = "poll"
offline_after = 2
backoff_initial = 0.2
backoff_max = 0.5
points = [
{points}
  {{ name = "motor", table = "coil", address = 5, writable = true }},
  {{ name = "door", table = "discrete", address = 9 }},
  {{ name = "temperature", table = "input", address = 3, type = "int16", scale = 0.1 }},
]
{extra}
"""


@pytest.fixture(params=["tcp", "rtu-over-tcp", "rtu"])
def simulated(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Simulator, str]]:
    """A simulator on one transport, and the [[bridge.buses]] lines that reach it."""
    pair = None
    if request.param == "rtu":
        pair = SocatPair(tmp_path).start()
        sim = Simulator([1], "rtu", device=str(pair.b), size=200)
        sim.start()
        bus = f'type = "rtu"\ndevice = "{pair.a}"\nbaudrate = 19200'
    else:
        sim = Simulator([1], request.param, size=200)
        port = sim.start()
        bus = f'type = "{request.param}"\nhost = "127.0.0.1"\nport = {port}'
    yield sim, bus
    sim.stop()
    if pair is not None:
        pair.stop()


def test_every_type_and_order_is_decoded(
    simulated: tuple[Simulator, str], broker_factory: Callable[..., BrokerProcess]
) -> None:
    sim, bus = simulated
    points, addresses = device_toml(CASES)
    for name, _, regs, _ in CASES:
        sim.set_registers(1, "holding", addresses[name], regs)
    sim.set_bits(1, "coil", 5, [True])
    sim.set_bits(1, "discrete", 9, [True])
    sim.set_registers(1, "input", 3, [0xFF9C])
    with Watcher(broker_factory(config(bus, points))) as mqtt:
        assert mqtt.wait("devices/plc/status", lambda s: s == "online") == "online"
        for name, _, _, expected in CASES:
            got = mqtt.wait(f"devices/plc/{name}")
            if isinstance(expected, float):
                assert got["value"] == pytest.approx(expected, rel=1e-7), name
            else:
                assert got["value"] == expected, name
            assert got["quality"] == ("bad" if expected is None else "good"), name
            assert isinstance(got["ts"], int)
        assert mqtt.latest("devices/plc/scaled")["unit"] == "kPa"
        # Each table is its own read: the coil, discrete and input values come when theirs do.
        assert mqtt.wait("devices/plc/motor")["value"] is True, broker_log(mqtt)
        assert mqtt.wait("devices/plc/door")["value"] is True
        assert mqtt.wait("devices/plc/temperature")["value"] == -10.0
        diagnostics = mqtt.wait("devices/plc/diagnostics", lambda d: d["requests"] > 0)
        assert diagnostics["timeouts"] == diagnostics["stale_frames"] == 0


WRITABLE = """
  { name = "setpoint", address = 0, scale = 0.1, min = 0, max = 100, writable = true },
  { name = "speed", address = 2, type = "float32", order = "CDAB", unit = "rpm", writable = true },
  { name = "count", address = 4, type = "int32", writable = true },
  { name = "mode", address = 6, enum = { 0 = "auto", 1 = "manual" }, writable = true },
  { name = "enable", address = 7, type = "bit", bit = 2, writable = true },
  { name = "name", address = 8, type = "string", count = 2, writable = true },
  { name = "readonly", address = 10 },
  { name = "wide", address = 11, type = "int64", order = "DCBA", writable = true },
"""


def test_writes_are_encoded_written_and_read_back(
    simulated: tuple[Simulator, str], broker_factory: Callable[..., BrokerProcess]
) -> None:
    sim, bus = simulated
    sim.set_registers(1, "holding", 7, [0b1000_0001])
    with Watcher(broker_factory(config(bus, WRITABLE))) as mqtt:
        mqtt.wait("devices/plc/status", lambda s: s == "online")
        assert mqtt.set("devices/plc/setpoint", 1, 42.5) == {
            "id": 1, "ok": True, "error": None, "value": 42.5, "registers": [425]}
        assert sim.get_registers(1, "holding", 0, 1) == [425]
        assert mqtt.wait("devices/plc/setpoint", lambda v: v["value"] == 42.5)
        assert mqtt.set("devices/plc/speed", "a", 1500.25)["ok"]
        assert sim.get_registers(1, "holding", 2, 2) == wire_registers("float32", 1500.25, "CDAB")
        assert mqtt.set("devices/plc/count", 3, -100000)["ok"]
        assert sim.get_registers(1, "holding", 4, 2) == wire_registers("int32", -100000, "ABCD")
        rounded = mqtt.set("devices/plc/count", "r", 12.7)  # an integer point: says what it wrote
        assert rounded == {"id": "r", "ok": True, "error": None, "value": 13,
                           "registers": wire_registers("int32", 13, "ABCD")}
        assert mqtt.set("devices/plc/mode", 4, "manual")["ok"]
        assert sim.get_registers(1, "holding", 6, 1) == [1]
        assert mqtt.set("devices/plc/enable", 5, True)["ok"]
        assert sim.get_registers(1, "holding", 7, 1) == [0b1000_0101]  # other bits kept
        assert mqtt.set("devices/plc/name", 6, "OK")["ok"]
        assert sim.get_registers(1, "holding", 8, 2) == [0x4F4B, 0]
        assert mqtt.set("devices/plc/wide", 7, -2)["ok"]
        assert sim.get_registers(1, "holding", 11, 4) == wire_registers("int64", -2, "DCBA")
        assert mqtt.set("devices/plc/motor", 8, True)["ok"]
        assert sim.get_bit(1, "coil", 5) is True

        refused = {
            "setpoint": (150, "150 is outside [0, 100]"),
            "readonly": (1, "not writable"),
            "mode": ("broken", "not one of"),
            "count": ("many", "expected a number"),
            "nothing": (1, "unknown point 'nothing'"),
        }
        for point, (value, error) in refused.items():
            result = mqtt.set(f"devices/plc/{point}", point, value)
            assert result["ok"] is False and error in result["error"], result
        assert sim.get_registers(1, "holding", 0, 1) == [425]


def test_killed_simulator_goes_offline_and_recovers(
    tmp_path: Path, broker_factory: Callable[..., BrokerProcess]
) -> None:
    port = free_port()
    sim = SimulatorProcess(port).start()
    bus = f'type = "tcp"\nhost = "127.0.0.1"\nport = {port}\nreconnect_max = 0.5'
    try:
        with Watcher(broker_factory(config(bus, '  { name = "r0", address = 0 },'))) as mqtt:
            mqtt.wait("devices/plc/status", lambda s: s == "online")
            assert mqtt.wait("devices/plc/r0")["value"] == 1000  # initial_value(1, 0)
            sim.kill()
            assert mqtt.wait("devices/plc/status", lambda s: s == "offline") == "offline"
            bad = mqtt.wait("devices/plc/r0", lambda v: v["quality"] == "bad")
            assert bad["value"] is None
            sim.start()
            mqtt.wait("devices/plc/status", lambda s: s == "online")
            assert mqtt.wait("devices/plc/r0", lambda v: v["quality"] == "good")["value"] == 1000
            statuses = mqtt.payloads("devices/plc/status")
            assert statuses[-3:] == [b"online", b"offline", b"online"]  # first one retained
    finally:
        sim.kill()


def test_status_is_retained_and_offline_after_shutdown(
    simulated: tuple[Simulator, str], broker_factory: Callable[..., BrokerProcess]
) -> None:
    _sim, bus = simulated
    broker = broker_factory(config(bus, '  { name = "r0", address = 0 },'))
    with Watcher(broker) as mqtt:
        mqtt.wait("devices/plc/status", lambda s: s == "online")
    with Watcher(broker) as late:  # a client that subscribes later gets the retained status
        assert late.wait("devices/plc/status") == "online"
        assert next(m.retain for m in late.messages if m.topic.endswith("/status")) is True
        assert broker.stop() == 0
        late.wait("devices/plc/status", lambda s: s == "offline")


def test_rtu_adapter_unplugged_and_replugged(
    tmp_path: Path, broker_factory: Callable[..., BrokerProcess]
) -> None:
    pair = SocatPair(tmp_path).start()
    sim = Simulator([1], "rtu", device=str(pair.b), size=20)
    sim.start()
    bus = f'type = "rtu"\ndevice = "{pair.a}"\nbaudrate = 19200\nreconnect_max = 0.3'
    try:
        with Watcher(broker_factory(config(bus, '  { name = "r0", address = 0 },'))) as mqtt:
            assert mqtt.wait("devices/plc/r0")["value"] == 1000
            sim.stop()
            pair.stop()  # the USB adapter is pulled: the port vanishes
            mqtt.wait("devices/plc/status", lambda s: s == "offline")
            pair.start()
            sim = Simulator([1], "rtu", device=str(pair.b), size=20)
            sim.start()
            sim.set_registers(1, "holding", 0, [77])
            mqtt.wait("devices/plc/status", lambda s: s == "online")
            assert mqtt.wait("devices/plc/r0", lambda v: v["value"] == 77)
    finally:
        sim.stop()
        pair.stop()
