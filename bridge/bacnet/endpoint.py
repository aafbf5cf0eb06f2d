"""One BACnet/IP UDP endpoint of the bridge: confirmed requests, their answers, notifications.

How this works: an `Endpoint` owns one UDP socket (bound to the device's `local_address`,
an ephemeral port by default). `request` sends a confirmed request with the next free invoke
id (0..255) and waits for the answer from the same address (and, behind a router, the same
network and MAC): a simple or complex ack is the result, an Error PDU raises `RefusedError` with
the error class and code, a reject or abort raises `RefusedError` with the reason. No answer
within `timeout` is sent again `retries` times and then raises TimeoutError. Unconfirmed
requests (COV notifications, I-Am) and confirmed COV notifications (acknowledged here) go to
`on_request`. Datagrams that are not BACnet, or answer nothing pending, are counted (the
device's `crc_errors` and `stale_frames`) and dropped: a peer answering junk looks like a
peer answering nothing.

Pure asyncio; nothing here knows points or devices.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import cast

from bridge.bacnet import wire
from bridge.bacnet.names import ERROR_CLASSES, ERROR_CODES
from bridge.bacnet.tags import DecodeError
from bridge.driver import Counters

log = logging.getLogger("outpost.bridge.bacnet")
Address = tuple[str, int]
OnRequest = Callable[[wire.Packet, Address], None]


class RefusedError(Exception):
    """The device answered no: an Error PDU (its class and code), a reject or an abort."""

    def __init__(self, reason: str, error_class: int | None = None,
                 error_code: int | None = None) -> None:
        super().__init__(reason)
        self.error_class, self.error_code = error_class, error_code


def error_text(error_class: int, error_code: int) -> str:
    """`object: unknown-object` for BACnet's numbers."""
    return f"{ERROR_CLASSES.get(error_class, str(error_class))}: " \
        f"{ERROR_CODES.get(error_code, str(error_code))}"


class Endpoint(asyncio.DatagramProtocol):
    """A UDP socket speaking BACnet/IP for one device (or one discovery)."""

    def __init__(self, timeout: float, retries: int, on_request: OnRequest | None = None,
                 counters: Counters | None = None) -> None:
        self.timeout, self.retries = timeout, retries
        self.on_request = on_request
        self.counters = counters if counters is not None else Counters()
        self.transport: asyncio.DatagramTransport | None = None
        self.pending: dict[int, tuple[Address, wire.Route, asyncio.Future[wire.Packet]]] = {}
        self._next = 0
        self.closed = asyncio.Event()

    async def open(self, host: str, port: int) -> Endpoint:
        """Bind the socket (broadcasts allowed: discovery sends Who-Is)."""
        loop = asyncio.get_running_loop()
        await loop.create_datagram_endpoint(lambda: self, local_addr=(host, port),
                                            allow_broadcast=True)
        return self

    @property
    def local(self) -> Address:
        """The bound address."""
        assert self.transport is not None
        host, port = self.transport.get_extra_info("sockname")[:2]
        return host, port

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.DatagramTransport, transport)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed.set()
        for _, _, future in self.pending.values():
            if not future.done():
                future.set_exception(ConnectionError("socket closed"))

    def error_received(self, exc: Exception) -> None:
        log.debug("bacnet: socket error: %s", exc)

    def close(self) -> None:
        """Close the socket; pending requests fail with ConnectionError."""
        if self.transport is not None:
            self.transport.close()

    def datagram_received(self, data: bytes, addr: tuple[str | object, ...]) -> None:
        source = (str(addr[0]), int(str(addr[1])))
        try:
            packet = wire.parse(data)
        except DecodeError:
            self.counters.crc_errors += 1
            return
        if packet.kind in (wire.UNCONFIRMED, wire.CONFIRMED):
            if packet.kind == wire.CONFIRMED and packet.invoke is not None \
                    and packet.service is not None:
                route = wire.Route(source[0], source[1], packet.network, packet.mac)
                self.send(wire.simple_ack(packet.invoke, packet.service), route)
            if self.on_request is not None:
                self.on_request(packet, source)
            return
        entry = self.pending.get(packet.invoke) if packet.invoke is not None else None
        if entry is None or entry[0] != source or entry[1].network != packet.network or (
                entry[1].network is not None and entry[1].mac != packet.mac):
            self.counters.stale_frames += 1
            return
        if not entry[2].done():
            entry[2].set_result(packet)

    def send(self, apdu: bytes, route: wire.Route, expecting_reply: bool = False) -> None:
        """Send an APDU to a device (unicast)."""
        if self.transport is None or self.transport.is_closing():
            raise ConnectionError("socket closed")
        self.transport.sendto(wire.frame(apdu, route, expecting_reply), (route.host, route.port))

    def broadcast(self, apdu: bytes, target: Address) -> None:
        """Send an APDU as a global broadcast (every network) to `target` (a broadcast
        address and port)."""
        if self.transport is None:
            raise ConnectionError("socket closed")
        self.transport.sendto(wire.frame(apdu, None), target)

    def _invoke(self) -> int:
        for _ in range(256):
            invoke, self._next = self._next, (self._next + 1) % 256
            if invoke not in self.pending:
                return invoke
        raise RuntimeError("256 requests in flight")

    async def request(self, route: wire.Route, service: int, data: bytes,
                      max_apdu: int = 1476) -> wire.Packet:
        """Send a confirmed request and return its ack; RefusedError, or TimeoutError after
        `retries` more tries."""
        loop = asyncio.get_running_loop()
        invoke = self._invoke()
        apdu = wire.confirmed(invoke, service, data, max_apdu)
        try:
            for _ in range(self.retries + 1):
                future: asyncio.Future[wire.Packet] = loop.create_future()
                self.pending[invoke] = ((route.host, route.port), route, future)
                self.send(apdu, route, expecting_reply=True)
                try:
                    async with asyncio.timeout(self.timeout):
                        packet = await future
                    break
                except TimeoutError:
                    continue
            else:
                raise TimeoutError(f"no answer from {route} within {self.timeout:g} s "
                                   f"({self.retries + 1} tries)")
        finally:
            self.pending.pop(invoke, None)
        if packet.kind in (wire.SIMPLE_ACK, wire.COMPLEX_ACK):
            if packet.segmented:
                raise RefusedError("a segmented answer (not asked for)")
            return packet
        if packet.kind == wire.ERROR:
            error_class, error_code = wire.error_of(packet)
            raise RefusedError(error_text(error_class, error_code), error_class, error_code)
        if packet.kind in (wire.REJECT, wire.ABORT):
            raise RefusedError(wire.reason_of(packet))
        raise DecodeError(f"an answer of APDU type {packet.kind}")
