"""The two private parts of aiomqtt that outpost relies on are still there.

aiomqtt 2.5 offers no PUBACK reason codes and no manual acknowledgement, so the uplink
(bridge/uplink/client.py) overrides `Client._on_publish` to read each PUBACK's reason code, and
the lander (cloud_spark/lander.py) reaches the paho client at `Client._client` for
`manual_ack_set` / `ack`. pyproject.toml pins aiomqtt to one minor series; this test is what
fails first when a new series changes either hook, before a user sees lost acknowledgements.
"""

from __future__ import annotations

import asyncio
import inspect

import aiomqtt
import paho.mqtt.client as paho


def test_the_paho_client_and_its_publish_callback_are_where_the_uplink_expects() -> None:
    async def check() -> None:
        client = aiomqtt.Client("127.0.0.1")
        assert isinstance(client._client, paho.Client)
        # paho calls this bound method for every PUBACK: the uplink's override receives it
        assert client._client.on_publish == client._on_publish
        assert callable(client._client.manual_ack_set) and callable(client._client.ack)

    asyncio.run(check())


def test_the_publish_callback_has_the_signature_the_override_keeps() -> None:
    params = list(inspect.signature(aiomqtt.Client._on_publish).parameters)
    assert params == ["self", "client", "userdata", "mid", "reason_code", "properties"]
