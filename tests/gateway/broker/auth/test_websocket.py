"""The sans-I/O MQTT-over-WebSocket adapter (wsproto and the listener's rules): handshake,
refusals, framing, streaming, limits and errors. Frame cases are also fed one byte at a time."""

from __future__ import annotations

import base64
import hashlib
import struct

import pytest

from gateway.broker.net import websocket as ws
from tests.gateway.broker.auth.support import client_frame, ws_request

KEY = b"the sample nonce"  # RFC 6455 section 1.3: dGhlIHNhbXBsZSBub25jZQ==
MAX = 1024


def adapter(origins: list[str] | None = None, max_message_size: int = MAX
            ) -> ws.MQTTWebSocket:
    return ws.MQTTWebSocket("/mqtt", origins, max_message_size)


def feed(conn: ws.MQTTWebSocket, data: bytes, bytewise: bool = False) -> list[ws.Event]:
    """Feed `data` (whole or one byte at a time); adjacent payloads are joined."""
    chunks = [data[i:i + 1] for i in range(len(data))] if bytewise else [data]
    out: list[ws.Event] = []
    for chunk in chunks:
        for event in conn.receive(chunk):
            if isinstance(event, ws.Payload) and out and isinstance(out[-1], ws.Payload):
                out[-1] = ws.Payload(out[-1].data + event.data)
            else:
                out.append(event)
    return out


def opened(max_message_size: int = MAX) -> ws.MQTTWebSocket:
    conn = adapter(max_message_size=max_message_size)
    [reply] = conn.receive(ws_request(key=KEY))
    assert isinstance(reply, ws.Reply) and reply.data.startswith(b"HTTP/1.1 101 ")
    assert conn.is_open
    return conn


def headers_of(response: bytes) -> dict[str, str]:
    lines = response.split(b"\r\n\r\n", 1)[0].decode().split("\r\n")[1:]
    return {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines)}


@pytest.mark.parametrize("bytewise", [False, True])
def test_rfc_handshake_example(bytewise: bool) -> None:
    conn = adapter()
    request = ws_request("/mqtt?x=1", "mqtt, mqttv3.1", {"Origin": "http://dash.local"}, KEY)
    [reply] = feed(conn, request, bytewise)
    assert isinstance(reply, ws.Reply)
    assert reply.data.startswith(b"HTTP/1.1 101 Switching Protocols\r\n")
    headers = headers_of(reply.data)
    assert headers["sec-websocket-accept"] == "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
    expected = base64.b64encode(hashlib.sha1(
        base64.b64encode(KEY) + b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11",
        usedforsecurity=False).digest()).decode()
    assert headers["sec-websocket-accept"] == expected
    assert headers["sec-websocket-protocol"] == "mqtt"


@pytest.mark.parametrize(("offered", "chosen"), [
    ("chat, mqtt, mqttv3.1", "mqtt"),  # the first we know, in the client's order
    ("mqttv3.1, mqtt", "mqttv3.1"),
    ("mqttv3.1", "mqttv3.1"),
    (None, None),  # none offered: accepted without one
])
def test_subprotocol_choice(offered: str | None, chosen: str | None) -> None:
    conn = adapter()
    [reply] = conn.receive(ws_request(protocol=offered))
    assert isinstance(reply, ws.Reply) and reply.data.startswith(b"HTTP/1.1 101 ")
    assert headers_of(reply.data).get("sec-websocket-protocol") == chosen


@pytest.mark.parametrize(("request_bytes", "status"), [
    (ws_request().replace(b"GET", b"POST"), 405),
    (ws_request().replace(b"Sec-WebSocket-Version: 13", b"Sec-WebSocket-Version: 8"), 426),
    (ws_request().replace(b"Upgrade: websocket", b"Upgrade: h2c"), 400),
    (ws_request().replace(b"Connection: Upgrade", b"Connection: keep-alive"), 400),
    (ws_request().replace(b"Host: localhost\r\n", b""), 400),
    (ws_request(key=b"short"), 400),
    (ws_request().replace(b"HTTP/1.1", b"HTTP/1.0"), 400),
    (b"hello\r\n\r\n", 400),
    (ws_request().replace(b"Host: localhost", b"Host: l\xf6calhost"), 400),  # not ASCII
    (ws_request().replace(b"Connection: Upgrade", b"Connection: Upgrade, \xe9"), 400),
    (ws_request().replace(b"GET /mqtt ", b"GET /mqtt\xe9 "), 400),
    (b"GET /mqtt HTTP/1.1\r\nHost: x\r\nX: " + b"a" * 9000 + b"\r\n\r\n", 431),
    (b"GET /mqtt HTTP/1.1\r\nX: " + b"a" * 9000, 431),  # no end of header in sight
    (ws_request("/other"), 404),
    (ws_request(protocol="chat, wamp"), 400),  # only subprotocols we do not speak
    (ws_request(extra={"Origin": "https://evil.example"}), 403),
])
def test_refused_upgrades(request_bytes: bytes, status: int) -> None:
    conn = adapter(origins=["https://dash.local"])
    [refused] = conn.receive(request_bytes)
    assert isinstance(refused, ws.Refused) and refused.status == status
    assert refused.data.startswith(f"HTTP/1.1 {status} ".encode())
    assert refused.data.endswith(refused.reason.encode() + b"\n")  # the reason as the body
    if status == 426:
        assert headers_of(refused.data)["sec-websocket-version"] == "13"
    assert conn.receive(client_frame(0x2, b"late")) == []  # refused: nothing more
    assert conn.send(b"x") == b"" and conn.close() == b""  # never opened: no frames


def test_listed_origin_and_no_origin_are_accepted() -> None:
    for extra in ({"Origin": "https://dash.local"}, {}):
        conn = adapter(origins=["https://dash.local"])
        [reply] = conn.receive(ws_request(extra=extra))
        assert isinstance(reply, ws.Reply)


@pytest.mark.parametrize("bytewise", [False, True])
def test_fragments_and_control_frames(bytewise: bool) -> None:
    conn = opened()
    data = (client_frame(0x2, b"\x10\x0c") + client_frame(0x2, b"abc", fin=False)
            + client_frame(0x9, b"hi") + client_frame(0x0, b"def", fin=False)
            + client_frame(0x0, b"", fin=True) + client_frame(0xA, b"")
            + client_frame(0x2, b"x" * 300) + client_frame(0x8, struct.pack("!H", 1000) + b"bye")
            + b"\xde\xad\xbe\xef")  # after the close frame: ignored
    events = feed(conn, data, bytewise)
    # the pong needs nothing, so the payload around it is passed on as one
    assert events == [ws.Payload(b"\x10\x0cabc"), ws.Reply(b"\x8a\x02hi"),
                      ws.Payload(b"def" + b"x" * 300),
                      ws.Closed(1000, "bye", b"\x88\x02\x03\xe8", True)]
    assert not conn.is_open
    assert conn.close(1000) == b""  # already answered


def test_close_without_a_code_is_answered_with_1000() -> None:
    conn = opened()
    [closed] = conn.receive(client_frame(0x8, b""))
    assert isinstance(closed, ws.Closed) and closed.by_peer
    assert closed.data == b"\x88\x02\x03\xe8"


def test_large_frames_are_streamed_not_buffered() -> None:
    conn = opened(max_message_size=1 << 20)
    payload = bytes(range(256)) * 300  # 76800 bytes: 64-bit length field
    frame = client_frame(0x2, payload, mask=b"\x9a\x01\xff\x10")
    assert conn.receive(frame[:14 + 1000]) == [ws.Payload(payload[:1000])]  # before the end
    assert conn.receive(frame[14 + 1000:]) == [ws.Payload(payload[1000:])]


@pytest.mark.parametrize(("frame", "code"), [
    (client_frame(0x1, b"text"), 1003),
    (client_frame(0x1, b"\xff"), 1007),  # a text frame that is not even UTF-8
    (bytes((0x82, 0x02)) + b"ab", 1002),  # unmasked
    (bytes((0xC2, 0x80)) + b"\x00" * 4, 1002),  # RSV1 without an extension
    (client_frame(0x0, b"x"), 1002),  # continuation without a message
    (client_frame(0x9, b"x", fin=False), 1002),  # fragmented control frame
    (bytes((0x89, 0xFE, 0x00, 0x7E)) + b"\x00" * 130, 1002),  # control frame too long
    (client_frame(0x3, b""), 1002),  # reserved opcode
    (client_frame(0x8, b"\x03"), 1002),  # 1-byte close body
    (client_frame(0x8, struct.pack("!H", 1005)), 1002),  # reserved close code
    (client_frame(0x8, struct.pack("!H", 1000) + b"\xff"), 1007),  # reason not UTF-8
    (bytes((0x82, 0xFF)) + b"\x80" + b"\x00" * 7 + b"\x00" * 4, 1002),  # 2**63 length
    (client_frame(0x2, b"a", fin=False) + client_frame(0x2, b"b"), 1002),  # message in message
])
def test_protocol_errors(frame: bytes, code: int) -> None:
    conn = opened()
    events = conn.receive(frame)
    closed = events[-1]
    assert isinstance(closed, ws.Closed) and closed.code == code and not closed.by_peer
    assert closed.data[:4] == b"\x88" + bytes((len(closed.data) - 2,)) + struct.pack("!H", code)
    assert conn.receive(client_frame(0x2, b"late")) == []
    assert conn.send(b"x") == b""


@pytest.mark.parametrize("bytewise", [False, True])
def test_oversized_messages_are_refused_with_1009(bytewise: bool) -> None:
    conn = opened()
    # messages of exactly the limit pass, one after the other (the count is per message)
    fits = client_frame(0x2, b"a" * (MAX - 24), fin=False) + client_frame(0x0, b"b" * 24)
    message = b"a" * (MAX - 24) + b"b" * 24
    assert feed(conn, fits + fits, bytewise) == [ws.Payload(message * 2)]
    # one fragment too many: the excess never reaches the broker
    over = client_frame(0x2, b"c" * MAX, fin=False) + client_frame(0x0, b"d")
    events = feed(conn, over, bytewise)
    assert events[:-1] == [ws.Payload(b"c" * MAX)]
    closed = events[-1]
    assert isinstance(closed, ws.Closed) and closed.code == 1009
    assert closed.data[2:4] == struct.pack("!H", 1009)


def test_frames_sent_before_the_101_are_kept() -> None:
    conn = adapter()
    events = conn.receive(ws_request() + client_frame(0x2, b"early") + client_frame(0x9, b"p"))
    assert [type(e) for e in events] == [ws.Reply, ws.Payload, ws.Reply]
    assert events[1:] == [ws.Payload(b"early"), ws.Reply(b"\x8a\x01p")]


def test_server_frames() -> None:
    conn = adapter()
    assert conn.send(b"x") == b""  # not open yet
    conn = opened()
    assert conn.send(b"ab") == b"\x82\x02ab"
    assert conn.send(b"x" * 200)[:4] == b"\x82\x7e\x00\xc8"
    assert conn.send(b"x" * 70000)[:10] == b"\x82\x7f" + struct.pack("!Q", 70000)
    assert conn.close() == b"\x88\x02\x03\xe8"
    assert conn.close() == b"" and conn.send(b"x") == b""  # once; nothing after it
