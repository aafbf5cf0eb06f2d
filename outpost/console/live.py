"""Live point values for the console's pages, pushed from the broker (Server-Sent Events).

How this works: one in-process link (`$outpost-console`) subscribes to the bridge's documented
topics, `<prefix>/+/+` (point values and device statuses, docs/message-format.md); retained
values arrive at once, so a page opened later starts with the latest value of every point.
Each browser tab watching a device holds a bounded queue; a message for that device is put
into it as one SSE event (`{"device", "point", "value", "unit", "quality", "ts"}` or
`{"device", "status"}`). A tab that does not keep up loses the oldest events, never the
gateway's memory. The SSE handler (outpost/console/pages_devices.py) drains the queue.

Streams are capped per session (`PER_SESSION`: a few tabs), per user (`PER_USER`: a user
has several sessions) and in all (`MAX_WATCHERS`), so that one user holding streams open
cannot take the live pages of the others.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

from gateway.broker.core.message import Message
from gateway.broker.engine.broker import Broker
from gateway.broker.engine.links import Link

CLIENT_ID = "$outpost-console"
QUEUE_SIZE = 256
MAX_WATCHERS = 64
PER_SESSION = 4
PER_USER = 8


class LiveValues:
    """The latest value of every point, and the tabs watching devices."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.latest: dict[str, dict[str, dict[str, Any]]] = {}  # device -> point -> event
        # queue -> the device it follows (None: all)
        self.watchers: dict[asyncio.Queue[str | None], str | None] = {}
        self.owners: dict[asyncio.Queue[str | None], tuple[str, str]] = {}  # (session, user)
        self.link: Link | None = None

    def attach(self, broker: Broker, clock: Callable[[], float]) -> None:
        self.link = Link(broker, CLIENT_ID, clock, self.on_message)
        self.link.subscribe(f"{self.prefix}/+/+", qos=0)

    def close(self) -> None:
        for queue in self.watchers:  # ends every event stream
            _offer(queue, None)
        if self.link is not None:
            self.link.close()
            self.link = None

    def refusal(self, session: str, user: str) -> str | None:
        """Why one more stream of this session and user is refused, or None."""
        owners = list(self.owners.values())
        if sum(1 for s, _ in owners if s == session) >= PER_SESSION:
            return f"at most {PER_SESSION} live views per login"
        if sum(1 for _, u in owners if u == user) >= PER_USER:
            return f"at most {PER_USER} live views per user"
        if len(self.watchers) >= MAX_WATCHERS:
            return "too many live views open"
        return None

    def watch(self, device: str | None, session: str, user: str
              ) -> asyncio.Queue[str | None] | None:
        """A queue of the SSE events of `device` (None: every device), starting with the
        latest values; None when over a cap (`refusal` says which)."""
        if self.refusal(session, user) is not None:
            return None
        queue: asyncio.Queue[str | None] = asyncio.Queue(QUEUE_SIZE)
        for name, points in self.latest.items():
            if device is None or name == device:
                for event in points.values():
                    _offer(queue, json.dumps(event))
        self.watchers[queue] = device
        self.owners[queue] = (session, user)
        return queue

    def unwatch(self, queue: asyncio.Queue[str | None]) -> None:
        self.watchers.pop(queue, None)
        self.owners.pop(queue, None)

    def on_message(self, message: Message, qos: int, retain: bool) -> None:
        parts = message.topic[len(self.prefix) + 1:].split("/")
        if len(parts) != 2 or parts[1] == "diagnostics":
            return
        device, leaf = parts
        event: dict[str, Any] = {"device": device}
        if leaf == "status":
            event["status"] = bytes(message.payload).decode("utf-8", "replace").strip()
        else:
            try:
                data = json.loads(message.payload)
            except (ValueError, UnicodeDecodeError):
                return
            if not isinstance(data, dict):
                return
            event.update(point=leaf, value=data.get("value"), unit=data.get("unit"),
                         quality=data.get("quality"), ts=data.get("ts"))
        points = self.latest.setdefault(device, {})
        points[leaf] = event
        text = json.dumps(event)
        for queue, wanted in self.watchers.items():
            if wanted is None or wanted == device:
                _offer(queue, text)

    def forget(self, device: str) -> None:
        """A removed device's values are not shown any more."""
        self.latest.pop(device, None)


def _offer(queue: asyncio.Queue[str | None], text: str | None) -> None:
    if queue.full():
        queue.get_nowait()  # the oldest goes: a slow tab must not hold the gateway's memory
    queue.put_nowait(text)
