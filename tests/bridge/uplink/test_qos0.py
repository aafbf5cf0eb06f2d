"""QoS 0 local publishes through the uplink, against a real mosquitto as the cloud broker.

A QoS 0 message matching a forward rule is stored in the outbox and forwarded like any other
(also across an outage) unless the rule says `store_qos0 = false`; the rule's `qos` is the QoS
of the copy sent to the cloud, whatever the local publish used.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from tests.bridge.uplink.test_uplink_e2e import (
    Recorder,
    props,
    publish_local,
    uplink_config,
    wait_for,
)
from tests.support.broker_proc import BrokerProcess
from tests.support.mosquitto import Mosquitto


def uplink_status(port: int) -> Recorder:
    return Recorder(port, "$SYS/outpost/uplink", v5=False).start()


def backlog_is(status: Recorder, count: int) -> bool:
    with status.lock:
        return any(json.loads(m.payload)["backlog_messages"] == count for m in status.messages)


def backlog_now(status: Recorder) -> int | None:
    with status.lock:
        last = status.messages[-1] if status.messages else None
    return None if last is None else int(json.loads(last.payload)["backlog_messages"])


def test_qos0_is_stored_through_an_outage_and_sent_at_the_rule_qos(
    cloud: Mosquitto, broker_factory: Callable[..., BrokerProcess]
) -> None:
    gateway = broker_factory(uplink_config(cloud.port))  # default rule: qos 1, store_qos0 true
    recorder = Recorder(cloud.port, "site7/#", client_id="cloud-sub", clean=False).start()
    recorder.stop()  # its persistent session collects at the cloud broker from now on
    cloud.stop()
    publish_local(gateway.port, [(f"devices/m/{i}", b"%d" % i) for i in range(20)], qos=0)
    status = uplink_status(gateway.port)
    try:
        wait_for(lambda: backlog_is(status, 20))  # stored in the outbox while the cloud is away
        cloud.start()
        recorder = Recorder(cloud.port, "site7/#", client_id="cloud-sub", clean=False).start()
        wait_for(lambda: len({props(m)["seq"] for m in list(recorder.messages)}) >= 20,
                 timeout=30)
        recorder.stop()
        first = {int(props(m)["seq"]): m for m in reversed(recorder.messages)}
        assert sorted(first) == list(range(1, 21))
        assert [first[s].payload for s in sorted(first)] == [b"%d" % i for i in range(20)]
        # sent at the rule's QoS 1 (the subscription is QoS 1, so a QoS 0 copy would stay 0)
        assert {m.qos for m in recorder.messages} == {1}
        wait_for(lambda: backlog_now(status) == 0)
    finally:
        status.stop()


def test_store_qos0_false_forwards_only_qos1_and_gives_no_seq(
    cloud: Mosquitto, broker_factory: Callable[..., BrokerProcess]
) -> None:
    gateway = broker_factory(uplink_config(cloud.port, store_qos0=False))
    recorder = Recorder(cloud.port, "site7/#").start()
    try:
        publish_local(gateway.port, [(f"devices/m/{i}", b"q0") for i in range(10)], qos=0)
        publish_local(gateway.port, [("devices/m/marker", b"q1")], qos=1)
        wait_for(lambda: recorder.count() >= 1)
        publish_local(gateway.port, [("devices/m/later", b"q0")], qos=0)
        publish_local(gateway.port, [("devices/m/end", b"q1")], qos=1)
        wait_for(lambda: recorder.count() >= 2)
        got = recorder.messages
        assert [(m.topic, m.payload) for m in got] == [
            ("site7/m/marker", b"q1"), ("site7/m/end", b"q1")
        ]
        assert [props(m)["seq"] for m in got] == ["1", "2"]  # skipped messages get no number
    finally:
        recorder.stop()
    status = uplink_status(gateway.port)
    try:
        wait_for(lambda: backlog_now(status) == 0)
    finally:
        status.stop()


@pytest.mark.parametrize("local_qos", [0, 1])
def test_rule_qos0_sends_qos0_copies(
    cloud: Mosquitto, broker_factory: Callable[..., BrokerProcess], local_qos: int
) -> None:
    gateway = broker_factory(uplink_config(cloud.port, qos=0))
    recorder = Recorder(cloud.port, "site7/#").start()  # subscribed at QoS 1
    try:
        items = [(f"devices/m/{i}", b"%d" % i) for i in range(10)]
        publish_local(gateway.port, items, qos=local_qos)
        wait_for(lambda: recorder.count() >= 10)
        assert [m.payload for m in recorder.messages] == [b"%d" % i for i in range(10)]
        assert {m.qos for m in recorder.messages} == {0}
        assert [int(props(m)["seq"]) for m in recorder.messages] == list(range(1, 11))
    finally:
        recorder.stop()
    status = uplink_status(gateway.port)
    try:  # a QoS 0 copy leaves the outbox once written: nothing waits for a PUBACK
        wait_for(lambda: backlog_now(status) == 0)
    finally:
        status.stop()
