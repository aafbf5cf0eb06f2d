"""Aggregates as points: Sparkplug metrics and Home Assistant sensors, through `outpost run`.

pymodbus simulator -> `outpost run` (bridge, Sparkplug edge node, Home Assistant discovery)
-> mosquitto with a Sparkplug host application; the discovery configs are read on the gateway's
own broker and their templates rendered against the aggregates it publishes.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator

import jinja2
import pytest

from bench.bridge.simulator import Simulator
from tests.bridge.sparkplug.host import SparkplugHost
from tests.gateway.broker.e2e.helpers import PahoClient, wait_for
from tests.support.broker_proc import BrokerProcess
from tests.support.mosquitto import Mosquitto

logging.getLogger("pymodbus").setLevel(logging.CRITICAL)
DOUBLE = 10


@pytest.fixture
def sim() -> Iterator[Simulator]:
    simulator = Simulator([1], "tcp", size=20)
    simulator.start()
    yield simulator
    simulator.stop()


def gateway_config(mosquitto: Mosquitto, modbus_port: int) -> str:
    return f"""
gateway_id = "gw1"

[sparkplug]
enabled = true
group_id = "plant"
addresses = ["127.0.0.1:{mosquitto.port}"]
backoff_initial = 0.2

[homeassistant]
enabled = true

[bridge]
diagnostics_interval = 0

[[bridge.buses]]
name = "line"
type = "tcp"
host = "127.0.0.1"
port = {modbus_port}

[[bridge.devices]]
name = "plc"
bus = "line"
unit_id = 1
address_base = 0
poll_interval = 0.1
points = [
  {{ name = "level", address = 0, unit = "cm", aggregate = "2s" }},
  {{ name = "setpoint", address = 1 }},
]
"""


def test_aggregates_are_sparkplug_metrics_and_home_assistant_sensors(
    mosquitto: Mosquitto, sim: Simulator, host: SparkplugHost,
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    gateway = broker_factory(gateway_config(mosquitto, sim.port))
    dbirth = host.wait_count("DBIRTH", 1, "plc")[0]
    metrics = {m.name: m for m in dbirth.payload.metrics}
    assert set(metrics) == {"level", "setpoint", "level_mean_2s", "level_min_2s",
                            "level_max_2s"}
    assert metrics["level_mean_2s"].datatype == DOUBLE
    units = dict(zip(metrics["level_max_2s"].properties.keys,
                     metrics["level_max_2s"].properties.values, strict=True))
    assert units["engUnit"].string_value == "cm"
    sim.set_registers(1, "holding", 0, [250])
    # a whole window of 250: mean, min and max all 250, as DDATA of the device
    for name in ("level_mean_2s", "level_min_2s", "level_max_2s"):
        host.wait_value("plc", name, lambda v: v == 250.0)

    with PahoClient(gateway) as local:
        local.connect()
        local.subscribe("homeassistant/sensor/gw1/+/config", 1)
        local.subscribe("devices/plc/level/agg/2s", 1)
        configs = wait_for(lambda: {m.topic.split("/")[3]: json.loads(m.payload)
                                    for m in local.messages if m.topic.endswith("/config")
                                    and "_2s" in m.topic} or None,
                           message="the aggregates' discovery configs")
        window = json.loads(wait_for(lambda: next(
            (m.payload for m in local.messages if m.topic == "devices/plc/level/agg/2s"),
            None), message="a window of level"))
    assert sorted(configs) == ["plc_level_max_2s", "plc_level_mean_2s", "plc_level_min_2s"]
    mean = configs["plc_level_mean_2s"]
    assert (mean["state_topic"], mean["unit_of_measurement"], mean["state_class"]) == (
        "devices/plc/level/agg/2s", "cm", "measurement")
    for name, config in configs.items():
        rendered = jinja2.Template(config["value_template"]).render(value_json=window)
        assert float(rendered) == window[name.split("_")[2]]
