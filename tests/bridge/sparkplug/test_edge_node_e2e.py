"""pymodbus simulator -> `outpost run` (bridge + Sparkplug edge node) -> mosquitto -> a host
application decoding with the same generated protobuf code.

Births complete and in order, seq continuity, rebirth, DCMD writes, NDEATH after SIGKILL,
DDEATH / DBIRTH (with current values) around a device outage, data held across the primary
host's STATE offline / online, and every kind of bad command refused with a WARNING and
nothing written.
"""

from __future__ import annotations

import logging
import signal
from collections.abc import Callable
from pathlib import Path

import pytest

from bench.bridge.simulator import Simulator, initial_value
from tests.bridge.sparkplug.host import (
    Seen,
    SparkplugHost,
    metric_command,
    rebirth_request,
)
from tests.bridge.support import SimulatorProcess
from tests.gateway.broker.e2e.helpers import PahoClient, wait_for
from tests.support.broker_proc import BrokerProcess
from tests.support.mosquitto import Mosquitto, free_port

logging.getLogger("pymodbus").setLevel(logging.CRITICAL)
BOOLEAN, UINT16, INT64, STRING, DOUBLE = 11, 6, 4, 12, 10


def gateway_config(mosquitto: Mosquitto, modbus_port: int, extra: str = "",
                   level: str = "") -> str:
    return f"""
gateway_id = "gw1"

[sparkplug]
enabled = true
group_id = "plant"
addresses = ["127.0.0.1:{mosquitto.port}"]
backoff_initial = 0.2
{extra}

[bridge]
diagnostics_interval = 0

[[bridge.buses]]
name = "line"
type = "tcp"
host = "127.0.0.1"
port = {modbus_port}
timeout = 0.5

[[bridge.devices]]
name = "plc"
bus = "line"
unit_id = 1
address_base = 0
poll_interval = 0.1
offline_after = 2
backoff_initial = 0.2
backoff_max = 0.5
points = [
  {{ name = "level", address = 0, unit = "cm"{level} }},
  {{ name = "setpoint", address = 1, writable = true }},
  {{ name = "temp", table = "input", address = 3, type = "int16", scale = 0.1, unit = "degC" }},
  {{ name = "pump", table = "coil", address = 5, writable = true }},
]
"""


def check_seq(seen: list[Seen]) -> None:
    """seq 0 at every NBIRTH, +1 (mod 256) on every other message of the node but NDEATH
    (from the first NBIRTH on: a host that subscribed late can only count from there)."""
    births = [i for i, message in enumerate(seen) if message.kind == "NBIRTH"]
    assert births, "no NBIRTH"
    expected = None
    for message in seen[births[0]:]:
        if message.kind == "NDEATH":
            assert not message.payload.HasField("seq")
            continue
        if message.kind == "NBIRTH":
            assert message.payload.seq == 0
        else:
            assert message.payload.seq == expected, (message.kind, message.payload.seq)
        expected = (message.payload.seq + 1) % 256


def test_births_data_rebirth_and_seq(
    mosquitto: Mosquitto, sim: Simulator, host: SparkplugHost,
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    broker_factory(gateway_config(mosquitto, sim.port))
    dbirth = host.wait_count("DBIRTH", 1, "plc")[0]
    seen = host.seen()
    assert [s.kind for s in seen[:2]] == ["NBIRTH", "DBIRTH"]
    assert seen[0].topic == "spBv1.0/plant/NBIRTH/gw1"
    assert dbirth.topic == "spBv1.0/plant/DBIRTH/gw1/plc"
    node_metrics = {m.name: m for m in seen[0].payload.metrics}
    assert node_metrics["bdSeq"].datatype == INT64
    assert node_metrics["Node Control/Rebirth"].boolean_value is False
    metrics = {m.name: m for m in dbirth.payload.metrics}
    assert set(metrics) == {"level", "setpoint", "temp", "pump"}
    assert len({m.alias for m in metrics.values()}) == 4
    assert metrics["level"].datatype == UINT16
    assert metrics["temp"].datatype == DOUBLE
    assert metrics["pump"].datatype == BOOLEAN
    units = {name: dict(zip(m.properties.keys, m.properties.values, strict=True))
             for name, m in metrics.items()}
    assert units["level"]["engUnit"].string_value == "cm"
    assert units["temp"]["engUnit"].string_value == "degC"
    assert "engUnit" not in units["pump"]

    sim.set_registers(1, "holding", 0, [4321])
    sim.set_registers(1, "input", 3, [0xFF9C])  # -10.0 degC
    assert host.wait_value("plc", "level", lambda v: v == 4321)[2] is False
    host.wait_value("plc", "temp", lambda v: v == pytest.approx(-10.0))

    host.command("plant", "gw1", None, rebirth_request())
    host.wait_count("NBIRTH", 2)
    host.wait_count("DBIRTH", 2, "plc")
    sim.set_registers(1, "holding", 0, [4322])
    host.wait_value("plc", "level", lambda v: v == 4322)
    check_seq(host.seen())
    births = host.of("NBIRTH")
    assert births[0].payload.metrics[0].long_value == births[1].payload.metrics[0].long_value


def test_ddata_follows_the_points_deadband(
    mosquitto: Mosquitto, sim: Simulator, host: SparkplugHost,
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    broker_factory(gateway_config(mosquitto, sim.port, level=", deadband = 10"))
    host.wait_count("DBIRTH", 1, "plc")
    sim.set_registers(1, "holding", 0, [1005, 2])  # level inside its deadband, setpoint moves
    host.wait_value("plc", "setpoint", lambda v: v == 2)
    sim.set_registers(1, "holding", 0, [1020, 3])  # both move
    host.wait_value("plc", "setpoint", lambda v: v == 3)
    levels = [value for name, value, _ in host.values("plc") if name == "level"]
    # The same read fetched both registers: 1005 was left out by the deadband, 1020 not.
    assert 1005 not in levels
    assert levels[-1] == 1020


def test_dcmd_writes_and_bad_commands_are_refused(
    mosquitto: Mosquitto, sim: Simulator, host: SparkplugHost,
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    gateway = broker_factory(gateway_config(mosquitto, sim.port))
    host.wait_count("DBIRTH", 1, "plc")
    before = sim.registers(1, "holding")[:6]

    host.command("plant", "gw1", "plc", metric_command("level", UINT16, int_value=7))
    host.command("plant", "gw1", "plc", metric_command("nosuch", UINT16, int_value=7))
    host.command("plant", "gw1", "plc", metric_command("setpoint", STRING, string_value="7"))
    host.command("plant", "gw1", "plc", metric_command("setpoint", UINT16, string_value="7"))
    host.command("plant", "gw1", "plc", metric_command("setpoint", UINT16, int_value=70000))
    host.command("plant", "gw1", None, metric_command("Node Control/Reboot", BOOLEAN,
                                                      boolean_value=True))
    host.command("plant", "gw1", "plc", b"\xff\xff\xff not protobuf")
    host.command("plant", "gw1", None, b"\x0a\x05garbage")
    # One connection keeps the order: once this write landed, every command before it was
    # refused or written.
    host.command("plant", "gw1", "plc", metric_command("pump", BOOLEAN, boolean_value=True))
    wait_for(lambda: sim.get_bit(1, "coil", 5), 15, message="the coil was not written")
    assert sim.registers(1, "holding")[:6] == before  # nothing refused reached the device

    log = [line for line in gateway.log().splitlines() if "WARNING" in line]
    for reason in ("'level' is read-only", "unknown metric 'nosuch'",
                   "'setpoint': wrong datatype 12", "wrong datatype: the value is in "
                   "string_value", "70000 does not fit", "unknown control 'Node Control/Reboot'"):
        assert any(reason in line for line in log), reason
    malformed = [line for line in log if "malformed payload refused" in line]
    assert len(malformed) == 2 and "DCMD" in malformed[0] and "NCMD" in malformed[1]

    host.command("plant", "gw1", "plc", metric_command("setpoint", UINT16, int_value=4242))
    wait_for(lambda: sim.registers(1, "holding")[1] == 4242, 15,
             message="the DCMD did not reach the simulator")
    host.wait_value("plc", "setpoint", lambda v: v == 4242)  # read back, published as DDATA
    assert gateway.process.poll() is None


def test_ndeath_after_sigkill(
    mosquitto: Mosquitto, sim: Simulator, host: SparkplugHost,
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    gateway = broker_factory(gateway_config(mosquitto, sim.port))
    host.wait_count("DBIRTH", 1, "plc")
    gateway.stop(signal.SIGKILL)
    death = host.wait_count("NDEATH", 1)[0]
    assert death.topic == "spBv1.0/plant/NDEATH/gw1"
    bdseq = host.of("NBIRTH")[0].payload.metrics[0].long_value
    assert death.payload.metrics[0].name == "bdSeq"
    assert death.payload.metrics[0].long_value == bdseq


def test_new_session_after_the_server_restarts(
    mosquitto: Mosquitto, sim: Simulator, host: SparkplugHost,
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    gateway = broker_factory(gateway_config(mosquitto, sim.port))
    host.wait_count("DBIRTH", 1, "plc")
    bdseq = host.of("NBIRTH")[0].payload.metrics[0].long_value
    mosquitto.stop()
    mosquitto.start()
    wait_for(lambda: f"(bdSeq {bdseq + 1})" in gateway.log(), 15,
             message="the edge node did not reconnect with the next bdSeq")
    with SparkplugHost(mosquitto) as later:  # its births went out before: ask for them again
        later.command("plant", "gw1", None, rebirth_request())
        birth = later.wait_count("NBIRTH", 1)[0]
        later.wait_count("DBIRTH", 1, "plc")
        check_seq(later.seen())
    assert birth.payload.metrics[0].long_value == bdseq + 1


def test_device_outage_ddeath_then_dbirth_with_current_values(
    mosquitto: Mosquitto, host: SparkplugHost, broker_factory: Callable[..., BrokerProcess],
) -> None:
    port = free_port()
    simulator = SimulatorProcess(port).start()
    try:
        broker_factory(gateway_config(mosquitto, port))
        host.wait_count("DBIRTH", 1, "plc")
        simulator.kill()
        host.wait_count("DDEATH", 1, "plc")
        simulator.start()
        births = host.wait_count("DBIRTH", 2, "plc")
    finally:
        simulator.kill()
    kinds = [s.kind for s in host.seen() if s.device == "plc" and s.kind != "DDATA"]
    assert kinds == ["DBIRTH", "DDEATH", "DBIRTH"]
    check_seq(host.seen())
    # tck-id-operational-behavior-data-publish-dbirth-values: a DBIRTH carries the current
    # values (those of the poll that brought the device back), not nulls followed by DDATA.
    for birth in births:
        metrics = {m.name: m for m in birth.payload.metrics}
        assert [name for name, m in metrics.items() if m.is_null] == []
        assert metrics["level"].int_value == initial_value(1, 0)
        assert metrics["setpoint"].int_value == initial_value(1, 1)
        assert metrics["temp"].double_value == initial_value(1, 3) / 10
        assert metrics["pump"].boolean_value is False


def test_reload_with_a_new_point_births_again(
    mosquitto: Mosquitto, sim: Simulator, host: SparkplugHost,
    broker_factory: Callable[..., BrokerProcess], tmp_path: Path,
) -> None:
    text = gateway_config(mosquitto, sim.port)
    gateway = broker_factory(text)
    host.wait_count("DBIRTH", 1, "plc")
    added = text.replace('  {{ name = "pump"'.replace("{{", "{"),
                         '  { name = "extra", address = 7 },\n  { name = "pump"')
    assert added != text
    (tmp_path / "broker0" / "outpost.toml").write_text(added, encoding="utf-8")
    gateway.process.send_signal(signal.SIGHUP)
    births = host.wait_count("DBIRTH", 2, "plc")
    assert "extra" in {m.name for m in births[-1].payload.metrics}
    assert len(host.of("NBIRTH")) == 2
    host.wait_value("plc", "extra", lambda v: v == 1007)
    check_seq(host.seen())


def test_data_held_while_primary_host_offline(
    mosquitto: Mosquitto, sim: Simulator, host: SparkplugHost,
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    gateway = broker_factory(gateway_config(mosquitto, sim.port, 'primary_host = "scada"'))
    wait_for(lambda: "sparkplug: edge node plant/gw1 connected" in gateway.log(), 15)
    assert host.of("NBIRTH") == []  # births wait for the primary host
    host.announce(True)
    host.wait_count("DBIRTH", 1, "plc")

    host.announce(False)
    wait_for(lambda: "primary host scada is offline" in gateway.log(), 15)
    # The local JSON topic shows the bridge read it; the node had to hold it.
    with PahoClient(gateway) as local:
        local.connect()
        local.subscribe("devices/plc/level", 1)
        sim.set_registers(1, "holding", 0, [5555])
        wait_for(lambda: any(b'"value":5555' in m.payload for m in local.messages), 15)
    assert not [v for v in host.values("plc") if v[1] == 5555]

    host.announce(True)
    held = host.wait_value("plc", "level", lambda v: v == 5555)
    assert held[2] is True  # delivered as historical data after the new births
    assert len(host.of("NBIRTH")) == 2
    check_seq(host.seen())


def test_held_data_survives_a_gateway_restart(
    mosquitto: Mosquitto, sim: Simulator, host: SparkplugHost,
    broker_factory: Callable[..., BrokerProcess], tmp_path: Path,
) -> None:
    text = gateway_config(mosquitto, sim.port, 'primary_host = "scada"')
    state = str(tmp_path / "state")
    host.announce(True)
    first = broker_factory(text, "--state-dir", state)
    host.wait_count("DBIRTH", 1, "plc")
    host.announce(False)
    wait_for(lambda: "primary host scada is offline" in first.log(), 15)
    with PahoClient(first) as local:
        local.connect()
        local.subscribe("devices/plc/level", 1)
        sim.set_registers(1, "holding", 0, [6666])
        wait_for(lambda: any(b'"value":6666' in m.payload for m in local.messages), 15)
    assert first.stop() == 0

    second = broker_factory(text, "--state-dir", state)
    wait_for(lambda: "1 value(s) held from before the restart" in second.log(), 15,
             message=second.log()[-2000:])
    host.announce(True)
    held = host.wait_value("plc", "level", lambda v: v == 6666)
    assert held[2] is True


def test_malformed_state_is_refused(
    mosquitto: Mosquitto, sim: Simulator, host: SparkplugHost,
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    gateway = broker_factory(gateway_config(mosquitto, sim.port, 'primary_host = "scada"'))
    wait_for(lambda: "sparkplug: edge node plant/gw1 connected" in gateway.log(), 15)
    host.publish("spBv1.0/STATE/scada", b"ONLINE", 1, retain=False)
    wait_for(lambda: "STATE of scada refused" in gateway.log(), 15)
    host.announce(True)
    host.wait_count("NBIRTH", 1)
