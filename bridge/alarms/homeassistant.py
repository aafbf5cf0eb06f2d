"""Home Assistant entities of the alarms (pure): per alarm, a `binary_sensor` of device class
`problem` (on while the alarm's condition holds) whose attributes are the alarm's state JSON
(state, acked, shelved, severity, value, times), and a `button` that acknowledges it.

They belong to the Home Assistant device of the alarm's bridged device (the point's device, or
the device an offline alarm watches) and are available while the gateway is
(`$SYS/outpost/gateway`). The object ids start with `alarm-`; a point's are
`<device>_<point>`, so they collide only for a device named `alarm-...`.
"""

from __future__ import annotations

import json
import re
from typing import Any

from bridge.alarms.config import ALARMS_ROOT, AlarmsConfig

GATEWAY_TOPIC = "$SYS/outpost/gateway"  # bridge/homeassistant/gateway.py publishes it
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


def alarm_discovery(alarms: AlarmsConfig, discovery_prefix: str, node: str) -> dict[str, bytes]:
    """Discovery topic -> retained config, two per alarm."""
    messages: dict[str, bytes] = {}
    for rule in alarms.rules:
        object_id = "alarm-" + _UNSAFE.sub("_", rule.name)
        device = {"identifiers": [f"{node}_{_UNSAFE.sub('_', rule.device)}"]}
        base = f"{ALARMS_ROOT}/{rule.name}"
        common: dict[str, Any] = {
            "device": device, "availability_topic": GATEWAY_TOPIC,
            "availability_template": "{{ value_json.status }}",
            "payload_available": "online", "payload_not_available": "offline", "qos": 1}
        sensor = {"name": f"Alarm {rule.name}", "unique_id": f"{node}_{object_id}",
                  "state_topic": f"{base}/state", "device_class": "problem",
                  "value_template": "{{ 'ON' if value_json.active else 'OFF' }}",
                  "payload_on": "ON", "payload_off": "OFF",
                  "json_attributes_topic": f"{base}/state", **common}
        button = {"name": f"Acknowledge {rule.name}", "unique_id": f"{node}_{object_id}-ack",
                  "command_topic": f"{base}/ack", "payload_press": '{"user": "homeassistant"}',
                  "icon": "mdi:bell-check", **common}
        for component, entity, suffix in (("binary_sensor", sensor, ""),
                                          ("button", button, "-ack")):
            topic = f"{discovery_prefix}/{component}/{node}/{object_id}{suffix}/config"
            messages[topic] = json.dumps(entity, separators=(",", ":")).encode()
    return messages
