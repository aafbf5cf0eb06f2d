"""What Home Assistant makes of a discovery config and a message, for the tests.

Home Assistant renders an MQTT entity's `value_template` with Jinja2 in a sandbox, the
received payload as `value` and, when it parses as JSON, as `value_json`; then a
`binary_sensor` compares the result with `payload_on` / `payload_off`, a `switch` with
`state_on` / `state_off` (default: `payload_on` / `payload_off`), and both, like `sensor`,
take the result "None" as the state unknown (homeassistant/components/mqtt/binary_sensor.py,
switch.py, sensor.py: `PAYLOAD_NONE`). An availability message is rendered with
`availability_template` the same way and compared with `payload_available` /
`payload_not_available`. This module does the same with jinja2's own sandbox, and plays the
part of Home Assistant's MQTT client: `home_assistant` subscribes to the discovery prefix at a
gateway and gives the retained configs once they all arrived.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from typing import Any

from jinja2.sandbox import ImmutableSandboxedEnvironment

from tests.gateway.broker.e2e.helpers import PahoClient, wait_for
from tests.support.broker_proc import BrokerProcess

ENVIRONMENT = ImmutableSandboxedEnvironment()
PAYLOAD_NONE = "None"
GATEWAY_ENTITIES = 2  # the gateway's own: status and version (no uplink configured)


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


def retained_configs(client: PahoClient) -> dict[str, Any]:
    """Topic -> the latest config (None once cleared)."""
    found: dict[str, Any] = {}
    for message in client.messages:
        if message.topic.startswith("homeassistant/") and message.topic.endswith("/config"):
            found[message.topic] = json.loads(message.payload) if message.payload else None
    return found


@contextlib.contextmanager
def home_assistant(gateway: BrokerProcess, count: int,
                   ) -> Iterator[tuple[PahoClient, dict[str, Any]]]:
    """A client subscribed to the discovery prefix, once `count` configs arrived."""
    with PahoClient(gateway) as ha:
        ha.connect()
        ha.subscribe("homeassistant/#", 1)
        yield ha, wait_for(lambda: len(found := retained_configs(ha)) == count and found)
