"""Home Assistant MQTT discovery: one retained config message per bridged point.

How this works: `discovery_messages` (pure) turns the bridge's configuration into
`homeassistant/<component>/<node_id>/<object_id>/config` -> JSON payload:

- a read-only number is a `sensor` (unit, `device_class` / `state_class` from the point), a
  read-only bool a `binary_sensor`, a read-only string or enum a `sensor` without unit;
- a writable bool (coil, bit) is a `switch`, a writable number a `number` (min / max from the
  point, else the range of its type after scale and offset), a writable enum a
  `select`; their command topic is the bridge's own write path `<prefix>/<device>/<point>/set`
  with the `{"value": ...}` body it expects, so Home Assistant writes exactly like any other
  MQTT client would (same validation, same access rules);
- every entity reads `<prefix>/<device>/<point>` with the template `value_json.value` (a
  switch or binary sensor renders `None` for a null value: Home Assistant's "unknown", not
  "off"), is available while the retained `<prefix>/<device>/status` says `online`, and
  belongs to a device per bridged device whose `via_device` is the gateway, itself announced
  as a device with its own entities (gateway.py).

A point that sends aggregates (bridge/aggregate) adds sensors `<point>_mean_<window>`,
`_min_` and `_max_` reading its window topic `<prefix>/<device>/<point>/agg/<window>`.

Each alarm of `[alarms]` adds a `problem` binary sensor and an acknowledge button
(bridge/alarms/homeassistant.py).

Entities come from each device's family-neutral description (bridge/driver.py `PointInfo`),
so Modbus, serial and OPC UA points are discovered alike.

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

from bridge.aggregate.points import home_assistant_sensors
from bridge.alarms.config import AlarmsConfig
from bridge.alarms.homeassistant import alarm_discovery
from bridge.config import BridgeConfig
from bridge.driver import PointInfo
from bridge.homeassistant.config import HomeAssistantConfig
from bridge.homeassistant.gateway import (
    GATEWAY_TOPIC,
    GatewayInfo,
    gateway_entities,
    gateway_state,
)
from gateway.broker.core.message import Message
from gateway.broker.engine.broker import Broker
from gateway.broker.engine.links import Link

log = logging.getLogger("outpost.homeassistant")
CLIENT_ID = "outpost-homeassistant"
_FLOAT_RANGE = (-1e15, 1e15)  # a writable number without bounds
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
            entity = {"name": point.label or point.name, "unique_id": f"{node}_{object_id}",
                      "device": ha_device, **entity, "qos": 1}
            messages[f"{config.discovery_prefix}/{component}/{node}/{object_id}/config"] = (
                _encode(entity))
        for name, topic, template, unit in home_assistant_sensors(bridge, device.name):
            object_id = discovery_id(f"{device.name}_{name}")
            entity = {"name": name, "unique_id": f"{node}_{object_id}", "device": ha_device,
                      "state_topic": topic, "value_template": template,
                      "availability_topic": status, "payload_available": "online",
                      "payload_not_available": "offline", "state_class": "measurement",
                      **({} if unit is None else {"unit_of_measurement": unit}), "qos": 1}
            messages[f"{config.discovery_prefix}/sensor/{node}/{object_id}/config"] = (
                _encode(entity))
    return messages


class HomeAssistantDiscovery:
    """Keeps the retained discovery configs on the broker in step with the bridge."""

    def __init__(self, config: HomeAssistantConfig, gateway_id: str, broker: Broker,
                 gateway: GatewayInfo | None = None, alarms: AlarmsConfig | None = None
                 ) -> None:
        self.config = config
        self.alarms = alarms or AlarmsConfig()  # their entities too (bridge/alarms)
        self._bridge: BridgeConfig | None = None
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

    def reload_alarms(self, alarms: AlarmsConfig) -> None:
        """The alarms changed: publish the difference."""
        self.alarms = alarms
        if self._bridge is not None:
            self._apply(self._messages(self._bridge), self.published)

    async def stop(self) -> None:
        """The gateway state says offline; detach (the configs stay retained: the entities
        come back with the gateway)."""
        self.link.publish(GATEWAY_TOPIC, gateway_state(self.gateway, self.gateway_id, False),
                          1, True)
        self.link.close()

    def _messages(self, bridge: BridgeConfig) -> dict[str, bytes]:
        self._bridge = bridge
        return {**discovery_messages(bridge, self.config, self.gateway_id, self.gateway),
                **alarm_discovery(self.alarms, self.config.discovery_prefix, self.node)}

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
