"""The gateway itself as a Home Assistant device: the device every bridged device is
"connected via", with the entities an operator looks at (pure).

Home Assistant links a device to its `via_device` only when a device with that identifier
exists; so the gateway is announced too, identifier = the discovery node id:

- `binary_sensor` *Status* (connectivity): `status` of the retained JSON the discovery part
  publishes on `$SYS/outpost/gateway` (`online` at start, `offline` at a clean stop);
- `sensor` *Version* (diagnostic): `version` of the same JSON (also the device's
  `sw_version`);
- with the uplink enabled, `binary_sensor` *Uplink* (connectivity) and `sensor` *Uplink
  backlog* (messages, measurement) from the uplink's retained `$SYS/outpost/uplink` report.

Object ids here have no `_`; every bridged point's id (`<device>_<point>`) has one, so the
two never collide.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Final

GATEWAY_TOPIC: Final = "$SYS/outpost/gateway"
UPLINK_TOPIC: Final = "$SYS/outpost/uplink"  # bridge/uplink/service.py publishes it


@dataclass(frozen=True, slots=True)
class GatewayInfo:
    """What discovery says about the gateway that runs it."""

    version: str = "unknown"
    uplink: bool = False  # is the uplink enabled (its entities make sense)


def gateway_state(info: GatewayInfo, gateway_id: str, online: bool) -> bytes:
    """The retained JSON on `$SYS/outpost/gateway`."""
    return json.dumps({"status": "online" if online else "offline", "version": info.version,
                       "gateway_id": gateway_id}, separators=(",", ":")).encode()


def gateway_entities(node: str, gateway_id: str, info: GatewayInfo,
                     ) -> dict[str, tuple[str, dict[str, Any]]]:
    """Object id -> (component, config) of the gateway's own entities."""
    device = {"identifiers": [node], "name": gateway_id, "manufacturer": "outpost",
              "model": "outpost edge gateway", "sw_version": info.version}
    entities: dict[str, tuple[str, dict[str, Any]]] = {
        "gateway-status": ("binary_sensor", {
            "name": "Status", "state_topic": GATEWAY_TOPIC, "device_class": "connectivity",
            "value_template": "{{ 'ON' if value_json.status == 'online' else 'OFF' }}",
            "payload_on": "ON", "payload_off": "OFF"}),
        "gateway-version": ("sensor", {
            "name": "Version", "state_topic": GATEWAY_TOPIC, "entity_category": "diagnostic",
            "value_template": "{{ value_json.version }}"}),
    }
    if info.uplink:
        entities["gateway-uplink"] = ("binary_sensor", {
            "name": "Uplink", "state_topic": UPLINK_TOPIC, "device_class": "connectivity",
            "value_template": "{{ 'ON' if value_json.connected else 'OFF' }}",
            "payload_on": "ON", "payload_off": "OFF"})
        entities["gateway-backlog"] = ("sensor", {
            "name": "Uplink backlog", "state_topic": UPLINK_TOPIC,
            "value_template": "{{ value_json.backlog_messages }}",
            "unit_of_measurement": "messages", "state_class": "measurement",
            "entity_category": "diagnostic", "icon": "mdi:tray-full"})
    return {object_id: (component, {"unique_id": f"{node}_{object_id}", "device": device,
                                    **entity, "qos": 1})
            for object_id, (component, entity) in entities.items()}
