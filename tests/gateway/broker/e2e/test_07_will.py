"""07 will: published on socket loss, keepalive timeout and protocol error, not on DISCONNECT."""

from __future__ import annotations

import signal

from gateway.broker.codec import MQTT_3_1, Connect, Will
from tests.gateway.broker.e2e.helpers import MosquittoSub, RawClient


def will_frame(topic: str, payload: bytes, retain: bool = False) -> bytes:
    """The QoS 0 PUBLISH a subscriber receives for a will."""
    body = len(topic).to_bytes(2, "big") + topic.encode() + payload
    return bytes([0x31 if retain else 0x30, len(body)]) + body


def watcher(broker, client_id: str, topic_filter: str, qos: int = 0) -> RawClient:
    client = RawClient.to(broker)
    client.connect(client_id)
    client.subscribe((topic_filter, qos))
    return client


def test_01_will_on_socket_drop(broker):
    with watcher(broker, "c07-01w", "c07/01") as watch:
        dying = RawClient.to(broker)
        dying.connect("c07-01", will=Will("c07/01", b"lost"))
        dying.close()  # no DISCONNECT
        assert watch.recv_frame() == will_frame("c07/01", b"lost")


def test_02_no_will_on_disconnect(broker):
    with watcher(broker, "c07-02w", "c07/02") as watch:
        with RawClient.to(broker) as leaving:
            leaving.connect("c07-02", will=Will("c07/02", b"should not"))
            leaving.disconnect()
        # the session is gone (a new connection with the id is not taken over either)
        with RawClient.to(broker) as again:
            assert again.connect("c07-02") == bytes.fromhex("20020000")
            again.disconnect()
        assert watch.sync() == []


def test_03_will_on_keepalive_timeout(broker):
    with watcher(broker, "c07-03w", "c07/03") as watch, RawClient.to(broker) as idle:
        idle.connect("c07-03", keep_alive=1, will=Will("c07/03", b"timeout"))
        assert watch.recv_frame(timeout=5) == will_frame("c07/03", b"timeout")
        assert idle.expect_closed() == b""


def test_04_will_on_protocol_error(broker):
    with watcher(broker, "c07-04w", "c07/04") as watch:
        for index, bad in enumerate((
            "36050003612f62",                            # PUBLISH with QoS 3
            "101000044d5154540402003c000474657374",       # a second CONNECT
            "82080001000323 2f61 00",                     # SUBSCRIBE to "#/a": invalid filter
        )):
            with RawClient.to(broker) as bad_client:
                bad_client.connect(f"c07-04-{index}", will=Will("c07/04", str(index).encode()))
                bad_client.send(bytes.fromhex(bad.replace(" ", "")))
                assert bad_client.expect_closed() == b""
            assert watch.recv_frame() == will_frame("c07/04", str(index).encode())


def test_05_will_retain(broker):
    with watcher(broker, "c07-05w", "c07/05") as watch:
        dying = RawClient.to(broker)
        dying.connect("c07-05", will=Will("c07/05", b"retained will", retain=True))
        dying.close()
        # live subscribers get RETAIN=0 (3.1.1)
        assert watch.recv_frame() == will_frame("c07/05", b"retained will")
    with RawClient.to(broker) as late:
        late.connect("c07-05l")
        late.subscribe(("c07/05", 0))
        assert late.recv_frame() == will_frame("c07/05", b"retained will", retain=True)


def test_06_will_qos_downgraded_to_subscription(broker):
    with watcher(broker, "c07-06a", "c07/06", qos=2) as q2, \
            watcher(broker, "c07-06b", "c07/06", qos=0) as q0:
        dying = RawClient.to(broker)
        dying.connect("c07-06", will=Will("c07/06", b"w", qos=1))
        dying.close()
        [high] = q2.receive_publishes(1)
        assert (high.qos, high.payload) == (1, b"w")
        assert q0.recv_frame() == will_frame("c07/06", b"w")


def test_07_will_of_v31_client(broker):
    with watcher(broker, "c07-07w", "c07/07") as watch:
        dying = RawClient.to(broker, MQTT_3_1)
        dying.send(Connect("c07-07", MQTT_3_1, will=Will("c07/07", b"v31")))
        assert dying.recv_frame() == bytes.fromhex("20020000")
        dying.close()
        assert watch.recv_frame() == will_frame("c07/07", b"v31")


def test_08_will_of_persistent_session_on_drop(broker):
    with watcher(broker, "c07-08w", "c07/08") as watch:
        dying = RawClient.to(broker)
        dying.connect("c07-08", clean=False, will=Will("c07/08", b"persistent"))
        dying.close()
        assert watch.recv_frame() == will_frame("c07/08", b"persistent")
        # the will belongs to the connection: reconnecting and leaving normally sends nothing
        with RawClient.to(broker) as back:
            assert back.connect("c07-08", clean=False) == bytes.fromhex("20020100")
            back.close()
        assert watch.sync() == []
        with RawClient.to(broker) as cleanup:
            cleanup.connect("c07-08", clean=True)
            cleanup.disconnect()


def test_09_mosquitto_client_killed_sends_will(broker):
    with MosquittoSub(broker, "-t", "c07/09", "-C", "1") as watch:
        dying = MosquittoSub(broker, "-t", "c07/09/none", "-i", "c07-09",
                             "--will-topic", "c07/09", "--will-payload", "killed",
                             "--will-qos", "1")
        with dying:  # start() returned after its SUBACK: it is connected
            dying.process.send_signal(signal.SIGKILL)
            dying.process.wait(5)
            assert watch.wait_lines(1) == ["c07/09|0|0|killed"]


def test_10_will_on_session_takeover(broker):
    # the old network connection is closed by the server without a DISCONNECT
    with watcher(broker, "c07-10w", "c07/10") as watch:
        old = RawClient.to(broker)
        try:
            old.connect("c07-10", will=Will("c07/10", b"taken over"))
            with RawClient.to(broker) as new:
                assert new.connect("c07-10", will=Will("c07/10", b"new one")) == \
                    bytes.fromhex("20020000")
                assert old.expect_closed() == b""
                assert watch.recv_frame() == will_frame("c07/10", b"taken over")
                new.disconnect()
            assert watch.sync() == []  # the new connection's will is not sent
        finally:
            old.close()


def test_11_no_will_from_a_refused_connect(broker_factory):
    refusing = broker_factory("[limits]\nmax_connections = 1\n")
    with watcher(refusing, "c07-11w", "c07/11") as watch:
        with RawClient.to(refusing) as refused:
            assert refused.connect("c07-11", will=Will("c07/11", b"never")) == \
                bytes.fromhex("20020003")
            assert refused.expect_closed() == b""
        with RawClient.to(refusing, MQTT_3_1) as empty_id:
            empty_id.send(Connect("", MQTT_3_1, will=Will("c07/11", b"never either")))
            assert empty_id.expect_closed() == bytes.fromhex("20020002")
        assert watch.sync() == []
