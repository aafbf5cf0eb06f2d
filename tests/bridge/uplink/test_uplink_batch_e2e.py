"""Batched forwarding against a real mosquitto: every row arrives with its own id, on MQTT 5
and 3.1.1 remotes, and a SIGKILL while a batch is being built loses nothing."""

from __future__ import annotations

import signal
from collections.abc import Callable
from pathlib import Path

import paho.mqtt.client as mqtt
import pytest

from cloud_spark.batch_format import decode_batch, is_batch
from tests.bridge.uplink.test_uplink_e2e import Recorder, publish_local, uplink_config, wait_for
from tests.support.broker_proc import BrokerProcess
from tests.support.mosquitto import Mosquitto


def rows(messages: list[mqtt.MQTTMessage]) -> list[tuple[int, str, str, bytes]]:
    """(seq, local topic, remote topic, payload) of every row of every batch received."""
    out = []
    for message in list(messages):
        assert is_batch(message.payload), message.payload[:40]
        batch = decode_batch(message.payload)
        assert (batch.gateway, batch.strip, batch.prefix) == ("site7", "devices/", "site7/")
        out += [(r.seq, r.topic, batch.remote_topic(r.topic), r.payload) for r in batch.rows]
    return out


@pytest.mark.parametrize("protocol", [5, 4])
def test_many_rows_per_publish_each_with_its_id(
    cloud: Mosquitto, broker_factory: Callable[..., BrokerProcess], protocol: int
) -> None:
    count = 400
    config = uplink_config(cloud.port, protocol=protocol,
                           batch='{ max_count = 100, max_delay = 0.5 }')
    gateway = broker_factory(config)
    recorder = Recorder(cloud.port, "site7/#", v5=protocol == 5).start()
    try:
        items = [(f"devices/m{i % 3}/power", b'{"value": %d}' % i) for i in range(count)]
        publish_local(gateway.port, [*items, ("devices/m1/raw", b"\xff\x00")])
        wait_for(lambda: len(rows(recorder.messages)) >= count + 1, timeout=60)
        got = rows(recorder.messages)
        assert [seq for seq, *_ in got] == list(range(1, count + 2))
        assert [(topic, payload) for _, topic, _, payload in got] == [
            *items, ("devices/m1/raw", b"\xff\x00")
        ]
        assert got[0][2] == "site7/m0/power"
        assert len(recorder.messages) <= count // 10  # batches, not one PUBLISH per row
        assert all(len(decode_batch(m.payload).rows) <= 100 for m in recorder.messages)
    finally:
        recorder.stop()


@pytest.mark.parametrize("alone", [False, True])
def test_retained_messages_are_batched_or_go_alone_and_retained(
    cloud: Mosquitto, broker_factory: Callable[..., BrokerProcess], alone: bool
) -> None:
    batch = f"{{ max_delay = 0.2, retained_alone = {str(alone).lower()} }}"
    gateway = broker_factory(uplink_config(cloud.port, batch=batch))
    recorder = Recorder(cloud.port, "site7/#").start()
    try:
        publish_local(gateway.port, [("devices/m1/p", b"1")])
        client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, protocol=mqtt.MQTTv311)
        client.connect("127.0.0.1", gateway.port)
        client.loop_start()
        client.publish("devices/m1/status", b"online", qos=1, retain=True).wait_for_publish(10)
        client.loop_stop()
        client.disconnect()
        publish_local(gateway.port, [("devices/m1/p", b"2")])
        wait_for(lambda: sum(len(decode_batch(m.payload).rows) if is_batch(m.payload) else 1
                             for m in list(recorder.messages)) >= 3)
        single = [(m.topic, m.payload) for m in recorder.messages if not is_batch(m.payload)]
        assert single == ([("site7/m1/status", b"online")] if alone else [])
        late = Recorder(cloud.port, "site7/#").start()  # gets what the cloud kept retained
        if alone:
            wait_for(lambda: late.count() >= 1)
            assert [(m.topic, m.payload, m.retain) for m in late.messages] == [
                ("site7/m1/status", b"online", True)
            ]
        else:
            publish_local(gateway.port, [("devices/m1/p", b"3")])  # a marker after the check
            wait_for(lambda: late.count() >= 1)
            assert all(is_batch(m.payload) and not m.retain for m in late.messages)
        late.stop()
    finally:
        recorder.stop()


def test_sigkill_while_batches_are_built_loses_nothing(
    cloud: Mosquitto, broker_factory: Callable[..., BrokerProcess], tmp_path: Path
) -> None:
    """Rows wait up to 2 s for their batch; the gateway is killed while they wait, while
    others are in flight, and restarted: every seq arrives, none with two payloads."""
    state = tmp_path / "state"
    config = uplink_config(cloud.port, batch="{ max_count = 50, max_delay = 2.0 }")
    recorder = Recorder(cloud.port, "site7/#", client_id="cloud-sub", clean=False).start()
    gateway = broker_factory(config, "--state-dir", str(state))
    total = 0
    try:
        for round_ in range(3):
            items = [(f"devices/m{i % 5}/p", b"%d-%d" % (round_, i)) for i in range(120)]
            publish_local(gateway.port, items)  # acknowledged: committed to the outbox
            total += len(items)
            gateway.stop(signal.SIGKILL)  # within the 2 s the last partial batch waits
            gateway = broker_factory(config, "--state-dir", str(state))
        wait_for(lambda: {seq for seq, *_ in rows(recorder.messages)} >= set(
            range(1, total + 1)), timeout=120)
        by_seq: dict[int, set[bytes]] = {}
        for seq, _, _, payload in rows(recorder.messages):
            by_seq.setdefault(seq, set()).add(payload)
        assert sorted(by_seq) == list(range(1, total + 1))  # nothing missing, no gap
        assert all(len(payloads) == 1 for payloads in by_seq.values())  # one id, one row
        epochs = {decode_batch(m.payload).epoch for m in recorder.messages}
        assert len(epochs) == 1
    finally:
        recorder.stop()
