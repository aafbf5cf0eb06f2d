"""The uplink against a real mosquitto playing the cloud broker."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any

import paho.mqtt.client as mqtt
import pytest
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from tests.gateway.broker.e2e.helpers import wait_for
from tests.support.broker_proc import BrokerProcess
from tests.support.mosquitto import Mosquitto


class Recorder:
    """A paho client that records what it receives."""

    def __init__(self, port: int, topic: str, v5: bool = True, client_id: str = "",
                 clean: bool = True) -> None:
        protocol = mqtt.MQTTv5 if v5 else mqtt.MQTTv311
        kwargs: dict[str, Any] = {} if v5 else {"clean_session": clean}
        self.client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=client_id,
                                  protocol=protocol, **kwargs)
        self.messages: list[mqtt.MQTTMessage] = []
        self.lock = threading.Lock()
        self.subscribed = threading.Event()
        self.topic = topic
        self.client.on_message = self._on_message
        self.client.on_connect = lambda c, u, f, rc, p: c.subscribe(topic, qos=1)
        self.client.on_subscribe = lambda c, u, mid, rc, p: self.subscribed.set()
        self.port = port
        self.v5 = v5
        self.clean = clean

    def _on_message(self, client: mqtt.Client, userdata: Any, message: mqtt.MQTTMessage) -> None:
        with self.lock:
            self.messages.append(message)

    def start(self) -> Recorder:
        if self.v5:
            properties = None
            if not self.clean:  # a v5 session outlives the connection only with an expiry
                properties = Properties(PacketTypes.CONNECT)
                properties.SessionExpiryInterval = 3600
            self.client.connect(
                "127.0.0.1", self.port, clean_start=self.clean, properties=properties
            )
        else:
            self.client.connect("127.0.0.1", self.port)
        self.client.loop_start()
        assert self.subscribed.wait(30)
        return self

    def stop(self) -> None:
        self.client.loop_stop()
        self.client.disconnect()

    def count(self) -> int:
        with self.lock:
            return len(self.messages)


def publish_local(port: int, items: list[tuple[str, bytes]], qos: int = 1) -> None:
    client = mqtt.Client(CallbackAPIVersion.VERSION2, protocol=mqtt.MQTTv311)
    client.connect("127.0.0.1", port)
    client.loop_start()
    for topic, payload in items:
        client.publish(topic, payload, qos=qos).wait_for_publish(10)
    client.loop_stop()
    client.disconnect()


def uplink_config(
    cloud_port: int, protocol: int = 5, remote_extra: str = "", diagnostics: bool = False,
    batch: str | None = None, **rule: Any,
) -> str:
    """A gateway forwarding `devices/#` as `site7/...`. Without `diagnostics`, the uplink's
    built-in diagnostics rule is off, so the seq numbers are the test's messages only.
    `batch`: the forward rule's batch settings as an inline TOML table ("{}": defaults)."""
    extra = "".join(f"{k} = {json.dumps(v)}\n" for k, v in rule.items())
    if batch is not None:
        extra += f"batch = {batch}\n"
    if not diagnostics:
        remote_extra += '\ndiagnostics_topic = ""'

    return f"""
gateway_id = "site7"
[uplink]
enabled = true
status_interval = 0.5
[[uplink.remotes]]
name = "cloud"
addresses = ["127.0.0.1:{cloud_port}"]
protocol = {protocol}
client_id = "uplink-site7"
backoff_initial = 0.2
backoff_max = 1.0
{remote_extra}
[[uplink.forward]]
filter = "devices/#"
topic = {{ strip = "devices/", prefix = "site7/" }}
{extra}
[[uplink.inbound]]
filter = "cmd/site7/#"
topic = {{ strip = "cmd/site7/", prefix = "devices/" }}
"""



def props(message: mqtt.MQTTMessage) -> dict[str, str]:
    return dict(getattr(message.properties, "UserProperty", []) or [])


def test_forwarding_with_ids_and_remap(
    cloud: Mosquitto, broker_factory: Callable[..., BrokerProcess]
) -> None:
    gateway = broker_factory(uplink_config(cloud.port))
    recorder = Recorder(cloud.port, "site7/#").start()
    try:
        publish_local(gateway.port, [(f"devices/m{i % 3}/power", b"%d" % i) for i in range(50)])
        wait_for(lambda: recorder.count() >= 50)
        got = recorder.messages
        assert [m.topic for m in got[:3]] == ["site7/m0/power", "site7/m1/power", "site7/m2/power"]
        assert [m.payload for m in got] == [b"%d" % i for i in range(50)]
        ids = [props(m) for m in got]
        assert [int(p["seq"]) for p in ids] == list(range(1, 51))
        assert {p["gateway"] for p in ids} == {"site7"}
        assert len({p["epoch"] for p in ids}) == 1
        assert ids[4]["topic"] == "devices/m1/power"
        assert abs(int(ids[0]["received_ms"]) - time.time() * 1000) < 600_000
    finally:
        recorder.stop()


def test_json_envelope_for_a_311_remote(
    cloud: Mosquitto, broker_factory: Callable[..., BrokerProcess]
) -> None:
    gateway = broker_factory(uplink_config(cloud.port, protocol=4))
    recorder = Recorder(cloud.port, "site7/#", v5=False).start()
    try:
        publish_local(gateway.port, [("devices/m1/t", b"21.5"), ("devices/m1/raw", b"\xff\x00")])
        wait_for(lambda: recorder.count() >= 2)
        first, second = (json.loads(m.payload) for m in recorder.messages)
        assert first["payload"] == "21.5" and first["encoding"] == "utf8"
        assert first["seq"] == 1 and first["topic"] == "devices/m1/t"
        assert second["encoding"] == "base64" and second["payload"] == "/wA="
        assert set(first) == {
            "gateway", "epoch", "seq", "topic", "received_ms", "encoding", "payload"
        }
    finally:
        recorder.stop()


def test_outage_backlog_drains_everything_in_order(
    cloud: Mosquitto, broker_factory: Callable[..., BrokerProcess]
) -> None:
    gateway = broker_factory(uplink_config(cloud.port))
    recorder = Recorder(cloud.port, "site7/#", client_id="cloud-sub", clean=False).start()
    recorder.stop()  # its persistent session keeps collecting at the cloud broker
    cloud.stop()
    publish_local(gateway.port, [(f"devices/m/{i}", b"%d" % i) for i in range(300)])
    status = Recorder(gateway.port, "$SYS/outpost/uplink", v5=False).start()
    try:
        wait_for(lambda: any(
            json.loads(m.payload)["backlog_messages"] == 300 for m in list(status.messages)
        ))
        cloud.start()
        recorder = Recorder(cloud.port, "site7/#", client_id="cloud-sub", clean=False).start()
        wait_for(lambda: recorder.count() >= 300, timeout=60)
        seqs = [int(props(m)["seq"]) for m in recorder.messages]
        assert sorted(set(seqs)) == list(range(1, 301))
        first_copies = list(dict.fromkeys(seqs))
        assert first_copies == sorted(first_copies)  # in order (duplicates allowed)
        wait_for(lambda: json.loads(status.messages[-1].payload)["backlog_messages"] == 0)
        recorder.stop()
    finally:
        status.stop()


def test_inbound_commands_arrive_locally_and_are_not_echoed(
    cloud: Mosquitto, broker_factory: Callable[..., BrokerProcess]
) -> None:
    gateway = broker_factory(uplink_config(cloud.port))
    local = Recorder(gateway.port, "devices/#", v5=False).start()
    echo = Recorder(cloud.port, "site7/#").start()
    try:
        # a command published before the uplink's subscription exists reaches nobody
        wait_for(lambda: "uplink cloud: inbound subscribed: cmd/site7/#" in gateway.log())
        client = mqtt.Client(CallbackAPIVersion.VERSION2, protocol=mqtt.MQTTv5)
        client.connect("127.0.0.1", cloud.port)
        client.loop_start()
        command = client.publish("cmd/site7/m1/power/set", b'{"id": 1, "value": 5}', qos=1)
        command.wait_for_publish()
        wait_for(lambda: local.count() >= 1)
        assert local.messages[0].topic == "devices/m1/power/set"
        publish_local(gateway.port, [("devices/m1/marker", b"x")])
        wait_for(lambda: echo.count() >= 1)
        assert [m.topic for m in echo.messages] == ["site7/m1/marker"]  # the command never
        client.loop_stop()
        client.disconnect()
    finally:
        local.stop()
        echo.stop()


@pytest.mark.timeout(400)  # a cloud restart and a drain: minutes on a loaded machine
def test_overflow_drops_oldest_and_counts(
    cloud: Mosquitto, broker_factory: Callable[..., BrokerProcess]
) -> None:
    # The recorder's session is made before the outage and kept by the cloud (persistence):
    # however fast the drain after the restart, every message has somewhere to go.
    Recorder(cloud.port, "site7/#", client_id="overflow-recorder", clean=False).start().stop()
    cloud.stop()
    gateway = broker_factory(uplink_config(cloud.port, max_messages=10))
    publish_local(gateway.port, [(f"devices/m/{i}", b"%d" % i) for i in range(30)])
    status = Recorder(gateway.port, "$SYS/outpost/uplink", v5=False).start()
    try:
        wait_for(lambda: any(
            json.loads(m.payload)["dropped"] == 20 for m in list(status.messages)
        ), timeout=60)
        cloud.start()
        recorder = Recorder(cloud.port, "site7/#", client_id="overflow-recorder",
                            clean=False).start()
        wait_for(lambda: json.loads(status.messages[-1].payload)["backlog_messages"] == 0,
                 timeout=120)
        wait_for(lambda: recorder.count() >= 10, timeout=60)
        assert sorted(int(props(m)["seq"]) for m in recorder.messages) == list(range(21, 31))
        assert "dropped 1 message(s) (drop-oldest)" in gateway.log()
        recorder.stop()
    finally:
        status.stop()
