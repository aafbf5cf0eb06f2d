"""The uplink keeps to what the remote's CONNACK grants, and says why the remote hung up.

A remote's Receive Maximum (MQTT 5 3.3.4) bounds the uplink's unacknowledged QoS 1 PUBLISHes
whatever `inflight` is configured: HiveMQ CE grants 10 and disconnects a client that sends more
(tests/test_cloud_brokers.py), our broker grants `[limits] receive_maximum` and does the same
(0x93). When a remote does disconnect the uplink, its DISCONNECT reason is in the log line.
"""

from __future__ import annotations

from collections.abc import Callable

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion

from tests.bridge.uplink.test_uplink_e2e import Recorder, publish_local, uplink_config
from tests.gateway.broker.e2e.helpers import wait_for
from tests.support.broker_proc import BrokerProcess

STINGY_REMOTE = """
[limits]
receive_maximum = 4
"""


def test_the_window_keeps_to_the_remotes_receive_maximum(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    cloud = broker_factory(STINGY_REMOTE)
    recorder = Recorder(cloud.port, "site7/#").start()
    # inflight 32 by default: eight times what the remote lets in
    gateway = broker_factory(uplink_config(cloud.port))
    try:
        publish_local(gateway.port, [(f"devices/m/{i}", b"%d" % i) for i in range(300)])
        wait_for(lambda: recorder.count() >= 300)
        assert [m.payload for m in recorder.messages] == [b"%d" % i for i in range(300)]
        assert "lost" not in gateway.log(), gateway.log()
        assert "receive maximum exceeded" not in cloud.log()
    finally:
        recorder.stop()


def test_the_remotes_disconnect_reason_is_in_the_log(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    cloud = broker_factory()
    gateway = broker_factory(uplink_config(cloud.port))
    wait_for(lambda: "uplink cloud: connected" in gateway.log())
    # a second client with the uplink's client id (a copied configuration, say)
    intruder = mqtt.Client(CallbackAPIVersion.VERSION2, client_id="uplink-site7",
                           protocol=mqtt.MQTTv5)
    intruder.connect("127.0.0.1", cloud.port)
    intruder.loop_start()
    try:
        wait_for(lambda: "the remote disconnected us: Session taken over (0x8E)" in gateway.log())
    finally:
        intruder.loop_stop()
        intruder.disconnect()
