"""WebSocket (RFC 6455), server side, sans-I/O: bytes in, events out; `send*` return bytes.

How this works: a `ServerConnection` starts in the HANDSHAKE state. `receive(data)` buffers the
HTTP upgrade request (at most `max_header_bytes`) and returns a `Request` event; the caller
checks path, subprotocol and origin and answers with the bytes of `accept(...)` (101) or
`reject(...)` (an HTTP error). Once OPEN, `receive` parses frames and returns:

- `Data`: payload bytes of binary frames and their continuations, unmasked, *streamed*: a frame
  is never buffered whole, so a huge frame costs no memory here (MQTT over WebSockets is a byte
  stream: frame boundaries mean nothing and the MQTT decoder enforces the packet size limit).
  Consecutive payload from one `receive` call is joined into one `Data`.
- `Ping` (the caller answers with `pong(payload)`), `Pong`, and `CloseReceived` (the caller
  answers with `close(code)` and closes the socket; later bytes are ignored).

The remote peer breaking the protocol raises `HandshakeError` (before the upgrade; carries the
HTTP status to answer) or `ProtocolError` (after; carries the close code: 1002 protocol error,
1003 text frame, 1007 bad UTF-8 in a close reason). Using this object wrongly (sending data
before `accept`) raises `LocalProtocolError`. Client frames must be masked; server frames never
are. No extensions are negotiated, so RSV bits must be zero. Never imports asyncio or socket.
"""

from __future__ import annotations

import base64
import binascii
import enum
import hashlib
import struct
from dataclasses import dataclass

__all__ = [
    "CloseReceived",
    "Data",
    "Event",
    "HandshakeError",
    "LocalProtocolError",
    "Ping",
    "Pong",
    "ProtocolError",
    "Request",
    "ServerConnection",
    "State",
]

GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
OP_CONTINUATION, OP_TEXT, OP_BINARY, OP_CLOSE, OP_PING, OP_PONG = 0x0, 0x1, 0x2, 0x8, 0x9, 0xA
_DATA_OPS = (OP_CONTINUATION, OP_TEXT, OP_BINARY)
_CONTROL_OPS = (OP_CLOSE, OP_PING, OP_PONG)
_REASONS = {400: "Bad Request", 403: "Forbidden", 404: "Not Found", 405: "Method Not Allowed",
            426: "Upgrade Required", 431: "Request Header Fields Too Large",
            503: "Service Unavailable"}


class State(enum.Enum):
    HANDSHAKE = "handshake"  # waiting for the upgrade request
    ACCEPTING = "accepting"  # request received, accept() or reject() not yet called
    OPEN = "open"
    CLOSED = "closed"


class HandshakeError(Exception):
    """The upgrade request is unacceptable: answer `reject(status)` and close."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(f"{status}: {reason}")
        self.status = status
        self.reason = reason


class ProtocolError(Exception):
    """The peer broke the framing rules: answer `close(code)` and close."""

    def __init__(self, code: int, reason: str) -> None:
        super().__init__(f"{code}: {reason}")
        self.code = code
        self.reason = reason


class LocalProtocolError(Exception):
    """This side used the connection wrongly."""


@dataclass(frozen=True, slots=True)
class Request:
    """The HTTP upgrade request."""

    path: str  # without the query string
    subprotocols: tuple[str, ...]
    origin: str | None
    headers: dict[str, str]  # lower-case names, repeated headers joined with ", "


@dataclass(frozen=True, slots=True)
class Data:
    data: bytes


@dataclass(frozen=True, slots=True)
class Ping:
    payload: bytes


@dataclass(frozen=True, slots=True)
class Pong:
    payload: bytes


@dataclass(frozen=True, slots=True)
class CloseReceived:
    code: int | None  # None: the close frame carried no status code
    reason: str


Event = Request | Data | Ping | Pong | CloseReceived


def accept_key(key: str) -> str:
    """`Sec-WebSocket-Accept` for a `Sec-WebSocket-Key`."""
    digest = hashlib.sha1((key + GUID).encode("ascii"), usedforsecurity=False).digest()
    return base64.b64encode(digest).decode("ascii")


def unmask(data: bytes | bytearray, mask: bytes, offset: int) -> bytes:
    """XOR `data` with the 4-byte `mask`, starting `offset` bytes into the frame payload."""
    size = len(data)
    if not size:
        return b""
    shift = offset % 4
    rotated = mask[shift:] + mask[:shift]
    key = (rotated * (size // 4 + 1))[:size]
    value = int.from_bytes(data, "little") ^ int.from_bytes(key, "little")
    return value.to_bytes(size, "little")


def frame(opcode: int, payload: bytes) -> bytes:
    """One unmasked, final server frame."""
    size = len(payload)
    first = 0x80 | opcode
    if size < 126:
        header = bytes((first, size))
    elif size < 65536:
        header = struct.pack("!BBH", first, 126, size)
    else:
        header = struct.pack("!BBQ", first, 127, size)
    return header + payload


def _valid_close_code(code: int) -> bool:
    return code in (1000, 1001, 1002, 1003, 1007, 1008, 1009, 1010, 1011) or (
        3000 <= code <= 4999
    )


class ServerConnection:
    """The server side of one WebSocket connection (see the module comment)."""

    def __init__(self, max_header_bytes: int = 8192) -> None:
        self.state = State.HANDSHAKE
        self.max_header_bytes = max_header_bytes
        self._buffer = bytearray()
        self._key = ""
        # the frame being read
        self._opcode = -1  # -1: no frame header read yet
        self._mask = b""
        self._remaining = 0
        self._offset = 0
        self._fragmented = False  # a data message is open (FIN not yet seen)
        self._opened = False
        self._close_sent = False

    # -- incoming ----------------------------------------------------------------------

    def receive(self, data: bytes) -> list[Event]:
        """Feed bytes from the socket; returns the complete events they finish."""
        if self.state is State.CLOSED:
            return []
        self._buffer += data
        if self.state is State.HANDSHAKE:
            return self._receive_request()
        if self.state is State.ACCEPTING:
            return []  # frames sent ahead of our 101 are kept until accept()
        return self._receive_frames()

    def _receive_request(self) -> list[Event]:
        end = self._buffer.find(b"\r\n\r\n")
        if end < 0:
            if len(self._buffer) > self.max_header_bytes:
                raise HandshakeError(431, "request header too large")
            return []
        if end + 4 > self.max_header_bytes:
            raise HandshakeError(431, "request header too large")
        head = bytes(self._buffer[:end])
        del self._buffer[:end + 4]
        request = self._parse_request(head)
        self.state = State.ACCEPTING
        return [request]

    def _parse_request(self, head: bytes) -> Request:
        try:
            text = head.decode("latin-1")
        except UnicodeDecodeError:  # pragma: no cover - latin-1 decodes every byte
            raise HandshakeError(400, "undecodable request") from None
        lines = text.split("\r\n")
        parts = lines[0].split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/"):
            raise HandshakeError(400, "not an HTTP request line")
        method, target, version = parts
        if method != "GET":
            raise HandshakeError(405, "only GET can upgrade to a WebSocket")
        if version != "HTTP/1.1":
            raise HandshakeError(400, "HTTP/1.1 required")
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if not sep or not name or name != name.strip():
                raise HandshakeError(400, "malformed header line")
            key = name.lower()
            value = value.strip()
            headers[key] = f"{headers[key]}, {value}" if key in headers else value
        tokens = {t.strip().lower() for t in headers.get("connection", "").split(",")}
        if "websocket" not in headers.get("upgrade", "").lower() or "upgrade" not in tokens:
            raise HandshakeError(400, "not a WebSocket upgrade request")
        if headers.get("sec-websocket-version") != "13":
            raise HandshakeError(426, "WebSocket version 13 required")
        key = headers.get("sec-websocket-key", "")
        try:
            if len(base64.b64decode(key, validate=True)) != 16:
                raise ValueError
        except (binascii.Error, ValueError):
            raise HandshakeError(400, "bad Sec-WebSocket-Key") from None
        self._key = key
        protocols = tuple(
            p.strip() for p in headers.get("sec-websocket-protocol", "").split(",") if p.strip()
        )
        path = target.split("?", 1)[0]
        return Request(path, protocols, headers.get("origin"), headers)

    def _receive_frames(self) -> list[Event]:
        events: list[Event] = []
        chunks: list[bytes] = []
        buffer = self._buffer
        while self.state is State.OPEN:
            if self._opcode < 0 and not self._read_header():
                break
            if self._opcode in _DATA_OPS:
                if self._remaining and buffer:
                    take = min(self._remaining, len(buffer))
                    chunks.append(unmask(buffer[:take], self._mask, self._offset))
                    del buffer[:take]
                    self._remaining -= take
                    self._offset += take
                if self._remaining:
                    break
                self._opcode = -1
                continue
            # control frame: needs its whole (small) payload
            if len(buffer) < self._remaining:
                break
            payload = unmask(buffer[:self._remaining], self._mask, 0)
            del buffer[:self._remaining]
            opcode, self._opcode = self._opcode, -1
            if chunks:
                events.append(Data(b"".join(chunks)))
                chunks = []
            events.append(self._control_event(opcode, payload))
        if chunks:
            events.append(Data(b"".join(chunks)))
        return events

    def _read_header(self) -> bool:
        buffer = self._buffer
        if len(buffer) < 2:
            return False
        first, second = buffer[0], buffer[1]
        fin = bool(first & 0x80)
        opcode = first & 0x0F
        size = second & 0x7F
        # Everything the first two bytes tell is checked before waiting for the rest.
        if first & 0x70:
            raise ProtocolError(1002, "reserved bits set without an extension")
        if not second & 0x80:
            raise ProtocolError(1002, "client frames must be masked")
        if opcode in _CONTROL_OPS:
            if not fin or size > 125:
                raise ProtocolError(1002, "control frames must be final and at most 125 bytes")
        elif opcode == OP_CONTINUATION:
            if not self._fragmented:
                raise ProtocolError(1002, "continuation frame without a message")
        elif opcode in (OP_TEXT, OP_BINARY):
            if self._fragmented:
                raise ProtocolError(1002, "new message before the last one was finished")
            if opcode == OP_TEXT:
                raise ProtocolError(1003, "MQTT is carried in binary frames only")
        else:
            raise ProtocolError(1002, f"unknown opcode {opcode:#x}")
        need = 2 + (2 if size == 126 else 8 if size == 127 else 0) + 4
        if len(buffer) < need:
            return False
        if size == 126:
            size = struct.unpack_from("!H", buffer, 2)[0]
        elif size == 127:
            size = struct.unpack_from("!Q", buffer, 2)[0]
            if size >> 63:
                raise ProtocolError(1002, "frame length has the top bit set")
        if opcode in _DATA_OPS:
            self._fragmented = not fin
        self._mask = bytes(buffer[need - 4:need])
        del buffer[:need]
        self._opcode = opcode
        self._remaining = size
        self._offset = 0
        return True

    def _control_event(self, opcode: int, payload: bytes) -> Event:
        if opcode == OP_PING:
            return Ping(payload)
        if opcode == OP_PONG:
            return Pong(payload)
        self.state = State.CLOSED
        if not payload:
            return CloseReceived(None, "")
        if len(payload) == 1:
            raise ProtocolError(1002, "close frame with a 1-byte body")
        code = struct.unpack_from("!H", payload)[0]
        if not _valid_close_code(code):
            raise ProtocolError(1002, f"invalid close code {code}")
        try:
            reason = payload[2:].decode("utf-8")
        except UnicodeDecodeError:
            raise ProtocolError(1007, "close reason is not UTF-8") from None
        return CloseReceived(code, reason)

    # -- outgoing ----------------------------------------------------------------------

    def accept(self, subprotocol: str | None) -> bytes:
        """The 101 response; frames the client sent early are parsed by `receive(b"")`."""
        if self.state is not State.ACCEPTING:
            raise LocalProtocolError(f"accept() in state {self.state.value}")
        self.state = State.OPEN
        self._opened = True
        lines = [
            "HTTP/1.1 101 Switching Protocols",
            "Upgrade: websocket",
            "Connection: Upgrade",
            f"Sec-WebSocket-Accept: {accept_key(self._key)}",
        ]
        if subprotocol:
            lines.append(f"Sec-WebSocket-Protocol: {subprotocol}")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("ascii")

    def reject(self, status: int, reason: str = "", headers: dict[str, str] | None = None
               ) -> bytes:
        """An HTTP error response (the caller closes the socket after sending it)."""
        if self.state not in (State.HANDSHAKE, State.ACCEPTING):
            raise LocalProtocolError(f"reject() in state {self.state.value}")
        self.state = State.CLOSED
        body = (reason or _REASONS.get(status, "Error")).encode("utf-8", "replace") + b"\n"
        lines = [f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}",
                 "Content-Type: text/plain; charset=utf-8",
                 f"Content-Length: {len(body)}", "Connection: close"]
        for name, value in (headers or {}).items():
            lines.append(f"{name}: {value}")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body

    def send(self, data: bytes) -> bytes:
        """One binary frame carrying `data`."""
        if self.state is not State.OPEN:
            raise LocalProtocolError(f"send() in state {self.state.value}")
        return frame(OP_BINARY, data)

    def pong(self, payload: bytes) -> bytes:
        if self.state is not State.OPEN:
            return b""
        return frame(OP_PONG, payload[:125])

    def ping(self, payload: bytes = b"") -> bytes:
        if self.state is not State.OPEN:
            raise LocalProtocolError(f"ping() in state {self.state.value}")
        return frame(OP_PING, payload[:125])

    def close(self, code: int = 1000, reason: str = "") -> bytes:
        """A close frame: once, and only after `accept` (b"" otherwise)."""
        self.state = State.CLOSED
        if not self._opened or self._close_sent:
            return b""
        self._close_sent = True
        return frame(OP_CLOSE, struct.pack("!H", code) + reason.encode("utf-8")[:123])
