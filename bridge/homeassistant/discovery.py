"""Home Assistant MQTT discovery: one retained config message per bridged point.

How this works: `discovery_messages` (pure) turns the bridge's configuration into
`homeassistant/<component>/<node_id>/<object_id>/config` -> JSON payload:

- a read-only number is a `sensor` (unit, `device_class` / `state_class` from the point), a
  read-only bool a `binary_sensor`, a read-only string or enum a `sensor` without unit;
- a writable bool (coil, bit) is a `switch`, a writable number a `number` (min / max from the
  point, else the range of its type after scale and offset), a writable enum a `select`;
  their command topic is the bridge's own write path `<prefix>/<device>/<point>/set` with the
  `{"value": ...}` body it expects, so Home Assistant writes exactly like any other MQTT client
  would (same validation, same access rules);
- every entity reads `<prefix>/<device>/<point>` with the template `value_json.value`, is
  available while the retained `<prefix>/<device>/status` says `online`, and belongs to a
  device per bridged device whose `via_device` is the gateway.

Entities come from each device's family-neutral description (bridge/driver.py `PointInfo`),
so Modbus, serial and OPC UA points are discovered alike.

`HomeAssistantDiscovery` publishes them retained through an in-process link. At start it
first reads the retained configs already under its node id (a previous run's) and clears the
ones this configuration no longer has; a reload (SIGHUP) publishes what changed and clears,
with an empty retained message, the configs of removed points.
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

from bridge.config import BridgeConfig
from bridge.driver import PointInfo
from bridge.homeassistant.config import HomeAssistantConfig
from gateway.broker.core.message import Message
from gateway.broker.engine.broker import Broker
from gateway.broker.engine.links import Link

CLIENT_ID = "outpost-homeassistant"
_FLOAT_RANGE = (-1e15, 1e15)  # a writable number without bounds
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
BOOL_STATE = "{{ 'ON' if value_json.value else 'OFF' }}"


def discovery_id(text: str) -> str:
    """`text` with every character Home Assistant does not take in an id replaced by `_`."""
    return _UNSAFE.sub("_", text)


def _point_entity(point: PointInfo) -> tuple[str, dict[str, Any]]:
    """The component and its own keys for one point."""
    if point.datatype == "bool":
        if point.writable:
            return "switch", {"payload_on": '{"value": true}', "payload_off": '{"value": false}',
                              "state_on": "ON", "state_off": "OFF"}
        return "binary_sensor", {"payload_on": "ON", "payload_off": "OFF"}
    if point.options is not None:
        if point.writable:
            return "select", {"options": list(point.options),
                              "command_template": '{"value": "{{ value }}"}'}
        return "sensor", {}
    if point.datatype in ("string", "datetime", "json"):
        return "sensor", {}
    keys: dict[str, Any] = {} if point.unit is None else {"unit_of_measurement": point.unit}
    if point.writable:
        low = _FLOAT_RANGE[0] if point.minimum is None else point.minimum
        high = _FLOAT_RANGE[1] if point.maximum is None else point.maximum
        keys |= {"min": low, "max": high, "step": 1 if point.integral else 0.001, "mode": "box",
                 "command_template": '{"value": {{ value }}}'}
    return ("number" if point.writable else "sensor"), keys


def _entity(component: str, keys: dict[str, Any], point_topic: str, device_status: str,
            device_class: str | None, state_class: str | None) -> dict[str, Any]:
    entity: dict[str, Any] = {
        "state_topic": point_topic,
        "value_template": BOOL_STATE if component in ("switch", "binary_sensor")
        else "{{ value_json.value }}",
        "availability_topic": device_status,
        "payload_available": "online",
        "payload_not_available": "offline",
        **keys,
    }
    if component in ("number", "switch", "select"):
        entity["command_topic"] = point_topic + "/set"
    if device_class is not None:
        entity["device_class"] = device_class
    if state_class is not None and component == "sensor":
        entity["state_class"] = state_class
    return entity


def discovery_messages(bridge: BridgeConfig, config: HomeAssistantConfig,
                       gateway_id: str) -> dict[str, bytes]:
    """Discovery topic -> retained JSON config, for every bridged point."""
    node = config.node_id or discovery_id(gateway_id)
    messages: dict[str, bytes] = {}
    for device in bridge.device_configs():
        info = config.device(device.name)
        description = device.describe()
        model = info.model or description.model
        ha_device = {"identifiers": [f"{node}_{discovery_id(device.name)}"],
                     "name": device.name, "manufacturer": info.manufacturer or "unknown",
                     "model": model, "via_device": node}
        status = f"{bridge.prefix}/{device.name}/status"
        for point in description.points:
            topic = f"{bridge.prefix}/{device.name}/{point.name}"
            component, keys = _point_entity(point)
            object_id = discovery_id(f"{device.name}_{point.name}")
            entity = _entity(component, keys, topic, status, point.device_class,
                             point.state_class)
            entity = {"name": point.name, "unique_id": f"{node}_{object_id}",
                      "device": ha_device, **entity, "qos": 1}
            messages[f"{config.discovery_prefix}/{component}/{node}/{object_id}/config"] = (
                json.dumps(entity, separators=(",", ":")).encode())
    return messages


class HomeAssistantDiscovery:
    """Keeps the retained discovery configs on the broker in step with the bridge."""

    def __init__(self, config: HomeAssistantConfig, gateway_id: str, broker: Broker) -> None:
        self.config = config
        self.gateway_id = gateway_id
        self.broker = broker
        self.node = config.node_id or discovery_id(gateway_id)
        self.published: dict[str, bytes] = {}
        self._found: set[str] = set()

    def start(self, bridge: BridgeConfig) -> None:
        """Publish every config and clear the stale ones a previous run left."""
        loop = asyncio.get_running_loop()
        self.link = Link(self.broker, CLIENT_ID, loop.time, self._on_retained)
        mine = f"{self.config.discovery_prefix}/+/{self.node}/+/config"
        self.link.subscribe(mine, qos=0)  # the broker hands over the retained ones now
        self.link.unsubscribe(mine)
        self._apply(discovery_messages(bridge, self.config, self.gateway_id), self._found)

    def reload(self, bridge: BridgeConfig) -> None:
        """The bridge's devices or points changed: publish the difference."""
        self._apply(discovery_messages(bridge, self.config, self.gateway_id),
                    set(self.published))

    async def stop(self) -> None:
        """Detach (the configs stay retained: the entities come back with the gateway)."""
        self.link.close()

    def _on_retained(self, message: Message, qos: int, retain: bool) -> None:
        if retain and message.payload:
            self._found.add(message.topic)

    def _apply(self, messages: dict[str, bytes], previous: set[str]) -> None:
        for topic in sorted(previous - set(messages)):
            self.link.publish(topic, b"", 1, True)  # Home Assistant removes the entity
        for topic, payload in messages.items():
            if self.published.get(topic) != payload:
                self.link.publish(topic, payload, 1, True)
        self.published = messages
