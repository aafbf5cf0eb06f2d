"""The sans-I/O WebSocket server: handshake, framing, streaming, errors. Every frame case is
also fed one byte at a time."""

from __future__ import annotations

import struct

import pytest

from gateway.broker.net import websocket as ws
from tests.gateway.broker.auth.support import client_frame, ws_request

KEY = b"the sample nonce"  # RFC 6455 section 1.3: dGhlIHNhbXBsZSBub25jZQ==


def opened(request: bytes | None = None) -> ws.ServerConnection:
    conn = ws.ServerConnection()
    [event] = conn.receive(request or ws_request(key=KEY))
    assert isinstance(event, ws.Request)
    conn.accept("mqtt")
    return conn


def feed(conn: ws.ServerConnection, data: bytes, bytewise: bool) -> list[ws.Event]:
    if not bytewise:
        return conn.receive(data)
    events: list[ws.Event] = []
    for i in range(len(data)):
        events.extend(conn.receive(data[i:i + 1]))
    return events


def joined(events: list[ws.Event]) -> list[ws.Event]:
    """Merge adjacent Data events (byte-wise feeding splits them)."""
    out: list[ws.Event] = []
    for event in events:
        if isinstance(event, ws.Data) and out and isinstance(out[-1], ws.Data):
            out[-1] = ws.Data(out[-1].data + event.data)
        else:
            out.append(event)
    return out


def test_rfc_handshake_example() -> None:
    conn = ws.ServerConnection()
    request = ws_request("/mqtt?x=1", "mqtt, mqttv3.1", {"Origin": "http://dash.local"}, KEY)
    [event] = conn.receive(request[:20]) + conn.receive(request[20:])
    assert event == ws.Request("/mqtt", ("mqtt", "mqttv3.1"), "http://dash.local",
                               event.headers)
    response = conn.accept("mqtt").decode()
    assert response.startswith("HTTP/1.1 101 Switching Protocols\r\n")
    assert "Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n" in response
    assert "Sec-WebSocket-Protocol: mqtt\r\n" in response and response.endswith("\r\n\r\n")


@pytest.mark.parametrize(("request_bytes", "status"), [
    (ws_request().replace(b"GET", b"POST"), 405),
    (ws_request().replace(b"Sec-WebSocket-Version: 13", b"Sec-WebSocket-Version: 8"), 426),
    (ws_request().replace(b"Upgrade: websocket", b"Upgrade: h2c"), 400),
    (ws_request().replace(b"Connection: Upgrade", b"Connection: keep-alive"), 400),
    (ws_request(key=b"short"), 400),
    (ws_request().replace(b"HTTP/1.1", b"HTTP/1.0"), 400),
    (b"hello\r\n\r\n", 400),
    (b"GET /mqtt HTTP/1.1\r\n" + b"X: " + b"a" * 9000 + b"\r\n\r\n", 431),
    (b"GET /mqtt HTTP/1.1\r\n" + b"X: " + b"a" * 9000, 431),  # no end of header in sight
])
def test_bad_requests(request_bytes: bytes, status: int) -> None:
    conn = ws.ServerConnection()
    with pytest.raises(ws.HandshakeError) as info:
        conn.receive(request_bytes)
    assert info.value.status == status
    response = conn.reject(info.value.status, info.value.reason)
    assert response.startswith(f"HTTP/1.1 {status} ".encode())
    assert conn.close() == b""  # never opened: no close frame


@pytest.mark.parametrize("bytewise", [False, True])
def test_binary_frames_fragments_and_control_frames(bytewise: bool) -> None:
    conn = opened()
    data = (client_frame(0x2, b"\x10\x0c") + client_frame(0x2, b"abc", fin=False)
            + client_frame(0x9, b"hi") + client_frame(0x0, b"def", fin=False)
            + client_frame(0x0, b"", fin=True) + client_frame(0xA, b"")
            + client_frame(0x2, b"x" * 300) + client_frame(0x8, struct.pack("!H", 1000) + b"bye")
            + b"\xde\xad\xbe\xef")  # after the close frame: ignored
    events = joined(feed(conn, data, bytewise))
    assert events == [ws.Data(b"\x10\x0cabc"), ws.Ping(b"hi"), ws.Data(b"def"), ws.Pong(b""),
                      ws.Data(b"x" * 300), ws.CloseReceived(1000, "bye")]
    assert conn.state is ws.State.CLOSED
    assert conn.close(1000) == b"\x88\x02\x03\xe8"  # the answer to the close
    assert conn.close(1000) == b""  # only once


def test_large_frames_are_streamed_not_buffered() -> None:
    conn = opened()
    payload = bytes(range(256)) * 300  # 76800 bytes: 64-bit length field
    frame = client_frame(0x2, payload, mask=b"\x9a\x01\xff\x10")
    first = conn.receive(frame[:14 + 1000])
    assert first == [ws.Data(payload[:1000])]  # delivered before the frame is complete
    rest = conn.receive(frame[14 + 1000:])
    assert rest == [ws.Data(payload[1000:])]


@pytest.mark.parametrize(("frame", "code"), [
    (client_frame(0x1, b"text"), 1003),
    (bytes((0x82, 0x02)) + b"ab", 1002),  # unmasked
    (bytes((0xC2, 0x80)) + b"\x00" * 4, 1002),  # RSV1 without an extension
    (client_frame(0x0, b"x"), 1002),  # continuation without a message
    (client_frame(0x9, b"x", fin=False), 1002),  # fragmented control frame
    (client_frame(0x9, b"x" * 126), 1002),  # control frame too long
    (client_frame(0x3, b""), 1002),  # reserved opcode
    (client_frame(0x8, b"\x03"), 1002),  # 1-byte close body
    (client_frame(0x8, struct.pack("!H", 1005)), 1002),  # reserved close code
    (client_frame(0x8, struct.pack("!H", 1000) + b"\xff"), 1007),  # reason not UTF-8
    (bytes((0x82, 0xFF)) + b"\x80" + b"\x00" * 7 + b"\x00" * 4, 1002),  # 2**63 length
])
def test_protocol_errors(frame: bytes, code: int) -> None:
    conn = opened()
    with pytest.raises(ws.ProtocolError) as info:
        conn.receive(frame)
    assert info.value.code == code


def test_new_message_inside_a_fragmented_one_is_an_error() -> None:
    conn = opened()
    conn.receive(client_frame(0x2, b"a", fin=False))
    with pytest.raises(ws.ProtocolError):
        conn.receive(client_frame(0x2, b"b"))


def test_frames_sent_before_the_101_wait_for_accept() -> None:
    conn = ws.ServerConnection()
    events = conn.receive(ws_request() + client_frame(0x2, b"early"))
    assert [type(e) for e in events] == [ws.Request]
    assert conn.receive(b"") == []  # not accepted yet: nothing parsed
    conn.accept(None)
    assert conn.receive(b"") == [ws.Data(b"early")]


def test_server_frames_and_misuse() -> None:
    conn = ws.ServerConnection()
    with pytest.raises(ws.LocalProtocolError):
        conn.send(b"x")
    conn = opened()
    assert conn.send(b"ab") == b"\x82\x02ab"
    assert conn.send(b"x" * 200)[:4] == b"\x82\x7e\x00\xc8"
    assert conn.send(b"x" * 70000)[:10] == b"\x82\x7f" + struct.pack("!Q", 70000)
    assert conn.pong(b"p") == b"\x8a\x01p"
    assert conn.ping() == b"\x89\x00"
    with pytest.raises(ws.LocalProtocolError):
        conn.reject(400)


def test_unmask_at_any_offset() -> None:
    mask = b"\x01\x02\x03\x04"
    data = bytes(range(10))
    masked = bytes(b ^ mask[i % 4] for i, b in enumerate(data))
    assert ws.unmask(masked, mask, 0) == data
    assert ws.unmask(masked[3:], mask, 3) == data[3:]
    assert ws.unmask(b"", mask, 5) == b""
