"""pymodbus simulator -> `outpost run` (bridge, an alarm, the Sparkplug edge node) ->
mosquitto -> a host application: the alarm's node metrics are born in the NBIRTH and follow
its state in NDATA (raised, acknowledged over MQTT, cleared), seq counting on."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator

import pytest

from bench.bridge.simulator import Simulator
from tests.bridge.sparkplug.host import SparkplugHost
from tests.gateway.broker.e2e.helpers import PahoClient, wait_for
from tests.support.broker_proc import BrokerProcess
from tests.support.mosquitto import Mosquitto

logging.getLogger("pymodbus").setLevel(logging.CRITICAL)


@pytest.fixture
def sim() -> Iterator[Simulator]:
    simulator = Simulator([1], "tcp", size=4)
    simulator.start()
    simulator.set_registers(1, "holding", 0, [20])
    yield simulator
    simulator.stop()


def config(mosquitto: Mosquitto, modbus: int) -> str:
    return f"""
gateway_id = "gw1"
[sparkplug]
enabled = true
group_id = "plant"
addresses = ["127.0.0.1:{mosquitto.port}"]
backoff_initial = 0.2
[bridge]
diagnostics_interval = 0
[[bridge.buses]]
name = "line"
type = "tcp"
host = "127.0.0.1"
port = {modbus}
[[bridge.devices]]
name = "tank"
bus = "line"
unit_id = 1
address_base = 0
poll_interval = 0.1
points = [{{ name = "level", address = 0 }}]
[[alarms.rules]]
name = "overfill"
point = "tank/level"
kind = "high"
limit = 50
"""


def node_values(host: SparkplugHost) -> list[dict[str, object]]:
    """The alarm metrics of every NBIRTH and NDATA, in order."""
    out = []
    for seen in host.seen():
        if seen.kind in ("NBIRTH", "NDATA"):
            metrics = {m.name: (m.boolean_value if m.datatype == 11 else m.string_value)
                       for m in seen.payload.metrics if m.name.startswith("Alarms/")}
            if metrics:
                out.append({"kind": seen.kind, **metrics})
    return out


def test_alarm_metrics_are_born_and_follow_the_state(
        mosquitto: Mosquitto, sim: Simulator, host: SparkplugHost,
        broker_factory: Callable[..., BrokerProcess]) -> None:
    gateway = broker_factory(config(mosquitto, sim.port))
    birth = host.wait_count("NBIRTH", 1)[0]
    born = {m.name: m for m in birth.payload.metrics}
    assert born["Alarms/overfill/Active"].datatype == 11
    assert born["Alarms/overfill/Active"].boolean_value is False
    assert born["Alarms/overfill/State"].string_value == "normal"
    sim.set_registers(1, "holding", 0, [80])
    wait_for(lambda: any(v.get("Alarms/overfill/State") == "active_unacked"
                         for v in node_values(host)), 15, message="NDATA of the raise")
    client = PahoClient(gateway)
    client.connect()
    client.publish("alarms/overfill/ack", b"", 1)
    sim.set_registers(1, "holding", 0, [10])
    wait_for(lambda: node_values(host)[-1].get("Alarms/overfill/State") == "normal", 15,
             message="NDATA of the clear")
    client.disconnect()
    states = [(v["Alarms/overfill/State"], v["Alarms/overfill/Active"],
               v["Alarms/overfill/Acked"]) for v in node_values(host) if v["kind"] == "NDATA"]
    assert states == [("active_unacked", True, False), ("active_acked", True, True),
                      ("normal", False, True)]
    ndata = [s.payload.seq for s in host.seen() if s.kind == "NDATA"]
    assert all(seq > 0 for seq in ndata)
