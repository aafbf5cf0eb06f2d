"""Byte channels for the bridge: a TCP connection or a serial port, with a receive buffer.

How this works: a channel owns one file descriptor on the running asyncio loop. Received bytes
are appended to `buffer` (a bytearray the caller consumes) and wake whoever waits in `wait`.
Writes never block: what the kernel does not take at once is queued and written when the
descriptor is writable. When the peer goes away (TCP close, a USB adapter unplugged, a pty
closed: read returns EOF or EIO) the channel marks itself closed, records why in `lost`, and
wakes the waiter; reopening is the owner's decision.

Serial ports are opened with pyserial (it knows baud rates, parity, RS-485 ioctls and locking)
and then read and written through the descriptor with the loop's add_reader/add_writer, which
is what pyserial-asyncio does, without another dependency.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from typing import Any

import serial
import serial.rs485


class ChannelClosedError(ConnectionError):
    """The channel is not open (never opened, closed, or lost)."""


class Channel:
    """Common buffer and wake-up logic of the TCP and serial channels."""

    name = "channel"

    def __init__(self) -> None:
        self.buffer = bytearray()
        self.lost: BaseException | None = None
        self.is_open = False
        self._wakeup: asyncio.Future[None] | None = None

    def _received(self, data: bytes) -> None:
        self.buffer += data
        self._wake()

    def _closed(self, exc: BaseException | None) -> None:
        if self.is_open:
            self.is_open = False
            self.lost = exc or ChannelClosedError(f"{self.name}: closed by the peer")
        self._wake()

    def _wake(self) -> None:
        waiter = self._wakeup
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def wait(self, deadline: float) -> bool:
        """Wait for more bytes until `deadline` (loop time); False on timeout or loss."""
        if not self.is_open:
            return False
        loop = asyncio.get_running_loop()
        delay = deadline - loop.time()
        if delay <= 0:
            return False
        self._wakeup = loop.create_future()
        handle = loop.call_at(deadline, self._wake)
        try:
            await self._wakeup
        finally:
            handle.cancel()
            self._wakeup = None
        return self.is_open and loop.time() < deadline

    def take(self) -> bytes:
        """Everything buffered, removed from the buffer."""
        data = bytes(self.buffer)
        self.buffer.clear()
        return data

    async def open(self) -> None:
        """Open the channel (raises OSError or TimeoutError)."""
        raise NotImplementedError

    def write(self, data: bytes) -> None:
        """Queue bytes for sending (raises ChannelClosedError when not open)."""
        raise NotImplementedError

    def close(self) -> None:
        """Close; a waiter is woken."""
        raise NotImplementedError


class _TcpProtocol(asyncio.Protocol):
    def __init__(self, channel: TcpChannel) -> None:
        self.channel = channel

    def data_received(self, data: bytes) -> None:
        self.channel._received(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.channel._closed(exc)


class TcpChannel(Channel):
    """A TCP connection (Modbus TCP or RTU over TCP)."""

    def __init__(self, host: str, port: int, connect_timeout: float = 3.0) -> None:
        super().__init__()
        self.host, self.port, self.connect_timeout = host, port, connect_timeout
        self.name = f"tcp {host}:{port}"
        self._transport: asyncio.Transport | None = None

    async def open(self) -> None:
        """Connect (raises OSError or TimeoutError)."""
        loop = asyncio.get_running_loop()
        self.buffer.clear()
        self.lost = None
        transport, _ = await asyncio.wait_for(
            loop.create_connection(lambda: _TcpProtocol(self), self.host, self.port),
            self.connect_timeout,
        )
        self._transport = transport
        self.is_open = True

    def write(self, data: bytes) -> None:
        if not self.is_open or self._transport is None:
            raise ChannelClosedError(f"{self.name}: not connected")
        self._transport.write(data)

    def close(self) -> None:
        self.is_open = False
        if self._transport is not None:
            self._transport.abort()
            self._transport = None
        self._wake()


class SerialChannel(Channel):
    """A serial port, read and written through its descriptor on the event loop."""

    def __init__(self, device: str, baudrate: int = 9600, bytesize: int = 8, parity: str = "N",
                 stopbits: int = 1, rs485: dict[str, Any] | None = None) -> None:
        super().__init__()
        self.device = device
        self.settings = {"baudrate": baudrate, "bytesize": bytesize, "parity": parity,
                         "stopbits": stopbits}
        self.rs485 = rs485
        self.name = f"serial {device}"
        self._serial: serial.Serial | None = None
        self._fd = -1
        self._pending = b""

    async def open(self) -> None:
        """Open the port (raises OSError / serial.SerialException when it is not there)."""
        self.buffer.clear()
        self.lost = None
        try:
            port = serial.Serial(self.device, timeout=0, write_timeout=0, exclusive=True,
                                 **self.settings)
        except serial.SerialException as exc:
            raise OSError(str(exc)) from None
        if self.rs485 is not None:
            try:
                port.rs485_mode = serial.rs485.RS485Settings(**self.rs485)
            except (OSError, ValueError, serial.SerialException) as exc:
                port.close()
                raise OSError(f"{self.device}: cannot enable RS-485 mode: {exc}") from None
        port.reset_input_buffer()
        self._serial, self._fd = port, port.fileno()
        self._pending = b""
        asyncio.get_running_loop().add_reader(self._fd, self._readable)
        self.is_open = True

    def _readable(self) -> None:
        try:
            data = os.read(self._fd, 4096)
        except BlockingIOError:
            return
        except OSError as exc:  # EIO: the device vanished (USB unplugged, pty closed)
            self._lose(exc)
            return
        if not data:
            self._lose(ChannelClosedError(f"{self.name}: end of file (device gone)"))
            return
        self._received(data)

    def _lose(self, exc: BaseException) -> None:
        self._release()
        self._closed(exc)

    def write(self, data: bytes) -> None:
        if not self.is_open:
            raise ChannelClosedError(f"{self.name}: not open")
        if self._pending:
            self._pending += data
            return
        try:
            written = os.write(self._fd, data)
        except BlockingIOError:
            written = 0
        except OSError as exc:
            self._lose(exc)
            raise ChannelClosedError(f"{self.name}: write failed: {exc}") from None
        if written < len(data):
            self._pending = data[written:]
            asyncio.get_running_loop().add_writer(self._fd, self._writable)

    def _writable(self) -> None:
        try:
            written = os.write(self._fd, self._pending)
        except BlockingIOError:
            return
        except OSError as exc:
            self._lose(exc)
            return
        self._pending = self._pending[written:]
        if not self._pending:
            asyncio.get_running_loop().remove_writer(self._fd)

    def _release(self) -> None:
        if self._fd >= 0:
            loop = asyncio.get_running_loop()
            loop.remove_reader(self._fd)
            loop.remove_writer(self._fd)
            self._fd = -1
        if self._serial is not None:
            with contextlib.suppress(OSError, serial.SerialException):
                self._serial.close()
            self._serial = None

    def close(self) -> None:
        self._release()
        self.is_open = False
        self._wake()
