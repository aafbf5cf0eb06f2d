"""The store's commit figures are published under $SYS/outpost/store/."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion

from tests.support.broker_proc import BrokerProcess

EXPECTED = {"commit_seconds_max", "batch_events_avg", "write_bytes"}


def test_store_metrics_in_sys(broker_factory: Callable[..., BrokerProcess], tmp_path: Path) -> None:
    proc = broker_factory("[sys]\ninterval = 0.3\n", "--state-dir", str(tmp_path / "state"))
    seen: dict[str, str] = {}
    done = threading.Event()

    def on_message(client: mqtt.Client, userdata: object, message: mqtt.MQTTMessage) -> None:
        seen[message.topic] = message.payload.decode()
        # one interval publishes every figure: wait for all of EXPECTED, not only the first
        if int(seen.get("$SYS/outpost/store/commits", "0")) > 0 and {
                topic.rsplit("/", 1)[1] for topic in seen} >= EXPECTED:
            done.set()

    client = mqtt.Client(CallbackAPIVersion.VERSION2)
    client.on_message = on_message
    client.on_connect = lambda c, u, f, rc, p: c.subscribe("$SYS/outpost/store/#", qos=1)
    client.connect(proc.host, proc.port)
    client.loop_start()
    try:
        for n in range(5):  # persistent-session work the store must commit
            publisher = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=f"p{n}",
                                    clean_session=False)
            publisher.connect(proc.host, proc.port)
            publisher.disconnect()
        assert done.wait(60), f"no commits reported: {sorted(seen)}"
    finally:
        client.loop_stop()
        client.disconnect()
