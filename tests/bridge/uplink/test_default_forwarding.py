"""What the uplink sends to the cloud without a forward rule: its diagnostics and the gateway
status, with the metadata the lander needs to land them.

Against a real mosquitto: the diagnostics go through the outbox, so the reports written while
the cloud broker was down (`connected: false`) arrive once it is back; `diagnostics_topic = ""`
turns the built-in rule off; on MQTT 5 the gateway status and its will say whose they are.
"""

from __future__ import annotations

import json
import signal
from collections.abc import Callable

import pytest

from bridge.uplink.config import UplinkConfig
from tests.bridge.uplink.test_uplink_e2e import Recorder, props, uplink_config, wait_for
from tests.support.broker_proc import BrokerProcess
from tests.support.mosquitto import Mosquitto

DIAGNOSTICS = "outpost-diagnostics/site7"  # the default for gateway_id "site7"
STATUS = "outpost-status/site7"


def reports(recorder: Recorder) -> list[dict[str, object]]:
    with recorder.lock:
        return [json.loads(m.payload) for m in recorder.messages]


def test_diagnostics_reach_the_cloud_with_ids_and_survive_an_outage(
    cloud: Mosquitto, broker_factory: Callable[..., BrokerProcess]
) -> None:
    gateway = broker_factory(uplink_config(cloud.port, diagnostics=True))
    # a persistent session: what arrives while it reconnects after the restart is kept for it
    recorder = Recorder(cloud.port, DIAGNOSTICS, client_id="watch", clean=False).start()
    try:
        wait_for(lambda: recorder.count() >= 2)
        first = recorder.messages[0]
        meta = props(first)
        assert meta["gateway"] == "site7"
        assert meta["topic"] == "$SYS/outpost/uplink"
        assert int(meta["seq"]) >= 1
        # the first report waits for the first connection attempt: no start-up "disconnected"
        assert reports(recorder)[0]["connected"] is True
        cloud.stop()
        wait_for(lambda: "link to" in gateway.log() and "lost" in gateway.log())
        lost_at = gateway.log().count("reconnecting in")
        wait_for(lambda: gateway.log().count("reconnecting in") >= lost_at + 3)
        cloud.start()  # the recorder's paho loop reconnects by itself

        def after_outage() -> bool:
            seen = reports(recorder)
            down = [r for r in seen if r["connected"] is False]
            return bool(down) and any(r["connected"] is True and r["ts"] > down[-1]["ts"]
                                      for r in seen)

        wait_for(after_outage)
        seen = reports(recorder)
        down = [r for r in seen if r["connected"] is False]
        assert all(isinstance(r["backlog_messages"], int) for r in down)
    finally:
        recorder.stop()


def test_diagnostics_topic_empty_turns_the_builtin_rule_off(
    cloud: Mosquitto, broker_factory: Callable[..., BrokerProcess]
) -> None:
    gateway = broker_factory(uplink_config(cloud.port))  # sets diagnostics_topic = ""
    assert 'diagnostics_topic = ""' in uplink_config(cloud.port)
    everything = Recorder(cloud.port, "#").start()
    try:
        wait_for(lambda: "uplink cloud: inbound subscribed" in gateway.log())
        with everything.lock:
            topics = {m.topic for m in everything.messages}
        assert not any(t.startswith("outpost-diagnostics/") for t in topics)
    finally:
        everything.stop()


def test_a_configured_rule_may_not_take_a_builtin_name() -> None:
    with pytest.raises(ValueError, match=r"forward\.0\.name: '\$mine'"):
        UplinkConfig.model_validate({
            "enabled": True, "remotes": [{"addresses": ["127.0.0.1:1"]}],
            "forward": [{"name": "$mine", "filter": "a/#"}],
        })


def test_status_and_will_carry_who_sent_them_on_mqtt5(
    cloud: Mosquitto, broker_factory: Callable[..., BrokerProcess]
) -> None:
    config = uplink_config(cloud.port)
    gateway = broker_factory(config)
    live = Recorder(cloud.port, STATUS).start()
    try:
        wait_for(lambda: live.count() >= 1)
        online = props(live.messages[0])
        assert online["gateway"] == "site7" and online["topic"] == "$SYS/outpost/status"
        assert "seq" not in online and int(online["received_ms"]) > 0
        gateway.stop(signal.SIGKILL)
        wait_for(lambda: live.messages[-1].payload == b"offline")
        will = props(live.messages[-1])
        assert (will["gateway"], will["epoch"]) == ("site7", online["epoch"])
        assert "received_ms" not in will and "seq" not in will
    finally:
        live.stop()
