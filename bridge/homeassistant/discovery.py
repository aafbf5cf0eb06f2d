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
- every entity reads `<prefix>/<device>/<point>` with the template `value_json.value` (a
  switch or binary sensor renders `None` for a null value: Home Assistant's "unknown", not
  "off"), is available while the retained `<prefix>/<device>/status` says `online`, and
  belongs to a device per bridged device whose `via_device` is the gateway, itself announced
  as a device with its own entities (gateway.py).

`HomeAssistantDiscovery` publishes them retained through an in-process link, and the
retained gateway state on `$SYS/outpost/gateway`. At start it first reads the retained configs
already under its node id (a previous run's); a reload (SIGHUP) publishes what changed.

Removing an entity: an empty retained config makes Home Assistant delete it, but only a Home
Assistant that is subscribed at that moment: an empty retained message deletes the retained
one and is not delivered to a later subscriber. So a removed config (a point gone at a reload,
or one a previous run left) is cleared at once only while a client is connected whose
subscription matches its topic (the broker's subscription table says so: that client receives
the clearing now). Otherwise the config is replaced by a retained *tombstone*: the same entity
with an availability that always says offline, so a Home Assistant connecting later shows it
unavailable instead of live-looking; at Home Assistant's next birth message (`online` on
`status_topic`, `homeassistant/status` by default, not retained) every tombstone is cleared:
Home Assistant publishes its birth after its discovery subscriptions are in place, so it
receives the clearing and deletes the entity.
Tombstones are retained configs under the node id like any other, so a restart of the
gateway finds them again and keeps clearing them at the next birth.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from typing import Any

from bridge.config import BridgeConfig
from bridge.homeassistant.config import HomeAssistantConfig
from bridge.homeassistant.gateway import (
    GATEWAY_TOPIC,
    GatewayInfo,
    gateway_entities,
    gateway_state,
)
from bridge.modbus.config import DeviceConfig, PointConfig
from bridge.modbus.convert import FLOAT_TYPES
from bridge.serial.config import SerialDeviceConfig, SerialPointConfig
from gateway.broker.core.message import Message
from gateway.broker.engine.broker import Broker
from gateway.broker.engine.links import Link

log = logging.getLogger("outpost.homeassistant")
CLIENT_ID = "outpost-homeassistant"
_INTEGER_RANGES = {"int16": (-(1 << 15), (1 << 15) - 1), "uint16": (0, (1 << 16) - 1),
                   "int32": (-(1 << 31), (1 << 31) - 1), "uint32": (0, (1 << 32) - 1),
                   "int64": (-(1 << 63), (1 << 63) - 1), "uint64": (0, (1 << 64) - 1)}
_FLOAT_RANGE = (-1e15, 1e15)
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
# "None" is Home Assistant's payload for "unknown" (switch and binary_sensor): a null value
# (quality bad) must not read as "off".
BOOL_STATE = ("{{ 'None' if value_json.value is none else "
              "('ON' if value_json.value else 'OFF') }}")
# What a tombstone's availability renders: the entity shows unavailable.
REMOVED_AVAILABILITY = "{{ 'offline' }}"


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


def _encode(entity: dict[str, Any]) -> bytes:
    return json.dumps(entity, separators=(",", ":")).encode()


def tombstone(payload: bytes) -> bytes:
    """A removed entity's config that Home Assistant shows as unavailable (b"" when the
    payload is not a config we can read: that is cleared outright)."""
    try:
        entity = json.loads(payload)
    except ValueError:
        return b""
    if not isinstance(entity, dict):
        return b""
    entity.pop("availability", None)
    entity.update({"availability_topic": GATEWAY_TOPIC, "payload_available": "online",
                   "payload_not_available": "offline",
                   "availability_template": REMOVED_AVAILABILITY})
    return _encode(entity)


def discovery_messages(bridge: BridgeConfig, config: HomeAssistantConfig, gateway_id: str,
                       gateway: GatewayInfo | None = None) -> dict[str, bytes]:
    """Discovery topic -> retained JSON config, for the gateway and every bridged point."""
    node = config.node_id or discovery_id(gateway_id)
    messages = {f"{config.discovery_prefix}/{component}/{node}/{object_id}/config":
                _encode(entity) for object_id, (component, entity) in
                gateway_entities(node, gateway_id, gateway or GatewayInfo()).items()}
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
                label = point.label or point.name
            else:  # serial points are read-only values
                component, keys = _serial_entity(point)
                classes = (None, None)
                label = point.name
            object_id = discovery_id(f"{device.name}_{point.name}")
            entity = _entity(component, keys, topic, status, *classes)
            entity = {"name": label, "unique_id": f"{node}_{object_id}",
                      "device": ha_device, **entity, "qos": 1}
            messages[f"{config.discovery_prefix}/{component}/{node}/{object_id}/config"] = (
                _encode(entity))
    return messages


class HomeAssistantDiscovery:
    """Keeps the retained discovery configs on the broker in step with the bridge."""

    def __init__(self, config: HomeAssistantConfig, gateway_id: str, broker: Broker,
                 gateway: GatewayInfo | None = None) -> None:
        self.config = config
        self.gateway_id = gateway_id
        self.gateway = gateway or GatewayInfo()
        self.broker = broker
        self.node = config.node_id or discovery_id(gateway_id)
        self.status_topic = config.status_topic or f"{config.discovery_prefix}/status"
        self.published: dict[str, bytes] = {}
        self.found: dict[str, bytes] = {}  # retained configs under the node id at start
        self.removing: set[str] = set()  # tombstones to clear at Home Assistant's next birth

    def start(self, bridge: BridgeConfig) -> None:
        """Publish the gateway state and every config; deal with what a previous run left."""
        loop = asyncio.get_running_loop()
        self.link = Link(self.broker, CLIENT_ID, loop.time, self._on_message)
        mine = f"{self.config.discovery_prefix}/+/{self.node}/+/config"
        self.link.subscribe(mine, qos=0)  # the broker hands over the retained ones now
        self.link.unsubscribe(mine)
        self.link.subscribe(self.status_topic, qos=1)
        self.link.publish(GATEWAY_TOPIC, gateway_state(self.gateway, self.gateway_id, True),
                          1, True)
        self.published = dict(self.found)  # what is retained now
        self._apply(self._messages(bridge), self.found)

    def reload(self, bridge: BridgeConfig) -> None:
        """The bridge's devices or points changed: publish the difference."""
        self._apply(self._messages(bridge), self.published)

    async def stop(self) -> None:
        """The gateway state says offline; detach (the configs stay retained: the entities
        come back with the gateway)."""
        self.link.publish(GATEWAY_TOPIC, gateway_state(self.gateway, self.gateway_id, False),
                          1, True)
        self.link.close()

    def _messages(self, bridge: BridgeConfig) -> dict[str, bytes]:
        return discovery_messages(bridge, self.config, self.gateway_id, self.gateway)

    def _on_message(self, message: Message, qos: int, retain: bool) -> None:
        if message.topic == self.status_topic:
            if not retain:  # a retained birth says nothing about who is connected now
                self._home_assistant(message.payload == b"online")
        elif retain and message.payload:
            self.found[message.topic] = message.payload

    def _home_assistant(self, online: bool) -> None:
        clearing = online and bool(self.removing)
        log.info("homeassistant: Home Assistant is %s%s", "online" if online else "offline",
                 f": clearing {len(self.removing)} removed entit(y/ies)" if clearing else "")
        if clearing:
            for topic in sorted(self.removing):
                self.link.publish(topic, b"", 1, True)
            self.removing.clear()

    def _apply(self, messages: dict[str, bytes], previous: dict[str, bytes]) -> None:
        removed = sorted(set(previous) - set(messages))
        waiting = len(self.removing)
        for topic in removed:
            self._remove(topic, previous[topic])
        if removed:
            log.info("homeassistant: %d entit(y/ies) removed: %d cleared, %d shown unavailable "
                     "until Home Assistant's next birth message", len(removed),
                     len(removed) - (len(self.removing) - waiting), len(self.removing) - waiting)
        for topic, payload in messages.items():
            self.removing.discard(topic)
            if self.published.get(topic) != payload:
                self.link.publish(topic, payload, 1, True)
        self.published = messages

    def _watched(self, topic: str) -> bool:
        """Is a client connected now whose subscription matches `topic`?"""
        targets, _ = self.broker.table.match(topic)
        sessions = self.broker.sessions
        return any(target.client_id != CLIENT_ID
                   and (session := sessions.get(target.client_id)) is not None
                   and session.online for target in targets)

    def _remove(self, topic: str, payload: bytes) -> None:
        if self._watched(topic):
            self.link.publish(topic, b"", 1, True)  # Home Assistant removes the entity
            return
        dead = tombstone(payload)
        if dead != payload:
            self.link.publish(topic, dead, 1, True)
        if dead:
            self.removing.add(topic)
