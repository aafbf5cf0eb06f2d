"""MQTT 5.0 bad input: a malformed packet or protocol error on a v5 connection gets a
DISCONNECT with the right reason code and the connection is closed; other clients carry on.

Each case is raw bytes sent after a successful CONNECT, whole and also split one byte per
`send`, and the expected reason code."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gateway.broker.codec import ConnAck, Publish, ReasonCode
from tests.gateway.broker.e2e.v5_helpers import RawV5, connected
from tests.support.broker_proc import BrokerProcess

MALFORMED = ReasonCode.MALFORMED_PACKET
PROTOCOL = ReasonCode.PROTOCOL_ERROR


def _publish(topic: bytes, props: bytes = b"\x00", payload: bytes = b"x", first: int = 0x30,
             pid: bytes = b"") -> bytes:
    body = len(topic).to_bytes(2, "big") + topic + pid + props + payload
    return bytes((first, len(body))) + body


def _subscribe(filt: bytes, options: int = 0, props: bytes = b"\x00", first: int = 0x82) -> bytes:
    body = b"\x00\x01" + props + len(filt).to_bytes(2, "big") + filt + bytes((options,))
    return bytes((first, len(body))) + body


CASES: list[tuple[str, bytes, int]] = [
    ("reserved packet type 0", b"\x00\x00", MALFORMED),
    ("SUBSCRIBE with flags 0000", _subscribe(b"a", first=0x80), MALFORMED),
    ("PUBREL with flags 0000", b"\x60\x02\x00\x01", MALFORMED),
    ("PUBLISH QoS 3", _publish(b"a", first=0x36, pid=b"\x00\x01"), MALFORMED),
    ("PUBLISH DUP with QoS 0", _publish(b"a", first=0x38), MALFORMED),
    ("remaining length of five bytes", b"\x30\xff\xff\xff\xff\x01", MALFORMED),
    ("remaining length not minimal", b"\xc0\x80\x00", MALFORMED),
    ("PINGREQ with a body", b"\xc0\x01\x00", MALFORMED),
    ("topic is not UTF-8", _publish(b"a\xff"), MALFORMED),
    ("topic contains U+0000", _publish(b"a\x00b"), MALFORMED),
    ("topic contains a surrogate", _publish(b"a\xed\xa0\x80"), MALFORMED),
    ("wildcard in a topic name", _publish(b"a/+"), ReasonCode.TOPIC_NAME_INVALID),
    ("subscription identifier from a client", _publish(b"v5m/sid", props=b"\x02\x0b\x4d"),
     PROTOCOL),
    ("wildcard in the response topic", _publish(b"a", props=b"\x06\x08\x00\x03a/#"),
     ReasonCode.TOPIC_NAME_INVALID),
    ("QoS 1 with packet id 0", _publish(b"a", first=0x32, pid=b"\x00\x00"), PROTOCOL),
    ("unknown property 0x7F", _publish(b"a", props=b"\x02\x7f\x00"), MALFORMED),
    ("property not allowed in PUBLISH", _publish(b"a", props=b"\x05\x11\x00\x00\x00\x01"),
     MALFORMED),
    ("content type twice", _publish(b"a", props=b"\x08\x03\x00\x01x\x03\x00\x01y"), PROTOCOL),
    ("payload format indicator 2", _publish(b"a", props=b"\x02\x01\x02"), PROTOCOL),
    ("property length past the end", _publish(b"a", props=b"\x09\x01", payload=b""),
     MALFORMED),
    ("user property not UTF-8", _publish(b"a", props=b"\x07\x26\x00\x01\xff\x00\x01v"),
     MALFORMED),
    ("SUBSCRIBE without filters", b"\x82\x03\x00\x01\x00", PROTOCOL),
    ("SUBSCRIBE retain handling 3", _subscribe(b"a", options=0x30), PROTOCOL),
    ("SUBSCRIBE reserved option bits", _subscribe(b"a", options=0xC0), MALFORMED),
    ("SUBSCRIBE invalid filter", _subscribe(b"a/#/b"), ReasonCode.TOPIC_FILTER_INVALID),
    ("SUBSCRIBE subscription identifier 0", _subscribe(b"a", props=b"\x02\x0b\x00"),
     PROTOCOL),
    ("UNSUBSCRIBE with flags 0000", b"\xa0\x06\x00\x01\x00\x00\x01a", MALFORMED),
    ("server-only packet CONNACK", b"\x20\x03\x00\x00\x00", PROTOCOL),
    ("server-only packet SUBACK", b"\x90\x04\x00\x01\x00\x00", PROTOCOL),
    ("second CONNECT", b"\x10\x0d\x00\x04MQTT\x05\x02\x00\x3c\x00\x00\x00", PROTOCOL),
    ("DISCONNECT with an invalid reason code", b"\xe0\x01\x05", MALFORMED),
]


def _case(name: str) -> tuple[bytes, int]:
    [(data, reason)] = [(d, r) for n, d, r in CASES if n == name]
    return data, reason


@pytest.fixture(scope="module")
def watcher(broker: BrokerProcess) -> Iterator[RawV5]:
    """A bystander that subscribes to everything for the whole module."""
    client = connected(broker, "v5m-watcher")
    client.subscribe("v5m/#", qos=1)
    yield client
    client.close()


def _bystander_ok(broker: BrokerProcess, watcher: RawV5, tag: str) -> None:
    with connected(broker, f"v5m-pub-{tag}") as pub:
        pub.publish("v5m/alive", tag.encode(), 1)
        pub.disconnect()
    [got] = watcher.publishes(1)
    assert got.payload == tag.encode()
    watcher.ack(got)


@pytest.mark.parametrize(("data", "reason"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_malformed_packet_gets_disconnect_with_reason(
    broker: BrokerProcess, watcher: RawV5, data: bytes, reason: int
) -> None:
    with connected(broker, "v5m-bad") as client:
        client.send_raw(data)
        disconnect = client.expect_disconnect(reason)
        # Problem information was not refused, so a reason string explains it.
        assert disconnect.properties.reason_string
    assert watcher.sync() == []


@pytest.mark.parametrize(
    ("data", "reason"), [_case("unknown property 0x7F"), _case("SUBSCRIBE retain handling 3"),
     _case("topic contains U+0000")],
    ids=["unknown-property", "retain-handling-3", "topic-nul"],
)
def test_malformed_packet_fed_byte_by_byte(
    broker: BrokerProcess, watcher: RawV5, data: bytes, reason: int
) -> None:
    with connected(broker, "v5m-slow") as client:
        client.sock.setsockopt(6, 1, 1)  # TCP_NODELAY: one segment per byte
        for i in range(len(data)):
            client.send_raw(data[i:i + 1])
        client.expect_disconnect(reason)
    assert watcher.sync() == []


def test_bad_fixed_header_refused_from_its_first_byte(broker: BrokerProcess) -> None:
    with connected(broker, "v5m-first-byte") as client:
        client.send_raw(b"\x38")  # PUBLISH, DUP with QoS 0: nothing more is needed
        client.expect_disconnect(MALFORMED)


def test_valid_packets_before_the_bad_one_are_processed(
    broker: BrokerProcess, watcher: RawV5
) -> None:
    with connected(broker, "v5m-mixed") as client:
        good = _publish(b"v5m/before", payload=b"kept")
        client.send_raw(good + _publish(b"v5m/after+") + _publish(b"v5m/never"))
        client.expect_disconnect(ReasonCode.TOPIC_NAME_INVALID)
    [got] = watcher.publishes(1)
    assert isinstance(got, Publish) and got.payload == b"kept"
    assert watcher.sync() == []


def test_no_reason_string_when_problem_information_refused(broker: BrokerProcess) -> None:
    with connected(broker, "v5m-quiet", request_problem_information=0) as client:
        client.send_raw(_publish(b"a/#"))
        disconnect = client.expect_disconnect(ReasonCode.TOPIC_NAME_INVALID)
        assert disconnect.properties.reason_string is None


def test_no_reason_string_beyond_the_client_maximum_packet_size(broker: BrokerProcess) -> None:
    with connected(broker, "v5m-tiny", maximum_packet_size=16) as client:
        client.send_raw(_publish(b"a/#"))
        data = b""
        client.sock.settimeout(5)
        while chunk := client.sock.recv(1024):
            data += chunk
        assert data == b"\xe0\x01\x90"  # DISCONNECT 0x90 without properties


def test_bystanders_unaffected_by_a_stream_of_bad_clients(
    broker: BrokerProcess, watcher: RawV5
) -> None:
    for i, (_, data, reason) in enumerate(CASES[:6]):
        with connected(broker, f"v5m-storm-{i}") as client:
            client.send_raw(data)
            client.expect_disconnect(reason)
        _bystander_ok(broker, watcher, f"after-{i}")


def test_malformed_v5_connect_is_refused_and_closed(broker: BrokerProcess) -> None:
    with RawV5(broker) as client:
        # v5 CONNECT with the reserved flag bit set.
        client.send_raw(b"\x10\x0e\x00\x04MQTT\x05\x03\x00\x3c\x00\x00\x01c")
        packets = client.wait_closed()
        assert len(packets) == 1 and isinstance(packets[0], ConnAck), packets
        assert packets[0].reason_code == MALFORMED
    with RawV5(broker) as client:
        # v5 CONNECT whose properties repeat the session expiry interval.
        props = b"\x0a\x11\x00\x00\x00\x01\x11\x00\x00\x00\x02"
        body = b"\x00\x04MQTT\x05\x02\x00\x3c" + props + b"\x00\x01c"
        client.send_raw(bytes((0x10, len(body))) + body)
        [connack] = client.wait_closed()
        assert isinstance(connack, ConnAck) and connack.reason_code == PROTOCOL


@pytest.mark.parametrize(
    "props", [b"\x03\x21\x00\x00", b"\x05\x27\x00\x00\x00\x00"],
    ids=["receive-maximum-0", "maximum-packet-size-0"],
)
def test_v5_connect_with_a_zero_limit_is_a_protocol_error(
    broker: BrokerProcess, props: bytes
) -> None:
    with RawV5(broker) as client:
        body = b"\x00\x04MQTT\x05\x02\x00\x3c" + props + b"\x00\x01c"
        client.send_raw(bytes((0x10, len(body))) + body)
        [connack] = client.wait_closed()
        assert isinstance(connack, ConnAck) and connack.reason_code == PROTOCOL


def test_first_packet_not_connect_is_closed_without_reply(broker: BrokerProcess) -> None:
    with RawV5(broker) as client:
        client.send_raw(_publish(b"v5m/early"))
        assert client.wait_closed() == []
