"""MQTT over a WebSocket, server side, sans-I/O: wsproto (RFC 6455) plus the listener's rules.

How this works: `MQTTWebSocket.receive(data)` takes bytes from the socket and returns what to
do, in order: `Payload` (MQTT bytes for the broker), `Reply` (bytes for the peer: the 101, a
pong), `Refused` (an HTTP error to send before closing) or `Closed` (a close frame to send
before closing). `send(mqtt)` wraps MQTT bytes in one BINARY frame; `close(code)` gives the
close frame. Never imports asyncio or socket.

- The upgrade request is parsed by h11 first (at most `max_header_bytes`, else 431), then handed
  to wsproto's handshake (`initiate_upgrade_connection`), which checks what RFC 6455 asks of it
  (Upgrade and Connection headers, Host, version 13 or 426, a key) and writes the 101. h11
  comes first because wsproto's own server handshake keeps the bytes after the request inside
  its HTTP parser: frames a client sends right behind its request, before our 101, would be
  lost. Here they are h11's trailing data, handed to the wsproto `Connection` that reads the
  frames from then on (its `trailing_data`); both handshake parsers are dropped then (about
  2 KB per connection stay). Before the 101, the listener's rules: the path (404), the Origin
  (403), the subprotocol (`mqtt`, also the older `mqttv3.1`; a client that offers only others
  gets 400, one that offers none is accepted without one).
- Open: wsproto streams frames (a frame's payload is handed out as it arrives, never buffered
  whole) and we pass binary payload straight on: MQTT over WebSockets is a byte stream, frame
  and message boundaries mean nothing to it. A message larger than `max_message_size` (the
  broker's max packet size) is refused with 1009 before its excess reaches the broker. Text
  frames get 1003, framing errors wsproto finds 1002 (1007 for bad UTF-8), a peer's close is
  answered with its code (1000 when it gave none).
"""

from __future__ import annotations

import base64
import binascii
import http
from collections.abc import Sequence
from dataclasses import dataclass

import h11
from wsproto import ConnectionType, WSConnection
from wsproto.connection import Connection, ConnectionState
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Ping,
    RejectConnection,
    Request,
    TextMessage,
)
from wsproto.frame_protocol import CloseReason
from wsproto.utilities import RemoteProtocolError

__all__ = ["SUBPROTOCOLS", "Closed", "Event", "MQTTWebSocket", "Payload", "Refused", "Reply"]

SUBPROTOCOLS = ("mqtt", "mqttv3.1")  # accepted; the first of them the client offers is chosen
MAX_HEADER_BYTES = 8192


@dataclass(frozen=True, slots=True)
class Payload:
    """MQTT bytes from the peer."""

    data: bytes


@dataclass(frozen=True, slots=True)
class Reply:
    """Bytes for the peer (the 101 response, a pong)."""

    data: bytes


@dataclass(frozen=True, slots=True)
class Refused:
    """The upgrade is refused: send `data` (an HTTP error response), then close the socket."""

    status: int
    reason: str
    data: bytes


@dataclass(frozen=True, slots=True)
class Closed:
    """The WebSocket ends: send `data` (a close frame), then close the socket."""

    code: int
    reason: str
    data: bytes
    by_peer: bool  # the peer closed; otherwise it broke the protocol or a limit


Event = Payload | Reply | Refused | Closed


class MQTTWebSocket:
    """The server side of one MQTT-over-WebSocket connection (see the module comment)."""

    def __init__(self, path: str, origins: Sequence[str] | None, max_message_size: int,
                 max_header_bytes: int = MAX_HEADER_BYTES) -> None:
        self.path = path
        self.origins = origins
        self.max_message_size = max_message_size
        self.max_header_bytes = max_header_bytes
        # until the upgrade: the request's parser; after it: the frames' (the handshake's
        # objects are dropped then, a connection keeps only what it needs)
        self._http: h11.Connection | None = h11.Connection(
            h11.SERVER, max_incomplete_event_size=max_header_bytes)
        self._received = 0  # bytes fed to h11 before the request was complete
        self._ws: Connection | None = None
        self._message_bytes = 0  # of the binary message being received
        self._finished = False  # refused or closed: later bytes are ignored

    @property
    def is_open(self) -> bool:
        """The 101 was sent and no close frame yet: MQTT bytes can be sent."""
        return self._ws is not None and self._ws.state is ConnectionState.OPEN

    # -- incoming ----------------------------------------------------------------------

    def receive(self, data: bytes) -> list[Event]:
        """Feed bytes from the socket; returns what they call for, in order."""
        if self._finished:
            return []
        if self._ws is None:
            return self._receive_request(data)
        self._ws.receive_data(data)
        return self._receive_frames(self._ws)

    def _receive_request(self, data: bytes) -> list[Event]:
        parser = self._http
        assert parser is not None
        parser.receive_data(data)
        self._received += len(data)
        try:
            request = parser.next_event()
            if request is h11.NEED_DATA:
                return []
            assert isinstance(request, h11.Request)
            end = parser.next_event()
        except h11.RemoteProtocolError as exc:
            return [self._refuse(exc.error_status_hint, str(exc))]
        if not isinstance(end, h11.EndOfMessage):
            return [self._refuse(400, "an upgrade request has no body")]
        trailing = parser.trailing_data[0]
        if self._received - len(trailing) > self.max_header_bytes:
            return [self._refuse(431, "request header too large")]
        refusal = self._check_http(request)
        if refusal is not None:
            return [refusal]
        handshake = WSConnection(ConnectionType.SERVER)
        try:
            handshake.initiate_upgrade_connection(list(request.headers), request.target)
        except RemoteProtocolError as exc:
            hint = exc.event_hint
            if isinstance(hint, RejectConnection):
                return [self._refuse(hint.status_code, str(exc), list(hint.headers))]
            return [self._refuse(400, str(exc))]
        except UnicodeError:  # wsproto decodes Host, Connection, ... and the target strictly
            return [self._refuse(400, "non-ASCII bytes in the upgrade request")]
        [upgrade] = handshake.events()
        assert isinstance(upgrade, Request)
        refusal, subprotocol = self._check_upgrade(upgrade)
        if refusal is not None:
            return [refusal]
        reply = Reply(handshake.send(AcceptConnection(subprotocol=subprotocol)))
        self._http = None
        # frames the client sent ahead of our 101 are the parser's trailing data
        self._ws = ws = Connection(ConnectionType.SERVER, trailing_data=trailing)
        return [reply, *self._receive_frames(ws)]

    def _check_http(self, request: h11.Request) -> Refused | None:
        """What wsproto leaves to the server: the method, HTTP/1.1 and the key's form."""
        if request.method != b"GET":
            return self._refuse(405, "only GET can upgrade to a WebSocket", [(b"Allow", b"GET")])
        if request.http_version != b"1.1":
            return self._refuse(400, "HTTP/1.1 required")
        key = next((v for n, v in request.headers if n == b"sec-websocket-key"), b"")
        try:
            if len(base64.b64decode(key, validate=True)) != 16:
                raise ValueError
        except (binascii.Error, ValueError):
            return self._refuse(400, "bad Sec-WebSocket-Key")
        return None

    def _check_upgrade(self, request: Request) -> tuple[Refused | None, str | None]:
        """The listener's rules: path, Origin, subprotocol (chosen in the client's order)."""
        path = request.target.split("?", 1)[0]
        if path != self.path:
            return self._refuse(404, f"MQTT is served at {self.path}"), None
        origin = next((v.decode("latin-1") for n, v in request.extra_headers
                       if n == b"origin"), None)
        if self.origins and origin is not None and origin not in self.origins:
            return self._refuse(403, f"origin {origin} is not allowed"), None
        chosen = next((p for p in request.subprotocols if p in SUBPROTOCOLS), None)
        if request.subprotocols and chosen is None:
            return self._refuse(400, "subprotocol mqtt required"), None
        return None, chosen

    def _refuse(self, status: int, reason: str,
                headers: list[tuple[bytes, bytes]] | None = None) -> Refused:
        self._finished = True
        body = reason.encode("utf-8", "replace") + b"\n"
        response = h11.Response(
            status_code=status, reason=http.HTTPStatus(status).phrase,
            headers=[*(headers or []), (b"Content-Type", b"text/plain; charset=utf-8"),
                     (b"Content-Length", str(len(body)).encode()), (b"Connection", b"close")],
        )
        # h11 answers even a request it could not parse (a server may send its 4xx then)
        parser = self._http
        assert parser is not None
        data = (parser.send(response) or b"") + (parser.send(h11.Data(data=body)) or b"")
        return Refused(status, reason, data)

    def _receive_frames(self, ws: Connection) -> list[Event]:
        events: list[Event] = []
        payload: list[bytes | bytearray] = []  # consecutive binary payload, passed on as one
        closed: Closed | None = None
        for event in ws.events():
            if isinstance(event, BytesMessage):
                self._message_bytes += len(event.data)
                if self._message_bytes > self.max_message_size:
                    closed = self._close_for(CloseReason.MESSAGE_TOO_BIG,
                                             f"message over {self.max_message_size} bytes")
                    break
                if event.message_finished:
                    self._message_bytes = 0
                payload.append(event.data)
                continue
            if payload:
                events.append(Payload(b"".join(payload)))
                payload = []
            if isinstance(event, Ping):
                events.append(Reply(ws.send(event.response())))
            elif isinstance(event, TextMessage):
                closed = self._close_for(CloseReason.UNSUPPORTED_DATA,
                                         "MQTT is carried in binary frames only")
                break
            elif isinstance(event, CloseConnection):
                closed = self._closed_by(ws, event)
                break
            # a Pong needs nothing
        if payload:
            events.append(Payload(b"".join(payload)))
        if closed is not None:
            events.append(closed)
        return events

    def _closed_by(self, ws: Connection, event: CloseConnection) -> Closed:
        """A close frame from the peer, or wsproto's report of a framing error."""
        if ws.state is not ConnectionState.REMOTE_CLOSING:  # a framing error: still OPEN
            return self._close_for(event.code, event.reason or "")
        code = CloseReason.NORMAL_CLOSURE if event.code == CloseReason.NO_STATUS_RCVD else (
            event.code)
        self._finished = True
        return Closed(event.code, event.reason or "", ws.send(CloseConnection(code)), True)

    def _close_for(self, code: int, reason: str) -> Closed:
        return Closed(code, reason, self.close(code, reason), False)

    # -- outgoing ----------------------------------------------------------------------

    def send(self, data: bytes) -> bytes:
        """One BINARY frame carrying `data` (b"" before the 101 or after a close)."""
        if not self.is_open:
            return b""
        assert self._ws is not None
        return self._ws.send(BytesMessage(data=data))

    def close(self, code: int = CloseReason.NORMAL_CLOSURE, reason: str = "") -> bytes:
        """A close frame: once, and only after the 101 (b"" otherwise)."""
        self._finished = True
        ws = self._ws
        if ws is None or ws.state not in (ConnectionState.OPEN,
                                           ConnectionState.REMOTE_CLOSING):
            return b""
        return ws.send(CloseConnection(code, reason))
