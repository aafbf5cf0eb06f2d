"""The gateway's own status on the cloud broker: retained `online`, `offline` as will and on stop.

Against a real mosquitto: what a cloud consumer subscribed to the status topic sees when the
gateway connects, is killed (the broker publishes the will) or stops cleanly.
"""

from __future__ import annotations

import re
import signal
from collections.abc import Callable

import paho.mqtt.client as mqtt
import pytest

from tests.bridge.uplink.test_uplink_e2e import Recorder, publish_local, uplink_config, wait_for
from tests.support.broker_proc import BrokerProcess
from tests.support.mosquitto import Mosquitto

STATUS = "outpost-status/site7"  # the default for gateway_id "site7"



def payloads(recorder: Recorder) -> list[bytes]:
    with recorder.lock:
        return [m.payload for m in recorder.messages]


def retained(port: int, topic: str) -> mqtt.MQTTMessage:
    """What a consumer subscribing now gets first: the retained message."""
    recorder = Recorder(port, topic).start()
    try:
        wait_for(lambda: recorder.count() >= 1)
        return recorder.messages[0]
    finally:
        recorder.stop()


@pytest.mark.parametrize("protocol", [5, 4])
def test_online_then_will_on_sigkill_then_online_again(
    cloud: Mosquitto, broker_factory: Callable[..., BrokerProcess], protocol: int
) -> None:
    config = uplink_config(cloud.port, protocol=protocol)
    gateway = broker_factory(config)
    # logged after the online status was acknowledged (and the inbound filters subscribed)
    wait_for(lambda: "uplink cloud: inbound subscribed" in gateway.log())
    first = retained(cloud.port, STATUS)
    assert (first.payload, first.retain, first.qos) == (b"online", True, 1)
    live = Recorder(cloud.port, STATUS).start()
    try:
        wait_for(lambda: payloads(live) == [b"online"])  # the retained copy
        gateway.stop(signal.SIGKILL)  # no DISCONNECT: mosquitto publishes the will at once
        wait_for(lambda: payloads(live)[-1:] == [b"offline"])
        assert retained(cloud.port, STATUS).payload == b"offline"
        broker_factory(config)  # restarted: online again after its connect
        wait_for(lambda: payloads(live)[-1:] == [b"online"])
        assert payloads(live) == [b"online", b"offline", b"online"]
    finally:
        live.stop()
    assert retained(cloud.port, STATUS).payload == b"online"


def test_clean_stop_publishes_offline(
    cloud: Mosquitto, broker_factory: Callable[..., BrokerProcess]
) -> None:
    gateway = broker_factory(uplink_config(cloud.port, remote_extra='status_topic = "gw/7/up"'))
    live = Recorder(cloud.port, "gw/7/up").start()
    try:
        wait_for(lambda: payloads(live) == [b"online"])
        publish_local(gateway.port, [("devices/m1/p", b"1")])
        # A clean DISCONNECT makes mosquitto discard the will: this `offline` is the gateway's.
        assert gateway.stop(signal.SIGTERM) == 0
        wait_for(lambda: payloads(live) == [b"online", b"offline"])
        assert live.messages[-1].qos == 1
    finally:
        live.stop()
    message = retained(cloud.port, "gw/7/up")
    assert (message.payload, message.retain) == (b"offline", True)


def test_empty_status_topic_sets_no_will_and_publishes_nothing(
    cloud: Mosquitto, broker_factory: Callable[..., BrokerProcess]
) -> None:
    everything = Recorder(cloud.port, "#").start()
    try:
        gateway = broker_factory(uplink_config(cloud.port, remote_extra='status_topic = ""'))
        publish_local(gateway.port, [("devices/m1/p", b"1")])
        wait_for(lambda: everything.count() >= 1)
        gateway.stop(signal.SIGKILL)
        marker = broker_factory(uplink_config(cloud.port, remote_extra='status_topic = ""'))
        publish_local(marker.port, [("devices/m1/p", b"2")])
        wait_for(lambda: everything.count() >= 2)
        marker.stop()
        publish_local(cloud.port, [("end", b"")])  # everything before it has arrived
        wait_for(lambda: everything.messages[-1].topic == "end")
        assert [m.topic for m in everything.messages] == ["site7/m1/p", "site7/m1/p", "end"]
    finally:
        everything.stop()


def test_link_log_lines_carry_the_backlog(
    cloud: Mosquitto, broker_factory: Callable[..., BrokerProcess]
) -> None:
    gateway = broker_factory(uplink_config(cloud.port, max_messages=3))
    wait_for(lambda: "uplink cloud: connected" in gateway.log())
    assert re.search(
        r"uplink cloud: connected to 127\.0\.0\.1:\d+; backlog 0 message\(s\), 0 byte\(s\), "
        r"oldest none, dropped 0 so far", gateway.log()
    )
    cloud.stop()
    wait_for(lambda: "uplink cloud: link to" in gateway.log())
    publish_local(gateway.port, [(f"devices/m/{i}", b"12345") for i in range(5)])  # 2 dropped
    cloud.start()
    line = wait_for(lambda: re.search(r"uplink cloud: connected to .*backlog 3 .*", gateway.log()))
    assert re.search(r"backlog 3 message\(s\), 48 byte\(s\), oldest \d+\.\d s, dropped 2 so far",
                     line.group(0)), line.group(0)
    assert re.search(r"uplink cloud: link to 127\.0\.0\.1:\d+ lost: .*; backlog 0 message\(s\), "
                     r"0 byte\(s\), oldest none, dropped 0 so far", gateway.log())
