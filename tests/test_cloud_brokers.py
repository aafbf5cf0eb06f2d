"""The uplink and the lander against the Java cloud brokers users run: HiveMQ CE and moquette.

Each test runs a gateway (outpost with its uplink) forwarding numbered messages to the cloud
broker, restarts the cloud broker halfway (the gateway keeps what it could not send in its
outbox; the broker keeps its sessions in its persistence), and checks on the cloud side that
every message arrived, none foreign. mosquitto as the cloud broker is covered by
tests/bridge/uplink and tests/cloud_spark.

- HiveMQ CE 2025.5 (embedded): MQTT 5 end to end, the uplink's user properties and the
  lander's persistent session; every message lands in bronze.
- moquette 0.17 speaks MQTT 3.1.1 only (its MQTT 5 arrived in 0.18, which Maven Central does
  not serve here): the uplink runs with `protocol = 4` (the JSON envelope) and a paho 3.1.1
  subscriber with a persistent session stands for the cloud side; the lander, which needs
  MQTT 5 (Session Expiry, Receive Maximum), is refused and says why.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import paho.mqtt.client as mqtt
import pytest
from paho.mqtt.enums import CallbackAPIVersion

from tests.cloud_spark.lander_procs import Lander, bronze_ids, landers, wait_for_ids
from tests.support.broker_proc import BrokerProcess
from tests.support.java_brokers import JavaBroker, require_java_broker
from tests.support.waiting import wait_for

__all__ = ["landers"]  # the fixture, used below

GATEWAY = "site9"
DRAIN_TIMEOUT = 180.0  # a JVM broker restart on a loaded machine, then the backlog


def gateway_config(cloud_port: int, protocol: int) -> str:
    """A gateway forwarding `devices/#` to `outpost/site9/...` at the cloud broker."""
    return f"""
gateway_id = "{GATEWAY}"
[uplink]
enabled = true
[[uplink.remotes]]
name = "cloud"
addresses = ["127.0.0.1:{cloud_port}"]
protocol = {protocol}
client_id = "uplink-{GATEWAY}"
backoff_initial = 0.2
backoff_max = 1.0
diagnostics_topic = ""
[[uplink.forward]]
filter = "devices/#"
topic = {{ strip = "devices/", prefix = "outpost/{GATEWAY}/" }}
"""


def publish_local(port: int, seqs: range) -> None:
    """QoS 1 messages `devices/meter/<seq>` with payload `<seq>`, each acknowledged by the
    gateway (so stored in its outbox)."""
    client = mqtt.Client(CallbackAPIVersion.VERSION2, protocol=mqtt.MQTTv311)
    client.connect("127.0.0.1", port)
    client.loop_start()
    try:
        infos = [client.publish(f"devices/meter/{seq}", b"%d" % seq, qos=1) for seq in seqs]
        for info in infos:
            info.wait_for_publish(30)
    finally:
        client.loop_stop()
        client.disconnect()


@pytest.fixture
def cloud_broker(tmp_path: Path) -> Iterator[Callable[[str], JavaBroker]]:
    started: list[JavaBroker] = []

    def start(kind: str) -> JavaBroker:
        require_java_broker(kind)
        broker = JavaBroker(kind, tmp_path / kind)
        started.append(broker)
        broker.start()
        return broker

    yield start
    for broker in started:
        broker.stop()


@pytest.mark.timeout(600)  # two JVM starts and two drains on a loaded machine
def test_hivemq_lands_every_message_across_its_restart(
    tmp_path: Path, cloud_broker: Callable[[str], JavaBroker],
    broker_factory: Callable[..., BrokerProcess], landers: list[Lander],
) -> None:
    cloud = cloud_broker("hivemq")
    root = tmp_path / "landing"
    landers.append(lander := Lander(cloud, root, "lander-hivemq"))  # type: ignore[arg-type]
    gateway = broker_factory(gateway_config(cloud.port, protocol=5))

    publish_local(gateway.port, range(1, 101))
    wait_for_ids(root, {(GATEWAY, seq) for seq in range(1, 101)}, timeout=DRAIN_TIMEOUT)
    cloud.stop()
    publish_local(gateway.port, range(101, 201))  # held in the gateway's outbox
    cloud.start()
    publish_local(gateway.port, range(201, 301))

    expected = {(GATEWAY, seq) for seq in range(1, 301)}
    wait_for_ids(root, expected, timeout=DRAIN_TIMEOUT)
    ids = bronze_ids(root)
    assert set(ids) == expected, sorted(set(ids) - expected)[:5]
    # duplicates are possible only for what was in flight at the restart (silver drops them)
    assert len(ids) - len(expected) <= 100, f"{len(ids) - len(expected)} duplicates"
    assert lander.terminate() == 0


class Subscriber:
    """A paho MQTT 3.1.1 client with a persistent session, collecting the uplink's envelopes."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.seqs: list[int] = []
        self.lock = threading.Lock()
        self.subscribed = threading.Event()
        self.client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id="cloud-subscriber",
                                  protocol=mqtt.MQTTv311, clean_session=False)
        self.client.on_connect = lambda c, u, f, rc, p: c.subscribe(f"outpost/{GATEWAY}/#", 1)
        self.client.on_subscribe = lambda c, u, mid, rc, p: self.subscribed.set()
        self.client.on_message = self._on_message
        self.client.reconnect_delay_set(0.2, 1)

    def _on_message(self, client: mqtt.Client, userdata: object,
                    message: mqtt.MQTTMessage) -> None:
        envelope = json.loads(message.payload)
        assert envelope["gateway"] == GATEWAY and envelope["payload"] == str(envelope["seq"])
        with self.lock:
            self.seqs.append(envelope["seq"])

    def start(self) -> Subscriber:
        self.client.connect("127.0.0.1", self.port)
        self.client.loop_start()
        assert self.subscribed.wait(60)
        return self

    def stop(self) -> None:
        self.client.loop_stop()
        self.client.disconnect()

    def distinct(self) -> set[int]:
        with self.lock:
            return set(self.seqs)


@pytest.mark.timeout(600)
def test_moquette_receives_every_message_across_its_restart(
    cloud_broker: Callable[[str], JavaBroker], broker_factory: Callable[..., BrokerProcess],
) -> None:
    cloud = cloud_broker("moquette")
    subscriber = Subscriber(cloud.port).start()
    gateway = broker_factory(gateway_config(cloud.port, protocol=4))
    try:
        publish_local(gateway.port, range(1, 101))
        wait_for(lambda: len(subscriber.distinct()) == 100, DRAIN_TIMEOUT)
        cloud.stop()
        publish_local(gateway.port, range(101, 201))
        cloud.start()
        publish_local(gateway.port, range(201, 301))
        wait_for(lambda: len(subscriber.distinct()) >= 300, DRAIN_TIMEOUT,
                 message=f"arrived: {len(subscriber.distinct())} of 300")
        assert subscriber.distinct() == set(range(1, 301))
    finally:
        subscriber.stop()


def test_the_lander_says_why_moquette_refuses_it(
    tmp_path: Path, cloud_broker: Callable[[str], JavaBroker],
) -> None:
    cloud = cloud_broker("moquette")
    lander = Lander(cloud, tmp_path / "landing", "lander-moquette",  # type: ignore[arg-type]
                    ready="CONNECT refused")
    try:
        refusal = next(line for line in lander.lines if "CONNECT refused" in line)
        assert "the broker does not accept MQTT 5" in refusal, refusal
    finally:
        lander.kill()
