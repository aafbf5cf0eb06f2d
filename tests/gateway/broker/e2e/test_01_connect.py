"""01 connect: CONNECT / CONNACK for MQTT 3.1 and 3.1.1, byte for byte, and with real clients."""

from __future__ import annotations

import pytest

from gateway.broker.codec import MQTT_3_1, MQTT_3_1_1, Connect, encode
from tests.gateway.broker.e2e.helpers import MosquittoSub, PahoClient, RawClient, mosquitto_pub

ACCEPTED = bytes.fromhex("20020000")
SESSION_PRESENT = bytes.fromhex("20020100")
UNACCEPTABLE_PROTOCOL = bytes.fromhex("20020001")
IDENTIFIER_REJECTED = bytes.fromhex("20020002")


def test_01_v311_connect_accepted(broker):
    with RawClient.to(broker) as c:
        assert c.connect("c01-01") == ACCEPTED
        c.send(bytes.fromhex("c000"))  # PINGREQ
        assert c.recv_frame() == bytes.fromhex("d000")  # PINGRESP


def test_02_v31_mqisdp_connect_accepted(broker):
    connect = bytes.fromhex(
        "1011" "00064d5149736470" "03" "02" "003c" "0003" "633331"  # MQIsdp, level 3, "c31"
    )
    with RawClient.to(broker, MQTT_3_1) as c:
        c.send(connect)
        assert c.recv_frame() == ACCEPTED
        c.send(bytes.fromhex("c000"))
        assert c.recv_frame() == bytes.fromhex("d000")


@pytest.mark.parametrize("level", [2, 6, 7, 0x84])
def test_03_unsupported_protocol_level_gets_return_code_1(broker, level):
    connect = bytes.fromhex("100c" "00044d515454") + bytes([level]) + bytes.fromhex("02003c0000")
    with RawClient.to(broker) as c:
        c.send(connect)
        assert c.expect_closed() == UNACCEPTABLE_PROTOCOL


def test_04_v311_empty_client_id_clean_session_accepted(broker):
    with RawClient.to(broker) as c:
        assert c.connect("", clean=True) == ACCEPTED
        # the connection works: subscribe and get our own message
        assert c.subscribe(("c01/04", 1)) == bytes.fromhex("9003000101")
        c.publish("c01/04", b"x", qos=0)
        assert c.recv_frame() == bytes.fromhex("30090006") + b"c01/04x"


def test_05_v311_empty_client_id_persistent_refused_with_2(broker):
    with RawClient.to(broker) as c:
        c.send(bytes.fromhex("100c" "00044d515454" "04" "00" "003c" "0000"))  # clean=0, id ""
        assert c.expect_closed() == IDENTIFIER_REJECTED


@pytest.mark.parametrize("clean", [True, False])
def test_06_v31_empty_client_id_refused_with_2(broker, clean):
    with RawClient.to(broker, MQTT_3_1) as c:
        c.send(encode(Connect("", MQTT_3_1, clean), MQTT_3_1))
        assert c.expect_closed() == IDENTIFIER_REJECTED


def test_07_empty_client_ids_get_distinct_sessions(broker):
    with RawClient.to(broker) as a, RawClient.to(broker) as b:
        assert a.connect("") == ACCEPTED
        assert b.connect("") == ACCEPTED
        # neither took the other's session over: both still answer pings
        assert a.sync() == []
        assert b.sync() == []


def test_08_long_client_id_accepted(broker):
    with RawClient.to(broker) as c:
        assert c.connect("c" * 200) == ACCEPTED


def test_09_first_packet_not_connect_closes_without_answer(broker):
    for first in ("c000", "82060001000161" "00", "30050003612f62"):
        with RawClient.to(broker) as c:
            c.send(bytes.fromhex(first))
            assert c.expect_closed() == b""


def test_10_second_connect_closes_connection(broker):
    with RawClient.to(broker) as c:
        assert c.connect("c01-10") == ACCEPTED
        c.send(Connect("c01-10", MQTT_3_1_1))
        assert c.expect_closed() == b""


def test_11_disconnect_closes_connection(broker):
    with RawClient.to(broker) as c:
        assert c.connect("c01-11") == ACCEPTED
        c.send(bytes.fromhex("e000"))
        assert c.expect_closed() == b""


def test_12_username_password_accepted_on_loopback(broker):
    with RawClient.to(broker) as c:
        assert c.connect("c01-12", username="alice", password=b"secret") == ACCEPTED


def test_13_connect_split_byte_by_byte(broker):
    data = encode(Connect("c01-13", MQTT_3_1_1, keep_alive=30), MQTT_3_1_1)
    with RawClient.to(broker) as c:
        for byte in data:
            c.send(bytes([byte]))
        assert c.recv_frame() == ACCEPTED


def test_14_connect_and_subscribe_in_one_segment(broker):
    data = encode(Connect("c01-14", MQTT_3_1_1), MQTT_3_1_1) + bytes.fromhex(
        "8208" "0001" "0003" "612f62" "00"  # SUBSCRIBE id 1, "a/b" QoS 0
    ) + bytes.fromhex("c000")
    with RawClient.to(broker) as c:
        c.send(data)
        assert c.recv_frame() == ACCEPTED
        assert c.recv_frame() == bytes.fromhex("9003000100")
        assert c.recv_frame() == bytes.fromhex("d000")


@pytest.mark.parametrize("protocol", [MQTT_3_1, MQTT_3_1_1])
def test_15_paho_connects(broker, protocol):
    with PahoClient(broker, f"c01-15-{protocol}", protocol=protocol) as client:
        assert client.connect() == (False, 0)
        assert client.subscribe("c01/15", 1) == [1]
        client.publish("c01/15", b"paho", qos=1)
        [message] = client.wait_messages(1)
        assert (message.topic, message.payload, message.qos) == ("c01/15", b"paho", 1)


@pytest.mark.parametrize("version", ["mqttv31", "mqttv311"])
def test_16_mosquitto_clients_connect(broker, version):
    with MosquittoSub(broker, "-t", "c01/16", "-q", "1", "-C", "1", version=version) as sub:
        mosquitto_pub(broker, "-t", "c01/16", "-m", version, "-q", "1", version=version)
        assert sub.wait_lines(1) == [f"c01/16|1|0|{version}"]
        assert sub.wait_exit() == 0
