"""MQTT 5.0 CONNECT / CONNACK: assigned client identifiers, the limits announced in CONNACK,
server keep alive, session expiry capping, and enhanced authentication when no method is
configured."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from gateway.broker.codec import Auth, ConnAck, Disconnect, Properties, ReasonCode
from tests.gateway.broker.e2e.v5_helpers import PacketTypes, PahoV5, RawV5, connected, paho_props
from tests.support.broker_proc import BrokerProcess, start_broker

LIMITED = """
[limits]
receive_maximum = 5
max_packet_size = 2048
topic_alias_maximum = 0
max_keepalive = 30
max_session_expiry = 10
"""


@pytest.fixture(scope="module")
def limited(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = start_broker(tmp_path_factory.mktemp("limited"), LIMITED)
    yield proc
    proc.stop()


def test_empty_client_id_gets_a_unique_assigned_identifier(broker: BrokerProcess) -> None:
    with RawV5(broker) as first, RawV5(broker) as second:
        ack1 = first.connect("")
        ack2 = second.connect("")
        assert ack1.reason_code == ack2.reason_code == 0
        id1 = ack1.properties.assigned_client_identifier
        id2 = ack2.properties.assigned_client_identifier
        assert id1 and id2 and id1 != id2
        # Both sessions are alive at once: the identifiers really are different sessions.
        assert first.sync() == [] and second.sync() == []


def test_assigned_identifier_is_reported_to_paho(broker: BrokerProcess) -> None:
    with PahoV5(broker, "") as client:
        _, reason, props = client.connect()
        assert reason == 0
        assigned = props.AssignedClientIdentifier
        assert isinstance(assigned, str) and assigned
        # The assigned id is usable: a session under it receives messages.
        client.subscribe("v5c/assigned", 1)
        client.publish("v5c/assigned", b"hi", 1)
        assert client.get().payload == b"hi"


def test_given_client_id_is_not_echoed(broker: BrokerProcess) -> None:
    with RawV5(broker) as client:
        ack = client.connect("v5c-named")
        assert ack.reason_code == 0
        assert ack.properties.assigned_client_identifier is None


def test_connack_announces_default_limits(broker: BrokerProcess) -> None:
    with RawV5(broker) as client:
        ack = client.connect("v5c-defaults", keep_alive=60)
        assert ack.reason_code == 0
        assert ack.session_present is False
        props = ack.properties
        assert props.receive_maximum == 64
        assert props.maximum_packet_size == 1_048_576
        assert props.topic_alias_maximum == 32
        assert props.server_keep_alive is None  # no max_keepalive configured
        assert props.session_expiry_interval is None  # 0 asked, 0 granted: not repeated


def test_connack_announces_configured_limits(limited: BrokerProcess) -> None:
    with RawV5(limited) as client:
        ack = client.connect("v5c-limits", keep_alive=20)
        assert ack.reason_code == 0
        props = ack.properties
        assert props.receive_maximum == 5
        assert props.maximum_packet_size == 2048
        assert props.topic_alias_maximum is None  # 0: aliases not accepted, property absent
        assert props.server_keep_alive is None  # 20 <= 30: the client's value stands


@pytest.mark.parametrize("asked", [0, 31, 600])
def test_server_keep_alive_caps_the_client_value(limited: BrokerProcess, asked: int) -> None:
    with RawV5(limited) as client:
        ack = client.connect(f"v5c-ka-{asked}", keep_alive=asked)
        assert ack.reason_code == 0
        assert ack.properties.server_keep_alive == 30


def test_server_keep_alive_seen_by_paho(limited: BrokerProcess) -> None:
    with PahoV5(limited, "v5c-ka-paho") as client:
        _, reason, props = client.connect(keepalive=0)
        assert reason == 0
        assert props.ServerKeepAlive == 30


def test_session_expiry_is_capped_and_reported(limited: BrokerProcess) -> None:
    with RawV5(limited) as client:
        ack = client.connect("v5c-sei", session_expiry_interval=3600)
        assert ack.reason_code == 0
        assert ack.properties.session_expiry_interval == 10
    with RawV5(limited) as client:
        ack = client.connect("v5c-sei2", session_expiry_interval=7)
        assert ack.reason_code == 0
        assert ack.properties.session_expiry_interval is None  # granted as asked


def test_keep_alive_timeout_disconnects_with_0x8d(broker: BrokerProcess) -> None:
    with RawV5(broker) as client:
        assert client.connect("v5c-ka-timeout", keep_alive=1).reason_code == 0
        # 1.5 x 1 s of silence, checked on a 0.5 s tick.
        client.expect_disconnect(ReasonCode.KEEP_ALIVE_TIMEOUT, timeout=5)


def test_connect_with_authentication_method_is_refused_0x8c(broker: BrokerProcess) -> None:
    with RawV5(broker) as client:
        ack = client.connect(
            "v5c-auth", authentication_method="SCRAM-SHA-1", authentication_data=b"client-first"
        )
        assert ack.reason_code == ReasonCode.BAD_AUTHENTICATION_METHOD
        assert ack.session_present is False
        assert client.wait_closed() == []


def test_paho_with_authentication_method_gets_bad_authentication_method(
    broker: BrokerProcess,
) -> None:
    with PahoV5(broker, "v5c-auth-paho") as client:
        props = paho_props(PacketTypes.CONNECT, AuthenticationMethod="GS2-KRB5")
        _, reason, _ = client.connect(properties=props)
        assert reason == 0x8C
        assert reason.getName() == "Bad authentication method"


def test_auth_packet_without_method_is_a_protocol_error(broker: BrokerProcess) -> None:
    with connected(broker, "v5c-auth-pkt") as client:
        client.send(Auth(ReasonCode.RE_AUTHENTICATE, Properties(authentication_method="X")))
        disconnect = client.expect_disconnect(ReasonCode.PROTOCOL_ERROR)
        assert isinstance(disconnect, Disconnect)


def test_refused_connect_does_not_disturb_other_clients(broker: BrokerProcess) -> None:
    with connected(broker, "v5c-bystander") as bystander:
        bystander.subscribe("v5c/by", qos=1)
        with RawV5(broker) as bad:
            ack = bad.connect("v5c-bystander", authentication_method="X")
            assert isinstance(ack, ConnAck) and ack.reason_code == 0x8C
            bad.wait_closed()
        # The refused CONNECT used the same client id but must not have taken over.
        with connected(broker, "v5c-by-pub") as pub:
            pub.publish("v5c/by", b"still here", qos=1)
        [msg] = bystander.publishes(1)
        assert msg.payload == b"still here"


def test_server_keep_alive_is_enforced(broker_factory: Callable[..., BrokerProcess]) -> None:
    own = broker_factory("[limits]\nmax_keepalive = 1\n")
    with RawV5(own) as client:
        ack = client.connect("v5c-ska", keep_alive=0)  # "no keep alive" is not allowed here
        assert ack.properties.server_keep_alive == 1
        client.expect_disconnect(ReasonCode.KEEP_ALIVE_TIMEOUT, timeout=5)


def test_assigned_identifier_names_a_resumable_session(broker: BrokerProcess) -> None:
    with RawV5(broker) as client:
        ack = client.connect("", session_expiry_interval=60)
        assigned = ack.properties.assigned_client_identifier
        assert assigned
        client.subscribe("v5c/assigned-session", qos=1)
        client.disconnect()
    with RawV5(broker) as client:
        ack = client.connect(assigned, clean_start=False, session_expiry_interval=60)
        assert ack.session_present is True
        assert ack.properties.assigned_client_identifier is None
        client.disconnect(properties=Properties(session_expiry_interval=0))
