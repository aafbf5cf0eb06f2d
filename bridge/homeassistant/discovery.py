"""Home Assistant MQTT discovery: one retained config message per bridged point.

How this works: `discovery_messages` (pure) turns the bridge's configuration into
`homeassistant/<component>/<node_id>/<object_id>/config` -> JSON payload:

- a read-only number is a `sensor` (unit, `device_class` / `state_class` from the point), a
  read-only bool a `binary_sensor`, a read-only string or enum a `sensor` without unit;
- a writable bool (coil, bit) is a `switch`, a writable number a `number` (min / max from the
  point, else the range of its Modbus type after scale and offset), a writable enum a
  `select`; their command topic is the bridge's own write path `<prefix>/<device>/<point>/set`
  with the `{"value": ...}` body it expects, so Home Assistant writes exactly like any other
  MQTT client would (same validation, same access rules);
- every entity reads `<prefix>/<device>/<point>` with the template `value_json.value`, is
  available while the retained `<prefix>/<device>/status` says `online`, and belongs to a
  device per bridged device whose `via_device` is the gateway.

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
from bridge.homeassistant.config import HomeAssistantConfig
from bridge.modbus.config import DeviceConfig, PointConfig
from bridge.modbus.convert import FLOAT_TYPES
from bridge.serial.config import SerialDeviceConfig, SerialPointConfig
from gateway.broker.core.message import Message
from gateway.broker.engine.broker import Broker
from gateway.broker.engine.links import Link

CLIENT_ID = "outpost-homeassistant"
_INTEGER_RANGES = {"int16": (-(1 << 15), (1 << 15) - 1), "uint16": (0, (1 << 16) - 1),
                   "int32": (-(1 << 31), (1 << 31) - 1), "uint32": (0, (1 << 32) - 1),
                   "int64": (-(1 << 63), (1 << 63) - 1), "uint64": (0, (1 << 64) - 1)}
_FLOAT_RANGE = (-1e15, 1e15)
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
BOOL_STATE = "{{ 'ON' if value_json.value else 'OFF' }}"


def discovery_id(text: str) -> str:
    """`text` with every character Home Assistant does not take in an id replaced by `_`."""
    return _UNSAFE.sub("_", text)


def _number_range(point: PointConfig) -> tuple[float, float]:
    low, high = _INTEGER_RANGES.get(point.data_type, _FLOAT_RANGE)
    scaled = sorted((low * point.scale + point.offset, high * point.scale + point.offset))
    return (point.min if point.min is not None else scaled[0],
            point.max if point.max is not None else scaled[1])


def _modbus_entity(point: PointConfig) -> tuple[str, dict[str, Any]]:
    """The component and its own keys for one Modbus point."""
    kind = point.data_type
    if kind in ("bool", "bit"):
        if point.writable:
            return "switch", {"payload_on": '{"value": true}', "payload_off": '{"value": false}',
                              "state_on": "ON", "state_off": "OFF"}
        return "binary_sensor", {"payload_on": "ON", "payload_off": "OFF"}
    if point.enum is not None:
        if point.writable:
            return "select", {"options": sorted(point.enum.values()),
                              "command_template": '{"value": "{{ value }}"}'}
        return "sensor", {}
    if kind == "string":
        return "sensor", {}
    keys: dict[str, Any] = {} if point.unit is None else {"unit_of_measurement": point.unit}
    if point.writable:
        low, high = _number_range(point)
        integral = kind not in FLOAT_TYPES and point.scale == 1 and point.offset == 0
        keys |= {"min": low, "max": high, "step": 1 if integral else 0.001, "mode": "box",
                 "command_template": '{"value": {{ value }}}'}
    return ("number" if point.writable else "sensor"), keys


def _serial_entity(point: SerialPointConfig) -> tuple[str, dict[str, Any]]:
    """The component and its own keys for one serial point (always read-only)."""
    if point.type == "bool":
        return "binary_sensor", {"payload_on": "ON", "payload_off": "OFF"}
    if point.type == "string" or point.unit is None:
        return "sensor", {}
    return "sensor", {"unit_of_measurement": point.unit}


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
    devices: list[DeviceConfig | SerialDeviceConfig] = [*bridge.devices, *bridge.serial]
    for device in devices:
        info = config.device(device.name)
        if isinstance(device, DeviceConfig):
            model = info.model or device.description or f"Modbus unit {device.unit_id}"
        else:
            model = info.model or f"serial device on {device.device}"
        ha_device = {"identifiers": [f"{node}_{discovery_id(device.name)}"],
                     "name": device.name, "manufacturer": info.manufacturer or "unknown",
                     "model": model, "via_device": node}
        status = f"{bridge.prefix}/{device.name}/status"
        for point in device.points:
            topic = f"{bridge.prefix}/{device.name}/{point.name}"
            if isinstance(point, PointConfig):
                component, keys = _modbus_entity(point)
                classes = (point.device_class, point.state_class)
            else:  # serial points are read-only values
                component, keys = _serial_entity(point)
                classes = (None, None)
            object_id = discovery_id(f"{device.name}_{point.name}")
            entity = _entity(component, keys, topic, status, *classes)
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
