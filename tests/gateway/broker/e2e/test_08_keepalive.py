"""08 keepalive: enforced at 1.5 x the keep alive; any packet keeps a connection alive."""

from __future__ import annotations

import time

import pytest

from tests.gateway.broker.e2e.helpers import PahoClient, RawClient

ACCEPTED = bytes.fromhex("20020000")


def test_01_idle_closed_after_one_and_a_half_keepalive_active_kept(broker):
    """Run side by side for 3 s (keep alive 1 s):

    an idle client is closed, not before 1.5 s; clients sending PINGREQ or PUBLISH, a keep
    alive 0 client and a paho client with keep alive 1 stay connected.
    """
    idle = RawClient.to(broker)
    pinger = RawClient.to(broker)
    talker = RawClient.to(broker)
    forever = RawClient.to(broker)
    paho = PahoClient(broker, "c08-01-paho", keepalive=1)
    try:
        assert pinger.connect("c08-01-ping", keep_alive=1) == ACCEPTED
        assert talker.connect("c08-01-talk", keep_alive=1) == ACCEPTED
        assert forever.connect("c08-01-zero", keep_alive=0) == ACCEPTED
        paho.connect()
        paho.subscribe("c08/01/paho", 0)
        assert idle.connect("c08-01-idle", keep_alive=1) == ACCEPTED
        last_idle_packet = time.monotonic()
        closed_after: float | None = None
        while time.monotonic() - last_idle_packet < 3.0:
            pinger.send(bytes.fromhex("c000"))
            assert pinger.recv_frame() == bytes.fromhex("d000")
            talker.publish("c08/01/talk", b"alive", qos=0)
            if closed_after is None and idle.is_closed():
                closed_after = time.monotonic() - last_idle_packet
            time.sleep(0.2)
        if closed_after is None:
            assert idle.expect_closed(timeout=0.5) == b""
            closed_after = time.monotonic() - last_idle_packet
        assert closed_after >= 1.45, f"closed after {closed_after:.2f} s"
        assert idle.expect_closed() == b""  # 3.1.1: no bytes, just closed
        for client in (pinger, talker, forever):
            assert client.sync() == []
        paho.publish("c08/01/paho", b"still here", qos=1)
        assert [m.payload for m in paho.wait_messages(1)] == [b"still here"]
        assert paho.state.disconnects == []
    finally:
        for client in (idle, pinger, talker, forever):
            client.close()
        paho.close()


@pytest.fixture(scope="module")
def capped(tmp_path_factory):
    from tests.support.broker_proc import start_broker

    proc = start_broker(tmp_path_factory.mktemp("capped"), "[limits]\nmax_keepalive = 10\n")
    yield proc
    proc.stop()


@pytest.mark.parametrize(("keep_alive", "connack"), [
    (10, "20020000"), (1, "20020000"), (11, "20020002"), (0, "20020002"), (65535, "20020002"),
])
def test_02_max_keepalive_refuses_v311_with_return_code_2(capped, keep_alive, connack):
    with RawClient.to(capped) as c:
        reply = c.connect(f"c08-03-{keep_alive}", keep_alive=keep_alive)
        assert reply == bytes.fromhex(connack)
        if connack != "20020000":
            assert c.expect_closed() == b""
