"""One connection to a Logix controller (pycomm3's CIP driver): connect, exchange, close.

How this works: `open_session` lets pycomm3 open the TCP connection, register the EtherNet/IP
session and open a CIP class 3 connection along the device's route (a Large Forward Open of
`connection_size` bytes, or a Forward Open of 500 when the controller refuses the large one),
and reads the Identity object's product name through it. A `Session`'s `exchange` sends one
Multiple Service Packet (bridge/enip/wire.py) as a connected message with pycomm3's
`generic_message` and returns the answers of its services. pycomm3 is blocking: each call runs
in the session's own worker thread, one at a time (a write waits for the poll's request in
flight), bounded by the device's `timeout` on the socket and twice that around the call.

pycomm3 1.2's receive loop never ends when a peer closes the connection in the middle of an
answer (it appends the empty reads forever): the session gives the driver's socket a receive
that reads the EtherNet/IP header and then exactly the length it announces, and fails on an
early end (tests/bridge/enip/test_simulator.py's peer that answers garbage hangs the device
without it).

pycomm3 is imported here only: bridge/families.py loads this module when the first EtherNet/IP
device is opened, and `outpost enip` when it runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import struct
from concurrent.futures import ThreadPoolExecutor

from pycomm3 import CIPDriver, CommError, PycommError
from pycomm3.socket_ import Socket

from bridge.enip import wire
from bridge.enip.config import EnipDeviceConfig

# What a lost or refused connection raises.
CONNECTION_ERRORS = (OSError, TimeoutError, ConnectionError, PycommError, wire.ProtocolError)
# pycomm3 logs every message at INFO and its failures at ERROR: the device reports its own.
logging.getLogger("pycomm3").setLevel(logging.CRITICAL)
HEADER = 24  # the EtherNet/IP encapsulation header
SERVICE_AT = 46  # the CIP answer in a SendUnitData frame (header, CPF items, sequence)


def receive_exactly(sock: socket.socket) -> bytes:
    """One EtherNet/IP frame: the header, then the length it announces; CommError on an early
    end of the stream."""
    data = bytearray()
    need = HEADER
    while len(data) < need:
        chunk = sock.recv(need - len(data))
        if not chunk:
            raise CommError("the controller closed the connection")
        data += chunk
        if need == HEADER and len(data) >= HEADER:
            need = HEADER + struct.unpack_from("<H", data, 2)[0]
    return bytes(data)


class Session:
    """A connected driver, the connection size it got and the controller's name."""

    def __init__(self, driver: CIPDriver, timeout: float, executor: ThreadPoolExecutor,
                 product: str) -> None:
        self.driver = driver
        self.timeout = timeout
        self.executor = executor
        self.product = product
        self.connection_size: int = driver.connection_size
        self._lock = asyncio.Lock()

    async def exchange(self, services: list[bytes]) -> list[wire.Reply]:
        """Send a Multiple Service Packet; the answers of its services (ProtocolError when the
        answer is not one, TimeoutError after twice the timeout)."""
        async with self._lock, asyncio.timeout(self.timeout * 2):
            answer = await asyncio.get_running_loop().run_in_executor(
                self.executor, _message, self.driver, wire.multiple(services))
        return wire.parse_multiple(answer, services)

    async def close(self) -> None:
        """Forward Close, unregister, close the socket; a dead peer costs at most the timeout."""
        try:
            async with asyncio.timeout(self.timeout * 2):
                await asyncio.get_running_loop().run_in_executor(self.executor, _close,
                                                                 self.driver)
        except TimeoutError:
            pass
        self.executor.shutdown(wait=False)


def _message(driver: CIPDriver, data: bytes) -> bytes:
    """One connected Multiple Service Packet to the Message Router; its CIP answer."""
    tag = driver.generic_message(service=wire.MULTIPLE, class_code=2, instance=1,
                                 request_data=data, connected=True, name="outpost",
                                 return_response_packet=True)
    response = tag.value
    raw = getattr(response, "raw", None)
    if not raw:
        raise CommError(tag.error or "no answer")
    if response.command_status not in (0, None) or len(raw) < SERVICE_AT + 4:
        raise wire.ProtocolError(f"not an answer to the request: {tag.error or raw[:8].hex()}")
    return bytes(raw[SERVICE_AT:])


def _close(driver: CIPDriver) -> None:
    with contextlib.suppress(PycommError):  # the connection is being dropped anyway
        driver.close()  # type: ignore[no-untyped-call]


def _open(config: EnipDeviceConfig) -> tuple[CIPDriver, str]:
    driver = CIPDriver(config.route)
    driver.socket_timeout = config.timeout
    # the size asked for (pycomm3 falls back to a Forward Open of 500 by itself)
    driver._cfg["connection_size"] = config.connection_size
    if config.connection_size <= 500:
        driver._cfg["extended forward open"] = False
    sock = driver._sock = Socket(config.timeout)  # type: ignore[no-untyped-call]
    sock.receive = lambda timeout=0: receive_exactly(sock.sock)  # type: ignore[method-assign]
    try:
        driver.open()  # type: ignore[no-untyped-call]
        identity = driver.generic_message(service=0x0E, class_code=1, instance=1, attribute=7,
                                          connected=True, name="product name")
        if not identity:
            raise wire.ProtocolError(f"the controller's identity: {identity.error}")
        raw = bytes(identity.value or b"")
        product = raw[1:1 + raw[0]].decode("latin-1") if raw else "?"
    except BaseException:
        _close(driver)
        raise
    return driver, product


async def open_session(config: EnipDeviceConfig) -> Session:
    """A connected session; raises one of CONNECTION_ERRORS (nothing left open)."""
    executor = ThreadPoolExecutor(1, thread_name_prefix=f"enip-{config.name}")
    loop = asyncio.get_running_loop()
    try:
        async with asyncio.timeout(config.timeout * 3):
            driver, product = await loop.run_in_executor(executor, _open, config)
    except BaseException:
        executor.shutdown(wait=False)
        raise
    return Session(driver, config.timeout, executor, product)
