"""MQTT 5.0 request/response and metadata properties pass through the broker untouched;
payload format indicator 1 is checked for valid UTF-8 (0x99)."""

from __future__ import annotations

import queue

import pytest

from gateway.broker.codec import MQTT_3_1_1, Connect, Properties, ReasonCode, encode
from gateway.broker.codec import Subscribe as SubscribePacket
from gateway.broker.codec import Subscription as Sub
from tests.conftest import require
from tests.gateway.broker.e2e.v5_helpers import (
    Background,
    PacketTypes,
    PahoV5,
    RawV5,
    connected,
    paho_props,
    run_tool,
)
from tests.support.broker_proc import BrokerProcess

META = Properties(
    payload_format_indicator=1,
    content_type="application/json; charset=utf-8",
    response_topic="v5p/reply/\u00e9t\u00e9",
    correlation_data=b"\x00\xffcorr\x00",
    user_properties=(("z", "1"), ("a", "2"), ("z", "3"), ("\u00fcnicode", ""), ("", "empty")),
)


@pytest.mark.parametrize("qos", [0, 1, 2])
def test_metadata_properties_pass_through_untouched(broker: BrokerProcess, qos: int) -> None:
    topic = f"v5p/meta/{qos}"
    with connected(broker, f"v5p-sub-{qos}") as sub, connected(broker, f"v5p-pub-{qos}") as pub:
        sub.subscribe(topic, qos=2)
        pub.publish(topic, '{"v": "\u00b5"}'.encode(), qos, properties=META)
        [got] = sub.publishes(1)
        assert got.qos == qos
        assert got.payload == '{"v": "\u00b5"}'.encode()
        assert got.properties == META  # every property, user properties in order
        if qos:
            sub.ack(got)


def test_no_properties_are_invented(broker: BrokerProcess) -> None:
    with connected(broker, "v5p-none-sub") as sub, connected(broker, "v5p-none-pub") as pub:
        sub.subscribe("v5p/none", qos=1)
        pub.publish("v5p/none", b"\xff\xfe binary", 1)
        [got] = sub.publishes(1)
        assert got.properties == Properties()
        sub.ack(got)


def test_properties_kept_on_retained_and_queued_messages(broker: BrokerProcess) -> None:
    with connected(broker, "v5p-q-sub", session_expiry_interval=60) as sub:
        sub.subscribe("v5p/q", qos=1)
        sub.disconnect()
    with connected(broker, "v5p-q-pub") as pub:
        pub.publish("v5p/q", b"queued", 1, properties=META)
        pub.publish("v5p/ret", b"retained", 1, retain=True, properties=META)
    with connected(broker, "v5p-q-sub", clean_start=False) as sub:
        [queued] = sub.publishes(1)
        assert queued.properties == META
        sub.ack(queued)
        sub.subscribe("v5p/ret", qos=1)
        [retained] = sub.publishes(1)
        assert retained.retain and retained.properties == META
        sub.ack(retained)
    with connected(broker, "v5p-ret-clean") as pub:
        pub.publish("v5p/ret", b"", 1, retain=True)


def test_properties_dropped_for_a_311_subscriber(broker: BrokerProcess) -> None:
    with RawV5(broker) as old, connected(broker, "v5p-311-pub") as pub:
        # A 3.1.1 client on a raw socket, checked byte for byte.
        old.send_raw(encode(Connect("v5p-311", MQTT_3_1_1), MQTT_3_1_1))
        assert _read(old, 4) == b"\x20\x02\x00\x00"
        old.send_raw(encode(SubscribePacket(1, [Sub("v5p/old", 0)]), MQTT_3_1_1))
        assert _read(old, 5) == b"\x90\x03\x00\x01\x00"
        pub.publish("v5p/old", b"payload", 0, properties=META)
        pub.publish("v5p/old", b"end", 1)
        # 3.1.1 PUBLISH QoS 0: header, topic, payload, and nothing else.
        expected = b"\x30\x10\x00\x07v5p/oldpayload\x30\x0c\x00\x07v5p/oldend"
        assert _read(old, len(expected)) == expected


def _read(client: RawV5, count: int) -> bytes:
    data = b""
    while len(data) < count:
        chunk = client.sock.recv(count - len(data))
        assert chunk, f"closed after {data!r}"
        data += chunk
    return data


def test_request_response_with_paho(broker: BrokerProcess) -> None:
    with PahoV5(broker, "v5p-responder") as responder, \
            PahoV5(broker, "v5p-requester") as requester:
        responder.connect()
        requester.connect()
        responder.subscribe("v5p/rpc/request", 1)
        requester.subscribe("v5p/rpc/response/42", 1)
        props = paho_props(
            PacketTypes.PUBLISH, ResponseTopic="v5p/rpc/response/42",
            CorrelationData=b"req-42", ContentType="text/plain", PayloadFormatIndicator=1,
        )
        props.UserProperty = [("trace", "a"), ("trace", "b")]
        requester.publish("v5p/rpc/request", b"ping", 1, properties=props)
        request = responder.get()
        rp = request.properties
        assert (rp.ResponseTopic, rp.CorrelationData) == ("v5p/rpc/response/42", b"req-42")
        assert (rp.ContentType, rp.PayloadFormatIndicator) == ("text/plain", 1)
        assert rp.UserProperty == [("trace", "a"), ("trace", "b")]
        answer = paho_props(PacketTypes.PUBLISH, CorrelationData=rp.CorrelationData)
        responder.publish(rp.ResponseTopic, b"pong", 1, properties=answer)
        response = requester.get()
        assert response.payload == b"pong"
        assert response.properties.CorrelationData == b"req-42"


def test_mosquitto_tools_pass_properties(broker: BrokerProcess) -> None:
    sub = require("mosquitto_sub")
    pub = require("mosquitto_pub")
    with connected(broker, "v5p-mosq-ready") as ready:
        ready.publish("v5p/mosq", b"ready", 1, retain=True)
        with Background([sub, "-h", broker.host, "-p", str(broker.port), "-V", "mqttv5",
                         "-t", "v5p/mosq", "-C", "2", "-F", "%C|%R|%P|%p"]) as tool:
            assert tool.line() == "|||ready"
            done = run_tool([
                pub, "-h", broker.host, "-p", str(broker.port), "-V", "mqttv5", "-t", "v5p/mosq",
                "-m", "hello", "-D", "publish", "content-type", "text/x-test",
                "-D", "publish", "response-topic", "v5p/back",
                "-D", "publish", "user-property", "k1", "v1",
                "-D", "publish", "user-property", "k0", "v0",
            ])
            assert done.returncode == 0, done.stderr
            assert tool.line() == "text/x-test|v5p/back|k1:v1 k0:v0|hello"
        ready.publish("v5p/mosq", b"", 1, retain=True)


# -- payload format indicator ----------------------------------------------------------

BAD_UTF8 = b"caf\xc3"  # truncated two-byte sequence


def test_invalid_utf8_with_format_1_qos1_gets_puback_0x99(broker: BrokerProcess) -> None:
    with connected(broker, "v5p-pfi-sub") as sub, connected(broker, "v5p-pfi-pub") as pub:
        sub.subscribe("v5p/pfi", qos=1)
        ack = pub.publish("v5p/pfi", BAD_UTF8, 1, payload_format_indicator=1)
        assert ack is not None and ack.reason_code == ReasonCode.PAYLOAD_FORMAT_INVALID
        # The message was not routed; the publisher's connection stays usable.
        ok = pub.publish("v5p/pfi", "caf\u00e9".encode(), 1, payload_format_indicator=1)
        assert ok is not None and ok.reason_code == 0
        [got] = sub.publishes(1)
        assert got.payload == "caf\u00e9".encode()
        sub.ack(got)
        assert sub.sync() == []


def test_invalid_utf8_with_format_1_qos2_gets_pubrec_0x99(broker: BrokerProcess) -> None:
    with connected(broker, "v5p-pfi2-sub") as sub, connected(broker, "v5p-pfi2-pub") as pub:
        sub.subscribe("v5p/pfi2", qos=2)
        rec = pub.publish("v5p/pfi2", BAD_UTF8, 2, payload_format_indicator=1)
        assert rec is not None and rec.reason_code == ReasonCode.PAYLOAD_FORMAT_INVALID
        assert sub.sync() == []
        assert pub.sync() == []


def test_invalid_utf8_with_format_1_qos0_disconnects_0x99(broker: BrokerProcess) -> None:
    with connected(broker, "v5p-pfi0-sub") as sub, connected(broker, "v5p-pfi0-pub") as pub:
        sub.subscribe("v5p/pfi0")
        pub.publish("v5p/pfi0", BAD_UTF8, 0, payload_format_indicator=1)
        pub.expect_disconnect(ReasonCode.PAYLOAD_FORMAT_INVALID)
        assert sub.sync() == []


def test_invalid_utf8_without_format_indicator_is_delivered(broker: BrokerProcess) -> None:
    with connected(broker, "v5p-bin-sub") as sub, connected(broker, "v5p-bin-pub") as pub:
        sub.subscribe("v5p/bin", qos=1)
        pub.publish("v5p/bin", BAD_UTF8, 1, payload_format_indicator=0)
        pub.publish("v5p/bin", BAD_UTF8, 1)
        got = sub.publishes(2)
        assert [(p.payload, p.properties.payload_format_indicator) for p in got] == [
            (BAD_UTF8, 0), (BAD_UTF8, None),
        ]
        for p in got:
            sub.ack(p)


def test_paho_publisher_sees_0x99(broker: BrokerProcess) -> None:
    acks: queue.Queue[tuple[int, int]] = queue.Queue()
    with PahoV5(broker, "v5p-pfi-paho") as client:
        client.client.on_publish = lambda _c, _u, mid, rc, _p: acks.put((mid, int(rc.value)))
        client.connect()
        info = client.client.publish(
            "v5p/pfi-paho", BAD_UTF8, 1,
            properties=paho_props(PacketTypes.PUBLISH, PayloadFormatIndicator=1),
        )
        assert acks.get(timeout=5) == (info.mid, 0x99)
