"""Every limit hit has a log line and a counter (docs/security.md, "Counters"): the core's share,
driven with packets and a fake clock — max_connections (CONNACK 0x89 / 3), connect_timeout
and max_packet_size (0x95) — and their `$SYS/outpost/...` topics."""

from __future__ import annotations

import logging

import pytest

from gateway.broker.codec import decode, encode
from gateway.broker.codec.errors import MQTTProtocolError
from gateway.broker.codec.packets import MQTT_3_1_1, MQTT_5, ConnAck, Connect, Disconnect, Publish
from gateway.broker.contracts.config import LimitsConfig
from gateway.broker.engine.broker import Broker
from gateway.broker.engine.sys_topics import SECURITY_COUNTERS
from outpost.config import Config
from tests.gateway.broker.core.fakes import FakeSink, Harness


def test_max_connections_refusal_is_counted_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    h = Harness(max_connections=2)
    h.connect("a")
    h.connect("b")
    caplog.set_level(logging.INFO, "outpost.broker")
    _, sink3 = h.connect("c")
    _, sink5 = h.connect("d", version=MQTT_5)
    assert sink3.packets() == [ConnAck(False, 3)]  # 3.1.1: server unavailable
    assert [p.reason_code for p in sink5.packets()] == [0x89]  # type: ignore[attr-defined]
    assert h.broker.counters.refused_busy == 2
    assert "refused c from 127.0.0.1:1: 2 clients connected (limits.max_connections; 1 " \
        "refused so far)" in caplog.text
    # other refusals are not counted as busy
    _, bad = h.connect("x" * 300)  # client id over max_client_id_length: 0x85 / 2
    assert bad.packets() == [ConnAck(False, 2)]
    assert h.broker.counters.refused_busy == 2


def test_connect_timeout_is_counted_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    h = Harness(connect_timeout=5.0)
    connected, _ = h.connect("ok", keep_alive=0)
    silent = [FakeSink() for _ in range(3)]
    conns = [h.broker.open_connection(s, "test", f"10.0.0.{n}:1", True, h.now)
             for n, s in enumerate(silent)]
    caplog.set_level(logging.INFO, "outpost.broker")
    h.advance(4.0)
    assert h.broker.counters.refused_timeout == 0
    h.advance(2.0)
    assert all(s.closed for s in silent) and all(c.closed for c in conns)
    assert not connected.closed
    assert h.broker.counters.refused_timeout == 3
    assert "within 5 s: closing (limits.connect_timeout; 3 so far)" in caplog.text
    assert all(f"no CONNECT from 10.0.0.{n}:1 within 5 s" in caplog.text for n in range(3))
    h.advance(10.0)  # counted once per connection
    assert h.broker.counters.refused_timeout == 3
    # a flood: every one counted, the first ten logged, then every hundredth
    for n in range(120):
        h.broker.open_connection(FakeSink(), "test", f"10.0.1.{n}:1", True, h.now)
    h.advance(6.0)
    assert h.broker.counters.refused_timeout == 123
    assert caplog.text.count("no CONNECT from") == 11 and "(limits.connect_timeout; 100 so far)" \
        in caplog.text


def too_large(data: bytes, version: int, limit: int) -> MQTTProtocolError:
    with pytest.raises(MQTTProtocolError) as info:
        decode(data, version, limit)
    return info.value


def test_packets_over_max_packet_size_are_counted(caplog: pytest.LogCaptureFixture) -> None:
    h = Harness(max_packet_size=128)
    big = Publish("t", b"x" * 200, qos=0)
    conn5, sink5 = h.connect("v5", version=MQTT_5)
    sink5.packets()
    caplog.set_level(logging.INFO, "outpost.broker")
    h.broker.decode_error(conn5, too_large(encode(big, MQTT_5), MQTT_5, 128))
    assert [(type(p), p.reason_code) for p in sink5.packets()] == [  # type: ignore[attr-defined]
        (Disconnect, 0x95)]
    conn3, sink3 = h.connect("v3")
    h.broker.decode_error(conn3, too_large(encode(big, MQTT_3_1_1), MQTT_3_1_1, 128))
    assert sink3.closed
    # before CONNECT: an oversized CONNECT
    sink = FakeSink()
    conn = h.broker.open_connection(sink, "test", "10.0.0.9:1", True, h.now)
    connect = encode(Connect("c" * 200, MQTT_3_1_1, True, 60), MQTT_3_1_1)
    h.broker.decode_error(conn, too_large(connect, 0, 128))
    assert conn.closed
    assert h.broker.counters.packets_limited == 3
    assert "exceeds the maximum of 128" in caplog.text
    # other decode errors are not counted here
    h.broker.decode_error(h.connect("v3b")[0], MQTTProtocolError("bad"))
    assert h.broker.counters.packets_limited == 3


def test_counters_are_published_under_sys_outpost() -> None:
    config = Config(limits=LimitsConfig(max_connections=1, connect_timeout=1.0),
                    sys={"interval": 1.0})  # type: ignore[arg-type]
    broker = Broker(config, now=0.0)
    reader = broker.open_connection(FakeSink(), "test", "127.0.0.1:1", True, 0.0)
    broker.handle(reader, Connect("reader", MQTT_3_1_1, True, 0), 0.0)
    busy = broker.open_connection(FakeSink(), "test", "127.0.0.1:2", True, 0.0)
    broker.handle(busy, Connect("busy", MQTT_3_1_1, True, 0), 0.0)
    broker.open_connection(FakeSink(), "test", "127.0.0.1:3", True, 0.0)  # never CONNECTs
    broker.counters.packets_limited = 7
    broker.tick(2.0)
    values = {name: broker.retained.get(f"$SYS/outpost/{name}") for name, _ in SECURITY_COUNTERS}
    assert {name: m.payload for name, m in values.items() if m is not None} == {
        name: str(getattr(broker.counters, attribute)).encode()
        for name, attribute in SECURITY_COUNTERS
    }
    assert values["clients/refused/busy"].payload == b"1"  # type: ignore[union-attr]
    assert values["clients/refused/timeout"].payload == b"1"  # type: ignore[union-attr]
    assert values["limits/packet_size"].payload == b"7"  # type: ignore[union-attr]
