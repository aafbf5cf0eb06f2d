"""One connection to an S7 PLC (python-snap7's async client): connect, exchange PDUs, close.

How this works: `open_session` connects with the device's TSAPs (rack and slot make the
remote TSAP: connection type, rack << 5 | slot), lets python-snap7 do ISO-on-TCP and the S7
setup that negotiates the PDU size, and gives a `Session` whose `exchange` sends one request
PDU (bridge/s7/wire.py) and returns the answer PDU. Each exchange is bounded by the device's
`timeout`; one that times out leaves the stream in an unknown place, so the device treats it
as a lost connection and connects again. The client holds one request in flight at a time
(its lock), so a write waits for the poll's request in flight and never interleaves with it.

python-snap7 is imported here only: bridge/families.py loads this module when the first S7
device is opened.
"""

from __future__ import annotations

import asyncio
import itertools
import logging

from snap7.async_client import AsyncClient
from snap7.error import S7Error

from bridge.s7.config import S7DeviceConfig, parse_tsap

# What a lost or refused connection raises.
CONNECTION_ERRORS = (OSError, TimeoutError, ConnectionError, S7Error, asyncio.IncompleteReadError)
# python-snap7 logs every connect and disconnect at INFO: the device reports its own changes.
logging.getLogger("snap7").setLevel(logging.WARNING)


class Session:
    """A connected client and the PDU size the PLC agreed to."""

    def __init__(self, client: AsyncClient, timeout: float) -> None:
        self.client = client
        self.timeout = timeout
        self.pdu = client.get_pdu_length()
        self._sequence = itertools.count(1)

    def sequence(self) -> int:
        """The next request's sequence number (1..65535, then again)."""
        return (next(self._sequence) - 1) % 0xFFFF + 1

    async def exchange(self, request: bytes) -> bytes:
        """Send one request PDU and return its answer PDU (TimeoutError after `timeout`)."""
        async with asyncio.timeout(self.timeout):
            return bytes(await self.client.iso_exchange_buffer(bytearray(request)))

    async def close(self) -> None:
        """Disconnect; a dead peer does not make this wait long."""
        await _disconnect(self.client)


async def _disconnect(client: AsyncClient) -> None:
    try:
        async with asyncio.timeout(1.0):
            await client.disconnect()
    except (*CONNECTION_ERRORS, RuntimeError):  # the connection is being dropped anyway
        pass


async def open_session(config: S7DeviceConfig) -> Session:
    """A connected session; raises one of CONNECTION_ERRORS (nothing left open)."""
    client = AsyncClient()
    client.pdu_length = config.pdu_size
    client.local_tsap = parse_tsap(config.local_tsap)
    remote = config.remote_tsap()
    client.set_connection_type(remote >> 8)
    try:
        async with asyncio.timeout(config.timeout * 2):
            await client.connect(config.host, remote >> 5 & 0x07, remote & 0x1F, config.port)
    except BaseException:
        await _disconnect(client)
        raise
    return Session(client, config.timeout)
