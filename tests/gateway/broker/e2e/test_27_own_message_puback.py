"""27 The PUBACK of a message comes no later than that message's delivery to its own publisher.

A paho client on a persistent session subscribes to a topic, publishes two QoS 1 messages to
it a few milliseconds apart (the pace at which the ack hold keeps a publisher's PUBACKs for
a shared commit, docs/storage.md) and disconnects cleanly the moment it has received both.
Both PUBACKs must have arrived by then: a PUBACK still held after the client got the message
would leave the client believing the message was never acknowledged.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import paho.mqtt.client as mqtt
import pytest
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from tests.support.broker_proc import BrokerProcess, start_broker
from tests.support.waiting import wait_for

TOPIC = "c27/own"
# Between the two publishes: above the hold's fastest pace (5 ms), far below ack_hold_ms.
GAP = 0.02
DURABLE = """
[storage]
durability = "full"
state_dir = "{state}"
ack_hold_ms = 1000
"""


@pytest.fixture(scope="module")
def durable(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    workdir = tmp_path_factory.mktemp("own-puback")
    proc = start_broker(workdir, DURABLE.format(state=workdir / "state"))
    yield proc
    proc.stop()


class OwnSubscriber:
    """Records which of its publishes were acknowledged when each message came back, and
    disconnects from the callback of the last one, before reading anything else."""

    def __init__(self, broker: BrokerProcess, protocol: int, expected: int) -> None:
        self.client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=f"c27-{protocol}",
                                  protocol=protocol, clean_session=(
                                      None if protocol == mqtt.MQTTv5 else False))
        self.expected = expected
        self.acked: set[int] = set()
        self.acked_at_delivery: list[set[int]] = []
        self.subscribed = threading.Event()
        self.done = threading.Event()
        self.client.on_publish = self._on_publish
        self.client.on_message = self._on_message
        self.client.on_subscribe = lambda *args: self.subscribed.set()
        if protocol == mqtt.MQTTv5:
            properties = Properties(PacketTypes.CONNECT)
            properties.SessionExpiryInterval = 300  # a persistent session
            self.client.connect(broker.host, broker.port, 30, clean_start=False,
                                properties=properties)
        else:
            self.client.connect(broker.host, broker.port, 30)
        self.client.loop_start()

    def _on_publish(self, client: Any, userdata: Any, mid: int, reason: Any,
                    properties: Any) -> None:
        self.acked.add(mid)

    def _on_message(self, client: Any, userdata: Any, message: Any) -> None:
        self.acked_at_delivery.append(set(self.acked))
        if len(self.acked_at_delivery) == self.expected:
            client.disconnect()  # at once: what has not arrived yet is never read
            self.done.set()


@pytest.mark.parametrize("protocol", [mqtt.MQTTv311, mqtt.MQTTv5], ids=["3.1.1", "5"])
def test_both_pubacks_arrive_before_the_client_disconnects(
    durable: BrokerProcess, protocol: int
) -> None:
    client = OwnSubscriber(durable, protocol, expected=2)
    try:
        client.client.subscribe(TOPIC, 1)
        wait_for(client.subscribed.is_set, message="no SUBACK")
        first = client.client.publish(TOPIC, b"one", 1).mid
        time.sleep(GAP)  # the pace that makes the broker hold the second PUBACK
        second = client.client.publish(TOPIC, b"two", 1).mid
        wait_for(client.done.is_set, message="the two messages did not come back")
        assert client.acked_at_delivery == [{first}, {first, second}]
    finally:
        client.client.loop_stop()
