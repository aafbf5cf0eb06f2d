"""The health check after a configuration was applied: is the gateway as well as before?

How this works: `HealthProbe.before()` notes which devices answer (are online) when a
configuration arrives. After the reload, `wait_healthy` looks every half second, until the
deadline, at three things and passes when all of them hold at once:

- every TCP listener the server has bound answers an MQTT CONNECT with a CONNACK (any reason
  code: the broker is up and speaking);
- every uplink remote is connected (a remote whose address or credentials changed is
  connected again by the reload, so this waits for the new connection);
- every device that was online before and is still configured is online again.

It returns what still failed at the deadline (empty: healthy), in words for the report.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gateway.base.hostport import parse_host_port
from gateway.broker.codec import decode, encode
from gateway.broker.codec.errors import MQTTProtocolError
from gateway.broker.codec.packets import ConnAck, Connect

StatusSource = Callable[[], dict[str, Any]]
LOOK_INTERVAL = 0.5
CONNECT_TIMEOUT = 5.0


@dataclass(frozen=True)
class Before:
    """What answered when the configuration arrived."""

    devices_online: frozenset[str]


class HealthProbe:
    """Looks at the listeners, the uplink and the devices of the running gateway."""

    def __init__(self, bound: Callable[[], list[str]], uplink: StatusSource | None,
                 devices: StatusSource | None) -> None:
        self.bound = bound  # the server's bound addresses: "HOST:PORT", "HOST:PORT (tls)"...
        self.uplink = uplink
        self.devices = devices

    def before(self) -> Before:
        """The devices online now."""
        return Before(frozenset(self._online()))

    async def wait_healthy(self, before: Before, configured_devices: set[str],
                           deadline: float) -> list[str]:
        """Problems still there after `deadline` seconds; empty as soon as all is well."""
        end = time.monotonic() + deadline
        while True:
            problems = await self.problems(before, configured_devices)
            if not problems or time.monotonic() >= end:
                return problems
            await asyncio.sleep(LOOK_INTERVAL)

    async def problems(self, before: Before, configured_devices: set[str]) -> list[str]:
        """What is not (yet) as well as before."""
        problems = [problem for address in self.bound()
                    if (problem := await _listener_problem(address)) is not None]
        if self.uplink is not None:
            remotes = self.uplink().get("remotes", [])
            down = [r["name"] for r in remotes if not r.get("connected")]
            if down:
                problems.append(f"uplink not connected: {', '.join(down)}")
        missing = sorted((before.devices_online & configured_devices) - set(self._online()))
        if missing:
            problems.append(f"devices online before are not now: {', '.join(missing)}")
        return problems

    def _online(self) -> list[str]:
        if self.devices is None:
            return []
        return [d["name"] for d in self.devices().get("devices", []) if d.get("online")]


async def _listener_problem(address: str) -> str | None:
    """None when the listener at `address` answers a CONNECT; else what went wrong. Only
    TCP listeners are asked (a unix socket, a websocket: skipped)."""
    text, _, kind = address.partition(" ")
    if text.startswith("unix:") or kind not in ("", "(tls)"):
        return None
    host, port = parse_host_port(text)
    context = None
    if kind == "(tls)":  # liveness only: whoever answers on our own socket is us
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    writer = None
    try:
        async with asyncio.timeout(CONNECT_TIMEOUT):
            reader, writer = await asyncio.open_connection(host.strip("[]"), port, ssl=context)
            writer.write(encode(Connect(client_id=f"outpost-health-{os.getpid()}",
                                        keep_alive=10), 4))
            await writer.drain()
            data = b""
            while not isinstance(got := decode(data, 4), tuple):
                chunk = await reader.read(64)
                if not chunk:
                    return f"listener {text} closed the connection before CONNACK"
                data += chunk
    except (OSError, TimeoutError, ssl.SSLError, MQTTProtocolError) as exc:
        return f"listener {text} does not answer: {exc or type(exc).__name__}"
    finally:
        if writer is not None:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
    packet = got[0]
    if not isinstance(packet, ConnAck):
        return f"listener {text} answered {type(packet).__name__}, not CONNACK"
    return None
