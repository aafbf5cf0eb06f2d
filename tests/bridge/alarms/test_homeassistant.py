"""Home Assistant's view of the alarms: discovery configs beside the points', the problem
sensor rendered from the retained state as Home Assistant renders it, and the acknowledge
button's press taken by the alarm service (one in-process broker)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from bridge.alarms.config import AlarmsConfig
from bridge.alarms.journal import MemoryJournal
from bridge.alarms.service import AlarmService
from bridge.homeassistant.config import HomeAssistantConfig
from bridge.homeassistant.discovery import HomeAssistantDiscovery
from gateway.broker.core.message import Message
from gateway.broker.engine.broker import Broker
from gateway.broker.engine.links import Link
from outpost.config import parse_config
from storage.memory import MemoryStore
from tests.bridge.homeassistant.ha import render

CONFIG = parse_config({
    "gateway_id": "gw-1",
    "bridge": {"buses": [{"name": "b", "type": "tcp", "host": "127.0.0.1", "port": 5020}],
               "devices": [{"name": "pump", "bus": "b", "unit_id": 1, "address_base": 0,
                            "points": [{"name": "amps", "address": 0}]}]},
    "alarms": {"rules": [{"name": "over.current", "point": "pump/amps", "kind": "high",
                          "limit": 10, "severity": "critical"},
                         {"name": "pump-down", "point": "pump", "kind": "offline"}]}})


def test_alarm_entities_follow_the_state_and_acknowledge() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        broker = Broker(CONFIG, MemoryStore(), now=loop.time())
        retained: dict[str, bytes] = {}

        def got(message: Message, qos: int, retain: bool) -> None:
            retained[message.topic] = message.payload

        ha = Link(broker, "ha", loop.time, got)
        ha.subscribe("homeassistant/#", 1, no_local=False)
        ha.subscribe("alarms/+/state", 1, no_local=False)
        service = AlarmService(CONFIG.alarms, "devices", broker, MemoryJournal())
        service.start()
        discovery = HomeAssistantDiscovery(HomeAssistantConfig(enabled=True), "gw-1", broker,
                                           alarms=CONFIG.alarms)
        discovery.start(CONFIG.bridge)
        sensor: dict[str, Any] = json.loads(
            retained["homeassistant/binary_sensor/gw-1/alarm-over_current/config"])
        button: dict[str, Any] = json.loads(
            retained["homeassistant/button/gw-1/alarm-over_current-ack/config"])
        assert "homeassistant/binary_sensor/gw-1/alarm-pump-down/config" in retained
        assert "homeassistant/sensor/gw-1/pump_amps/config" in retained  # the point's too
        assert sensor["device_class"] == "problem"
        assert sensor["device"] == {"identifiers": ["gw-1_pump"]}

        def shown() -> str:
            return render(sensor["value_template"], retained[sensor["state_topic"]])

        assert shown() == "OFF"
        service.point("devices/pump/amps", b'{"value":12.5,"ts":1,"quality":"good"}')
        assert shown() == "ON"
        attributes = json.loads(retained[sensor["json_attributes_topic"]])
        assert (attributes["state"], attributes["severity"]) == ("active_unacked", "critical")
        ha.publish(button["command_topic"], button["payload_press"].encode(), 1)
        assert json.loads(retained[sensor["state_topic"]])["state"] == "active_acked"
        assert service.journal.recent(1)[0].user == "homeassistant"

        topic = "homeassistant/binary_sensor/gw-1/alarm-over_current/config"
        before = retained[topic]
        discovery.reload_alarms(AlarmsConfig())  # removed: cleared or shown unavailable
        assert retained.get(topic, b"") != before
        await discovery.stop()
        await service.stop()

    asyncio.run(main())
