"""pymodbus simulator -> `outpost run` with Home Assistant discovery -> an MQTT client playing
Home Assistant: it reads the retained discovery configs, checks the keys Home Assistant
documents as required per component, finds the gateway device every device is connected via,
sends commands the way Home Assistant renders them, and sees removed points reach it: cleared
at once while it is online (its birth message seen), shown unavailable (a tombstone) to a Home
Assistant that connects later and cleared at its birth.
"""

from __future__ import annotations

import logging
import signal
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from bench.bridge.simulator import Simulator
from outpost.config import ConfigError, parse_config
from tests.bridge.homeassistant.ha import (
    GATEWAY_ENTITIES,
    available,
    home_assistant,
    retained_configs,
    state,
)
from tests.gateway.broker.e2e.helpers import PahoClient, wait_for
from tests.support.broker_proc import BrokerProcess

logging.getLogger("pymodbus").setLevel(logging.CRITICAL)

# What the Home Assistant MQTT docs mark "Required" per component (integrations/<c>.mqtt),
# plus what device discovery needs: a unique_id and a device with identifiers.
REQUIRED = {
    "sensor": {"state_topic"},
    "binary_sensor": {"state_topic"},
    "number": {"command_topic"},
    "switch": {"command_topic"},
    "select": {"command_topic", "options"},
}
COMMON = {"unique_id", "device", "state_topic", "value_template", "availability_topic"}
POINTS = """
  { name = "power", address = 0, scale = 0.1, unit = "kW", device_class = "power",\
    state_class = "measurement" },
  { name = "setpoint", address = 1, writable = true, min = 0, max = 5000 },
  { name = "mode", address = 2, enum = { 0 = "off", 1 = "auto" }, writable = true },
  { name = "relay", table = "coil", address = 5, writable = true },
  { name = "alarm", table = "discrete", address = 9 },
"""


def config(sim_port: int, points: str = POINTS) -> str:
    return f"""
gateway_id = "gw-7"

[homeassistant]
enabled = true

[[homeassistant.devices]]
name = "meter"
manufacturer = "Eastron"
model = "SDM630"

[bridge]
diagnostics_interval = 0

[[bridge.buses]]
name = "line"
type = "tcp"
host = "127.0.0.1"
port = {sim_port}
timeout = 0.5

[[bridge.devices]]
name = "meter"
bus = "line"
unit_id = 1
address_base = 0
poll_interval = 0.1
points = [
{points}
]
"""


@pytest.fixture
def sim() -> Iterator[Simulator]:
    simulator = Simulator([1], "tcp", size=20)
    simulator.start()
    yield simulator
    simulator.stop()


def test_every_point_is_discovered_with_the_required_keys(
    sim: Simulator, broker_factory: Callable[..., BrokerProcess],
) -> None:
    with home_assistant(broker_factory(config(sim.port)), 5 + GATEWAY_ENTITIES) as (ha, configs):
        ha.subscribe("$SYS/outpost/gateway", 1)
        gateway_state = wait_for(lambda: next((m.payload for m in ha.messages
                                               if m.topic == "$SYS/outpost/gateway"), None), 15)
    components = {topic.split("/")[1] + ":" + topic.split("/")[3] for topic in configs}
    assert components == {"sensor:meter_power", "number:meter_setpoint", "select:meter_mode",
                          "switch:meter_relay", "binary_sensor:meter_alarm",
                          "binary_sensor:gateway-status", "sensor:gateway-version"}
    # The device every entity is "connected via" is announced itself.
    status = configs["homeassistant/binary_sensor/gw-7/gateway-status/config"]
    assert status["device"]["identifiers"] == ["gw-7"]
    assert state("binary_sensor", status, gateway_state) == "on"
    bridged = {topic: entity for topic, entity in configs.items() if "gateway-" not in topic}
    for topic, entity in bridged.items():
        component = topic.split("/")[1]
        assert topic.split("/")[2] == "gw-7"
        missing = (REQUIRED[component] | COMMON) - set(entity)
        assert not missing, (topic, missing)
        assert entity["availability_topic"] == "devices/meter/status"
        assert entity["device"]["identifiers"] == ["gw-7_meter"]
        assert entity["device"]["via_device"] == "gw-7"
        assert entity["device"]["manufacturer"] == "Eastron"
        assert entity["device"]["model"] == "SDM630"
    power = configs["homeassistant/sensor/gw-7/meter_power/config"]
    assert power["unit_of_measurement"] == "kW"
    assert power["device_class"] == "power"
    assert power["state_class"] == "measurement"
    assert power["state_topic"] == "devices/meter/power"
    assert power["value_template"] == "{{ value_json.value }}"
    setpoint = configs["homeassistant/number/gw-7/meter_setpoint/config"]
    assert (setpoint["min"], setpoint["max"]) == (0, 5000)
    assert configs["homeassistant/select/gw-7/meter_mode/config"]["options"] == ["auto", "off"]


def test_commands_write_through_the_bridge(
    sim: Simulator, broker_factory: Callable[..., BrokerProcess],
) -> None:
    gateway = broker_factory(config(sim.port))
    with home_assistant(gateway, 5 + GATEWAY_ENTITIES) as (ha, configs):
        number = configs["homeassistant/number/gw-7/meter_setpoint/config"]
        ha.publish(number["command_topic"],
                   number["command_template"].replace("{{ value }}", "1234").encode(), 1)
        wait_for(lambda: sim.registers(1, "holding")[1] == 1234, 15,
                 message="the number command did not reach the simulator")
        switch = configs["homeassistant/switch/gw-7/meter_relay/config"]
        ha.publish(switch["command_topic"], switch["payload_on"].encode(), 1)
        wait_for(lambda: sim.get_bit(1, "coil", 5), 15, message="the switch did not turn on")
        select = configs["homeassistant/select/gw-7/meter_mode/config"]
        ha.publish(select["command_topic"],
                   select["command_template"].replace("{{ value }}", "auto").encode(), 1)
        wait_for(lambda: sim.registers(1, "holding")[2] == 1, 15,
                 message="the select command did not reach the simulator")


def without(*names: str) -> str:
    return "\n".join(line for line in POINTS.splitlines()
                     if not any(f'"{name}"' in line for name in names))


def birth(ha: PahoClient, gateway: BrokerProcess) -> None:
    """Home Assistant's birth message, as it sends it once its discovery subscriptions are
    in place (not retained), seen by the gateway."""
    seen = gateway.log().count("Home Assistant is online")
    ha.publish("homeassistant/status", b"online", 1)
    wait_for(lambda: gateway.log().count("Home Assistant is online") > seen, 15,
             message="the gateway did not see Home Assistant's birth")


def test_removed_points_reach_home_assistant_after_a_reload(
    sim: Simulator, broker_factory: Callable[..., BrokerProcess], tmp_path: Path,
) -> None:
    gateway = broker_factory(config(sim.port))
    config_file = tmp_path / "broker0" / "outpost.toml"
    alarm = "homeassistant/binary_sensor/gw-7/meter_alarm/config"
    relay = "homeassistant/switch/gw-7/meter_relay/config"
    with home_assistant(gateway, 5 + GATEWAY_ENTITIES):
        pass
    # Nobody subscribed: the removed point stays, unavailable, until Home Assistant's birth.
    config_file.write_text(config(sim.port, without("alarm")), encoding="utf-8")
    gateway.process.send_signal(signal.SIGHUP)
    wait_for(lambda: "1 shown unavailable until Home Assistant's next birth" in gateway.log(),
             15, message="the removal was not applied")
    with home_assistant(gateway, 5 + GATEWAY_ENTITIES) as (ha, configs):
        assert available(configs[alarm], b"online") is False
        birth(ha, gateway)
        wait_for(lambda: retained_configs(ha).get(alarm, "") is None, 15,
                 message="the tombstone was not cleared at Home Assistant's birth")
        # Home Assistant is subscribed now: a removal is cleared at once.
        config_file.write_text(config(sim.port, without("alarm", "relay")), encoding="utf-8")
        gateway.process.send_signal(signal.SIGHUP)
        wait_for(lambda: retained_configs(ha).get(relay, "") is None, 15,
                 message="the removed point's config was not cleared")
    with home_assistant(gateway, 3 + GATEWAY_ENTITIES) as (_, configs):  # the clear is retained
        assert alarm not in configs and relay not in configs


def test_points_removed_while_stopped_reach_a_home_assistant_that_connects_later(
    sim: Simulator, broker_factory: Callable[..., BrokerProcess], tmp_path: Path,
) -> None:
    state_dir = tmp_path / "state"
    first = broker_factory(config(sim.port), "--state-dir", str(state_dir))
    with home_assistant(first, 5 + GATEWAY_ENTITIES):
        pass
    first.stop()
    second = broker_factory(config(sim.port, without("alarm")), "--state-dir", str(state_dir))
    alarm = "homeassistant/binary_sensor/gw-7/meter_alarm/config"
    with home_assistant(second, 5 + GATEWAY_ENTITIES) as (ha, configs):
        assert available(configs[alarm], b"online") is False  # shown unavailable, not live
        birth(ha, second)
        wait_for(lambda: retained_configs(ha).get(alarm, "") is None, 15,
                 message="the removed point's config was not cleared at the birth")
    with home_assistant(second, 4 + GATEWAY_ENTITIES) as (_, configs):
        assert alarm not in configs


def test_unknown_device_in_homeassistant_devices_is_refused() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config({"homeassistant": {"enabled": True, "devices": [{"name": "metre"}]},
                      "bridge": {"buses": [{"name": "b", "type": "tcp", "host": "h"}],
                                 "devices": [{"name": "meter", "bus": "b", "unit_id": 1,
                                              "address_base": 0}]}})
    assert any(line.startswith("homeassistant:") and
               "devices.0.name: 'metre' is not a bridged device" in line
               for line in caught.value.errors), caught.value.errors
