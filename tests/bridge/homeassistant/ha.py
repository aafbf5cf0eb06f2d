"""What Home Assistant makes of a discovery config and a message, for the tests.

Home Assistant renders an MQTT entity's `value_template` with Jinja2 in a sandbox, the
received payload as `value` and, when it parses as JSON, as `value_json`; then a
`binary_sensor` compares the result with `payload_on` / `payload_off`, a `switch` with
`state_on` / `state_off` (default: `payload_on` / `payload_off`), and both, like `sensor`,
take the result "None" as the state unknown (homeassistant/components/mqtt/binary_sensor.py,
switch.py, sensor.py: `PAYLOAD_NONE`). An availability message is rendered with
`availability_template` the same way and compared with `payload_available` /
`payload_not_available`. This module does the same with jinja2's own sandbox.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any

from jinja2.sandbox import ImmutableSandboxedEnvironment

ENVIRONMENT = ImmutableSandboxedEnvironment()
PAYLOAD_NONE = "None"


def render(template: str | None, payload: bytes) -> str:
    """`template` rendered for `payload` (no template: the payload itself)."""
    text = payload.decode()
    if template is None:
        return text
    variables: dict[str, Any] = {"value": text}
    with contextlib.suppress(ValueError):
        variables["value_json"] = json.loads(text)
    return ENVIRONMENT.from_string(template).render(variables)


def state(component: str, config: dict[str, Any], payload: bytes) -> str | None:
    """The entity's state after `payload` on its state topic: "on" / "off" / a sensor value,
    "unknown", or None when Home Assistant ignores the message."""
    result = render(config.get("value_template"), payload)
    if result == PAYLOAD_NONE:
        return "unknown"
    if component in ("binary_sensor", "switch"):
        on = config.get("payload_on", "ON")
        off = config.get("payload_off", "OFF")
        if component == "switch":
            on, off = config.get("state_on", on), config.get("state_off", off)
        return {on: "on", off: "off"}.get(result)
    return result


def available(config: dict[str, Any], payload: bytes) -> bool | None:
    """Availability after `payload` on the availability topic (None: ignored)."""
    result = render(config.get("availability_template"), payload)
    return {config.get("payload_available", "online"): True,
            config.get("payload_not_available", "offline"): False}.get(result)
