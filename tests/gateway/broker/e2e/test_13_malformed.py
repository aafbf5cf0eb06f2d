"""13 malformed: every vector of `tests/vectors/malformed.py` sent raw to the live broker.

- a 3.1 / 3.1.1 connection is closed without a byte in answer;
- a 5.0 connection gets DISCONNECT with exactly the vector's reason code, then is closed;
- a bad CONNECT (version 0 vectors): an unsupported protocol level gets the 3.1.1 CONNACK
  return code 1, a v5 CONNECT that does not parse gets a v5 CONNACK with the reason code, and
  anything else is closed without an answer;
- clients connected meanwhile (3.1.1 and 5.0) are unaffected.

Vectors whose maximum packet size is below what the configuration allows (64) cannot be
reproduced against a broker: they are left out here (tests/codec runs them against the decoder).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gateway.broker.codec import (
    MQTT_3_1,
    MQTT_3_1_1,
    MQTT_5,
    NEED_DATA,
    ConnAck,
    Disconnect,
    Publish,
    decode,
)
from tests.gateway.broker.e2e.helpers import RawClient
from tests.support.broker_proc import BrokerProcess, start_broker

malformed = pytest.importorskip("tests.vectors.malformed")

MIN_CONFIGURABLE = 64
V5_CONNECT_PREFIX = bytes.fromhex("00044d51545405")
# ids spell "v5" as "mqtt5" so that `-k "not v5"` (the 5.0 test files) keeps these cases
REPRODUCIBLE = [case for case in malformed.MALFORMED if case.max_packet_size >= MIN_CONFIGURABLE]
CASES = [pytest.param(case, id=case.name.replace("v5", "mqtt5")) for case in REPRODUCIBLE]
BYTEWISE = [pytest.param(case, id=case.name) for case in REPRODUCIBLE
            if case.version in (MQTT_3_1, MQTT_3_1_1)]


@pytest.fixture(scope="module")
def brokers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[int, BrokerProcess]]:
    """Brokers by maximum packet size, started when a vector first needs one."""
    started: dict[int, BrokerProcess] = {}
    yield started
    for proc in started.values():
        proc.stop()


def broker_for(brokers: dict[int, BrokerProcess], broker: BrokerProcess, tmp_path_factory,
               limit: int) -> BrokerProcess:
    if limit == malformed.DEFAULT_MAX:
        return broker
    if limit not in brokers:
        brokers[limit] = start_broker(tmp_path_factory.mktemp(f"max{limit}"),
                                      f"[limits]\nmax_packet_size = {limit}\n")
    return brokers[limit]


@pytest.fixture(scope="module")
def bystanders(broker: BrokerProcess) -> Iterator[list[RawClient]]:
    """A 3.1.1 and a 5.0 client connected to the default broker for the whole module."""
    clients = [RawClient.to(broker, MQTT_3_1_1), RawClient.to(broker, MQTT_5)]
    try:
        for index, client in enumerate(clients):
            assert client.decode(client.connect(f"c13-bystander-{index}")).reason_code == 0
            client.subscribe(("c13/bystander", 1))
        yield clients
    finally:
        for client in clients:
            client.close()


def connected(broker: BrokerProcess, version: int) -> RawClient:
    client = RawClient.to(broker, version)
    connack = client.decode(client.connect("c13-v31" if version == MQTT_3_1 else ""))
    assert isinstance(connack, ConnAck) and connack.reason_code == 0
    return client


def check_connect_answer(client: RawClient, case) -> None:
    """What a bad first packet gets: see the module docstring."""
    answer = client.expect_closed()
    if case.reason_code == malformed.U:
        assert answer == bytes.fromhex("20020001")
    elif case.data[:1] == b"\x10" and case.data[2:9] == V5_CONNECT_PREFIX:
        result = decode(answer, MQTT_5)
        assert result is not NEED_DATA and result[1] == len(answer), answer.hex()
        connack = result[0]
        assert isinstance(connack, ConnAck)
        assert connack.reason_code == case.reason_code, f"0x{connack.reason_code:02X}"
    else:
        assert answer == b""


@pytest.mark.parametrize("case", CASES)
def test_01_malformed_vector(broker, brokers, bystanders, tmp_path_factory, case):
    target = broker_for(brokers, broker, tmp_path_factory, case.max_packet_size)
    if case.version == 0:
        with RawClient.to(target) as client:
            client.send(case.data)
            check_connect_answer(client, case)
    else:
        with connected(target, case.version) as client:
            client.send(case.data)
            answer = client.expect_closed()
            if case.version == MQTT_5:
                packet = client.decode(answer)
                assert isinstance(packet, Disconnect), packet
                assert packet.reason_code == case.reason_code, f"0x{packet.reason_code:02X}"
            else:
                assert answer == b""
    for bystander in bystanders:
        assert bystander.sync() == []


@pytest.mark.parametrize("case", BYTEWISE)
def test_02_malformed_vector_byte_by_byte_v311(broker, brokers, bystanders, tmp_path_factory,
                                              case):
    target = broker_for(brokers, broker, tmp_path_factory, case.max_packet_size)
    with connected(target, case.version) as client:
        for byte in case.data:
            try:
                client.send(bytes([byte]))
            except OSError:  # closed at an earlier byte
                break
        assert client.expect_closed() == b""
    assert bystanders[0].sync() == []


def test_03_bystanders_still_receive(broker, bystanders):
    with RawClient.to(broker) as pub:
        pub.connect("c13-pub")
        pub.publish("c13/bystander", b"still here", qos=1)
    for bystander in bystanders:
        [message] = bystander.receive_publishes(1)
        assert isinstance(message, Publish)
        assert (message.topic, message.payload) == ("c13/bystander", b"still here")
