"""Bounds on the connections of the status / console listener: per-address and total
connection caps, and deadlines for a request's head and body.

How this works: the listener is shared with the LAN, and its process shares its file
descriptors (`LimitNOFILE`) with the MQTT broker, so no neighbour may hold connections open
for free. `PeerSlots` counts open connections per peer address and in all: a connection
beyond `per_address` from one address, or beyond `total`, is closed as soon as it is
accepted. The plain status server (outpost/status_http.py) uses it as it is.

For the console's aiohttp server, `GuardedProtocol` sits between the transport and aiohttp's
protocol and watches the bytes that arrive (it never changes them): a request's head must
be complete (`\\r\\n\\r\\n`) within `head_timeout` of the connection's start or of the first
byte of the request, and its body (the `Content-Length` the head announced) within
`body_timeout` of the head's end; otherwise the connection gets a 408 and is closed. A
connection idle between two requests is aiohttp's business (its keep-alive timeout). The
time a handler takes to answer is not bounded here: only what the client owes.

Under TLS the wrapper sees the decrypted stream; the TLS handshake itself is bounded by the
server's `ssl_handshake_timeout` (the same `head_timeout`).
"""

from __future__ import annotations

import asyncio
import re
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

HEAD_TIMEOUT = 10.0
BODY_TIMEOUT = 30.0
PER_ADDRESS = 16  # a browser opens about 6 at once, and one more per live page
TOTAL = 128
MAX_HEAD = 64 * 1024  # what the watcher keeps of a head (aiohttp refuses far less)
TIMEOUT_ANSWER = (b"HTTP/1.1 408 Request Timeout\r\nContent-Type: text/plain\r\n"
                  b"Content-Length: 16\r\nConnection: close\r\n\r\nrequest timeout\n")
_LENGTH = re.compile(rb"\r\ncontent-length:[ \t]*([0-9]{1,12})[ \t]*\r\n", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class Limits:
    """The listener's bounds (the defaults are the appliance's)."""

    head_timeout: float = HEAD_TIMEOUT
    body_timeout: float = BODY_TIMEOUT
    per_address: int = PER_ADDRESS
    total: int = TOTAL


class PeerSlots:
    """Open connections per peer address, and in all."""

    def __init__(self, per_address: int, total: int) -> None:
        self.per_address = per_address
        self.total = total
        self.open: dict[str, int] = {}
        self.count = 0

    def take(self, address: str) -> bool:
        """Count a new connection from `address`; False (not counted) when over a cap."""
        held = self.open.get(address, 0)
        if held >= self.per_address or self.count >= self.total:
            return False
        self.open[address] = held + 1
        self.count += 1
        return True

    def give(self, address: str) -> None:
        """A connection counted by `take` closed."""
        held = self.open.get(address, 0) - 1
        if held <= 0:
            self.open.pop(address, None)
        else:
            self.open[address] = held
        self.count -= 1


def peer_address(transport: asyncio.BaseTransport) -> str:
    """The peer's address (no port) of a transport, "?" when it has none."""
    peer = transport.get_extra_info("peername")
    return str(peer[0]) if isinstance(peer, tuple) and peer else "?"


class GuardedProtocol(asyncio.Protocol):
    """A connection's deadlines and its slot, around the protocol that serves it."""

    def __init__(self, inner: asyncio.Protocol, slots: PeerSlots, limits: Limits) -> None:
        self.inner = inner
        self.slots = slots
        self.limits = limits
        self.transport: asyncio.Transport | None = None
        self.address: str | None = None  # set when a slot was taken
        self.head = b""  # the current request's head so far (None of it: between requests)
        self.in_head = True
        self.body_left = 0
        self.timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport = cast(asyncio.Transport, transport)  # (uvloop's are not subclasses)
        self.transport = transport
        address = peer_address(transport)
        if not self.slots.take(address):
            transport.abort()  # over a cap: never handed to the server
            return
        self.address = address
        self._deadline(self.limits.head_timeout)
        self.inner.connection_made(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        self._deadline(None)
        if self.address is not None:
            self.slots.give(self.address)
            self.address = None
            self.inner.connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self.address is None:
            return
        self._watch(data)
        self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self.inner.eof_received() if self.address is not None else None

    def pause_writing(self) -> None:
        if self.address is not None:
            self.inner.pause_writing()

    def resume_writing(self) -> None:
        if self.address is not None:
            self.inner.resume_writing()

    def _watch(self, data: bytes) -> None:
        """Follow requests through the stream: head, then body, then the next head."""
        while data:
            if self.body_left:
                used = min(self.body_left, len(data))
                self.body_left -= used
                data = data[used:]
                if not self.body_left:
                    self._deadline(None)
                    self.in_head = False
                continue
            if not self.in_head:  # the first byte of the next request
                self.in_head = True
                self.head = b""
                self._deadline(self.limits.head_timeout)
            seen = len(self.head)
            self.head = (self.head + data)[:MAX_HEAD]
            end = self.head.find(b"\r\n\r\n", max(0, seen - 3))
            if end < 0:
                return
            rest = len(self.head) - (end + 4)
            data = data[len(data) - rest:] if rest else b""
            found = _LENGTH.search(self.head[:end + 2])
            self.body_left = int(found.group(1)) if found else 0
            self.head = b""
            if self.body_left:
                self._deadline(self.limits.body_timeout)
            else:
                self._deadline(None)
                self.in_head = False

    def _deadline(self, seconds: float | None) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        if seconds is not None:
            self.timer = asyncio.get_running_loop().call_later(seconds, self._expired)

    def _expired(self) -> None:
        self.timer = None
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(TIMEOUT_ANSWER)
            self.transport.close()


async def serve_guarded(factory: Callable[[], asyncio.Protocol], host: str, port: int,
                        tls: ssl.SSLContext | None, limits: Limits | None = None
                        ) -> asyncio.Server:
    """A TCP (or TLS) server whose connections are served by `factory`'s protocols within
    `limits`."""
    limits = limits or Limits()
    slots = PeerSlots(limits.per_address, limits.total)
    loop = asyncio.get_running_loop()
    return await loop.create_server(
        lambda: GuardedProtocol(factory(), slots, limits), host, port, ssl=tls,
        reuse_address=True, ssl_handshake_timeout=limits.head_timeout if tls else None)
