"""24 abuse: a connection flood from one address is cut at accept while a client from another
address keeps working; per-address and before-CONNECT connection caps; subscription, topic
length and topic depth limits answered with reason codes and counted; a bounded fuzz run
(random bytes and mutated malformed-corpus packets, over TCP and WebSocket) leaves the broker
serving."""

from __future__ import annotations

import contextlib
import random
import socket
import time
from collections.abc import Iterator

import pytest

from gateway.broker.codec import (
    MQTT_5,
    ConnAck,
    Connect,
    Disconnect,
    PubAck,
    Publish,
    SubAck,
    encode,
)
from tests.gateway.broker.auth.support import (
    SecureBroker,
    WSSocket,
    client_frame,
    outpost_counter,
    start_secure_broker,
    tcp_client,
    tcp_socket,
    ws_client,
)
from tests.gateway.broker.e2e.helpers import wait_for
from tests.vectors.golden import GOLDEN
from tests.vectors.malformed import MALFORMED

ACCEPTED = bytes.fromhex("20020000")
FLOOD = "127.0.0.2"
OTHER = "127.0.0.3"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureBroker]:
    proc = start_secure_broker(tmp_path_factory.mktemp("abuse"), (
        "[limits]\n"
        'exempt_sources = ["127.0.0.1"]\n'  # the test's own helpers; attackers use .2, .3 ...
        "connection_rate = 5\n"
        "connection_burst = 10\n"
        "max_pending_per_source = 30\n"  # test_01 opens 30 sockets before any CONNECT
        "max_subscriptions_per_client = 3\n"
        "max_topic_length = 64\n"
        "max_topic_levels = 5\n"
        "connect_timeout = 2\n"
        '[[listeners]]\nbind = "127.0.0.1:0"\n'
        '[[listeners]]\ntype = "ws"\nbind = "127.0.0.1:0"\n'
    ), 2)
    yield proc
    proc.stop()


def answered(sock: socket.socket) -> bool:
    """Send CONNECT; True when a CONNACK comes back, False when the socket was closed."""
    sock.settimeout(5)
    try:
        sock.sendall(encode(Connect("", 4, True, 30), 4))
        return sock.recv(4) == ACCEPTED
    except (ConnectionResetError, BrokenPipeError):
        return False


def test_01_flood_from_one_address_is_cut_others_work(broker):
    address = broker.of("tcp")
    flood: list[socket.socket] = []
    try:
        for _ in range(30):  # far beyond the burst of 10 at 5/s
            flood.append(tcp_socket(address.host, address.port, source=FLOOD))
        served = sum(answered(s) for s in flood)
        assert 10 <= served < 20  # the burst, plus what the rate refilled meanwhile
        # a client from another address is not affected
        with tcp_client(address, source=OTHER) as other:
            assert other.connect("c24-01") == ACCEPTED
            other.subscribe(("c24/01", 1))
            other.publish("c24/01", b"fine", qos=1)
            assert other.receive_publishes(1)[0].payload == b"fine"
    finally:
        for sock in flood:
            sock.close()
    log = broker.log()
    assert f"refused a connection from {FLOOD}: connects too fast" in log
    assert f"refused a connection from {OTHER}" not in log
    wait_for(lambda: outpost_counter(address, "clients/refused/rate") >= 10)


def test_02_connections_per_address_and_before_connect(tmp_path):
    broker = start_secure_broker(tmp_path / "b", (
        '[limits]\nconnection_rate = 0\nmax_connections_per_source = 3\n'
        'max_pending_connections = 10\n[[listeners]]\nbind = "127.0.0.1:0"\n'), 1)
    try:
        address = broker.of("tcp")
        held = [tcp_socket(address.host, address.port, source=FLOOD) for _ in range(4)]
        assert [answered(s) for s in held] == [True, True, True, False]
        with tcp_client(address, source=OTHER) as other:
            assert other.connect("c24-02-other") == ACCEPTED
        for sock in held:
            sock.close()
        # sockets that never send CONNECT are capped across all addresses: the 11th pushes
        # out the oldest instead of being refused
        silent = [tcp_socket(address.host, address.port, source=f"127.0.1.{n + 1}")
                  for n in range(11)]
        assert answered(silent[-1]) is True
        assert answered(silent[0]) is False  # closed to make room
        assert answered(silent[1]) is True  # the others were kept and can still CONNECT
        for sock in silent:
            sock.close()
        wait_for(lambda: outpost_counter(address, "clients/refused/source") == 1)
        wait_for(lambda: outpost_counter(address, "clients/evicted/pending") == 1)
        assert "before its CONNECT to make room" in broker.log()
    finally:
        broker.stop()


def test_02b_half_open_flood_from_many_addresses_cannot_shut_others_out(tmp_path):
    """Sockets that send half a CONNECT and hold, from many addresses, fill the pending table;
    a client from another address is still answered, every time, while the attack holds."""
    broker = start_secure_broker(tmp_path / "b", (
        "[limits]\nconnection_rate = 0\nmax_pending_connections = 24\n"
        "max_pending_per_source = 3\nmax_pending_bytes = 1024\n"
        '[[listeners]]\nbind = "127.0.0.1:0"\n'), 1)
    half_connect = encode(Connect("attacker", 4, True, 30), 4)[:8]
    held: list[socket.socket] = []

    def attack(first: int, addresses: int) -> None:
        for n in range(first, first + addresses):
            for _ in range(3):
                sock = tcp_socket(address.host, address.port, source=f"127.0.2.{n}")
                sock.sendall(half_connect)
                held.append(sock)

    try:
        address = broker.of("tcp")
        attack(1, 10)  # 30 half-open sockets for 24 slots: 6 already pushed out
        for probe in range(5):
            with tcp_client(address, source=OTHER) as other:
                assert other.connect(f"c24-02b-{probe}") == ACCEPTED
            attack(11 + probe, 1)  # the attack goes on: 3 more from a new address each time
        # a fourth half-open socket from one address (the newest, still holding 3): refused
        extra = tcp_socket(address.host, address.port, source="127.0.2.15")
        with contextlib.closing(extra):
            extra.settimeout(5)
            assert extra.recv(1) == b""
        # more than max_pending_bytes before a complete CONNECT: closed
        big = tcp_socket(address.host, address.port, source="127.0.3.1")
        with contextlib.closing(big):
            big.sendall(encode(Connect("x" * 2000, 4, True, 30), 4)[:1500])
            big.settimeout(5)
            assert big.recv(1) == b""
        wait_for(lambda: outpost_counter(address, "clients/evicted/pending") >= 6 + 5 * 3)
        log = broker.log()
        assert "has too many connections before CONNECT (limits.max_pending_per_source)" in log
        assert "before a complete CONNECT (limits.max_pending_bytes" in log
        assert f"from {OTHER}" not in log
    finally:
        for sock in held:
            sock.close()
        broker.stop()


def test_02c_long_client_ids_are_clipped_and_refusals_sampled_per_address(tmp_path):
    broker = start_secure_broker(tmp_path / "b", '[[listeners]]\nbind = "127.0.0.1:0"\n', 1)
    try:
        address = broker.of("tcp")
        before = len(broker.log().encode())
        for _ in range(30):
            with tcp_client(address) as c:  # 127.0.0.1: exempt from the per-address rate
                assert c.connect("x" * 65_535) == bytes.fromhex("20020002")  # id rejected
        wait_for(lambda: "(30 from there so far)" not in broker.log()
                 and "(10 from there so far)" in broker.log())
        lines = [line for line in broker.log().splitlines() if "refused x" in line]
        assert len(lines) == 10  # the first ten from 127.0.0.1, then every hundredth
        assert all("...(65535 chars)" in line and len(line) < 300 for line in lines)
        assert len(broker.log().encode()) - before < 30 * 1024  # was 65 KiB per CONNECT
        # another address still gets its first lines
        with tcp_client(address, source=OTHER) as c:
            assert c.connect("y" * 300) == bytes.fromhex("20020002")
        wait_for(lambda: "refused " + "y" * 64 + "...(300 chars) from 127.0.0.3" in broker.log())
    finally:
        broker.stop()


def test_03_subscription_and_topic_limits(broker):
    with tcp_client(broker.of("tcp"), version=MQTT_5) as c:
        c.connect("c24-03")
        suback = c.decode(c.subscribe(("a", 0), ("b", 0), ("c", 0), ("d", 0), ("a", 1)))
        assert isinstance(suback, SubAck) and suback.reason_codes == [0, 0, 0, 0x97, 1]
        too_deep = c.decode(c.subscribe(("a/b/c/d/e/f", 0)))  # over the limit anyway: 4th sub
        assert isinstance(too_deep, SubAck) and too_deep.reason_codes == [0x8F]
        [ack] = [c.decode(f) for f in c.publish("x/" * 5 + "y", b"deep", qos=1)]
        assert isinstance(ack, PubAck) and ack.reason_code == 0x90  # Topic Name invalid
        [ack] = [c.decode(f) for f in c.publish("t" * 65, b"long", qos=1)]
        assert isinstance(ack, PubAck) and ack.reason_code == 0x90
        [ack] = [c.decode(f) for f in c.publish("t" * 64, b"just fits", qos=1)]
        assert isinstance(ack, PubAck) and ack.reason_code == 0
    with tcp_client(broker.of("tcp")) as v3:
        v3.connect("c24-03-v3")
        assert v3.subscribe(("q/" * 5 + "r", 0)) == bytes.fromhex("9003000180")
    address = broker.of("tcp")
    wait_for(lambda: outpost_counter(address, "limits/subscriptions") >= 1)
    wait_for(lambda: outpost_counter(address, "limits/topic") >= 3)
    assert "over the limit" in broker.log()


def test_05_connections_timeout_and_packet_size_are_counted(tmp_path):
    broker = start_secure_broker(tmp_path / "b", (
        "[limits]\nmax_connections = 2\nconnect_timeout = 0.5\nmax_packet_size = 1024\n"
        '[[listeners]]\nbind = "127.0.0.1:0"\n'), 1)
    address = broker.of("tcp")

    def accepted() -> bool:
        with tcp_client(address) as probe:
            return probe.connect("") == ACCEPTED

    try:
        with tcp_client(address) as a, tcp_client(address) as b, \
                tcp_client(address, version=MQTT_5) as c5, tcp_client(address) as c3:
            assert a.connect("c24-05-a") == ACCEPTED and b.connect("c24-05-b") == ACCEPTED
            refused = c5.decode(c5.connect("c24-05-c5"))
            assert isinstance(refused, ConnAck) and refused.reason_code == 0x89  # Server busy
            assert c3.connect("c24-05-c3") == bytes.fromhex("20020003")  # Server unavailable
            a.disconnect()
            b.disconnect()
        wait_for(accepted)
        # a socket that never sends CONNECT is closed after connect_timeout
        silent = tcp_socket(address.host, address.port)
        with contextlib.closing(silent):
            silent.settimeout(5)
            assert silent.recv(1) == b""
        # a packet over max_packet_size: DISCONNECT 0x95 (3.1.1: closed)
        with tcp_client(address, version=MQTT_5) as big5, tcp_client(address) as big3:
            ack = big5.decode(big5.connect("c24-05-big5"))
            assert isinstance(ack, ConnAck) and ack.reason_code == 0
            big5.send(Publish("c24/05", b"x" * 2000, qos=0))
            disconnect = big5.decode(big5.expect_closed())
            assert isinstance(disconnect, Disconnect) and disconnect.reason_code == 0x95
            assert big3.connect("c24-05-big3") == ACCEPTED
            big3.send(Publish("c24/05", b"x" * 2000, qos=0))
            assert big3.expect_closed() == b""
        wait_for(lambda: outpost_counter(address, "clients/refused/busy") >= 2)
        wait_for(lambda: outpost_counter(address, "clients/refused/timeout") >= 1)
        wait_for(lambda: outpost_counter(address, "limits/packet_size") == 2)
        log = broker.log()
        assert "refused c24-05-c5 from" in log and "(limits.max_connections; 1 refused" in log
        assert "(limits.connect_timeout; 1 so far)" in log
        assert "packet of 20" in log and "exceeds the maximum of 1024" in log
    finally:
        broker.stop()


def mutate(data: bytes, rng: random.Random) -> bytes:
    """Flip, drop, insert or truncate a few bytes."""
    buf = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        choice = rng.random()
        if choice < 0.4 and buf:
            buf[rng.randrange(len(buf))] = rng.randrange(256)
        elif choice < 0.6 and buf:
            del buf[rng.randrange(len(buf))]
        elif choice < 0.8:
            buf.insert(rng.randrange(len(buf) + 1), rng.randrange(256))
        elif buf:
            del buf[rng.randrange(len(buf)):]
    return bytes(buf)


def test_04_fuzz_leaves_the_broker_serving(broker):
    rng = random.Random(0x24)
    address, ws = broker.of("tcp"), broker.of("ws")
    connect = encode(Connect("", 4, True, 30), 4)
    connect5 = encode(Connect("", MQTT_5, True, 30), MQTT_5)
    corpus = [case.data for case in MALFORMED] + [case.data for case in GOLDEN
                                                  if hasattr(case, "data")]
    deadline = time.monotonic() + 15
    sent = 0
    while sent < 300 and time.monotonic() < deadline:
        kind = rng.random()
        if kind < 0.3:
            payload = bytes(rng.randrange(256) for _ in range(rng.randint(1, 200)))
        elif kind < 0.65:
            payload = (connect if rng.random() < 0.5 else connect5) + mutate(
                rng.choice(corpus), rng)
        else:
            payload = mutate(rng.choice(corpus), rng)
        try:
            if sent % 10 == 9:  # the same through the WebSocket listener
                raw = tcp_socket(ws.host, ws.port)
                wsock = WSSocket(raw)
                raw.sendall(client_frame(0x2, payload)
                            + (mutate(client_frame(0x2, payload), rng) if kind < 0.5 else b""))
                wsock.settimeout(0.05)
                with contextlib.suppress(TimeoutError):
                    wsock.recv(4096)
                raw.close()
            else:
                with socket.create_connection((address.host, address.port), timeout=2) as sock:
                    sock.sendall(payload)
                    sock.settimeout(0.02)
                    with contextlib.suppress(TimeoutError, ConnectionResetError):
                        sock.recv(4096)
        except (ConnectionResetError, BrokenPipeError):
            pass
        sent += 1
    assert sent >= 100
    assert broker.alive()
    with tcp_client(address) as c, ws_client(ws) as w:
        assert c.connect("c24-04") == ACCEPTED and w.connect("c24-04-ws") == ACCEPTED
        c.subscribe(("c24/04", 1))
        w.publish("c24/04", b"alive", qos=1)
        [message] = c.receive_publishes(1)
        assert isinstance(message, Publish) and message.payload == b"alive"
    assert "Traceback" not in broker.log()
