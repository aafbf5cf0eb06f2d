"""Alarm events reach the uplink's outbox through its built-in rule, with their ids, and the
rule maps them to `outpost-alarms/<gateway_id>/<alarm>/event`; the retained state and the
commands stay on the gateway."""

from __future__ import annotations

import asyncio
import json

from bridge.alarms.journal import MemoryJournal
from bridge.alarms.service import AlarmService
from bridge.uplink.config import UplinkConfig
from bridge.uplink.hook import UplinkHook
from bridge.uplink.outbox import MemoryOutbox
from gateway.broker.contracts.hooks import HookChain
from gateway.broker.engine.broker import Broker
from gateway.broker.engine.links import Link
from outpost.config import parse_config
from storage.memory import MemoryStore

CONFIG = parse_config({
    "gateway_id": "gw-7",
    "uplink": {"enabled": True, "remotes": [{"name": "cloud", "addresses": ["127.0.0.1:9"]}]},
    "bridge": {"buses": [{"name": "b", "type": "tcp", "host": "127.0.0.1", "port": 5020}],
               "devices": [{"name": "pump", "bus": "b", "unit_id": 1, "address_base": 0,
                            "points": [{"name": "amps", "address": 0}]}]},
    "alarms": {"rules": [{"name": "over-current", "point": "pump/amps", "kind": "high",
                          "limit": 10}]}})


def test_events_go_through_the_outbox_with_their_ids() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        outbox = MemoryOutbox()
        hook = UplinkHook(CONFIG.uplink, outbox, gateway_id="gw-7")
        broker = Broker(CONFIG, HookChain([MemoryStore(), hook]), now=loop.time())
        service = AlarmService(CONFIG.alarms, "devices", broker, MemoryJournal())
        service.start()
        service.point("devices/pump/amps", b'{"value":12.5,"ts":1,"quality":"good"}')
        Link(broker, "hmi", loop.time).publish("alarms/over-current/ack", b"", 1)
        rows = outbox.read("$alarms.cloud", 10, False, set())
        assert [json.loads(r.payload)["transition"] for r in rows] == [1, 2]
        assert [r.seq for r in rows] == sorted({r.seq for r in rows})  # each its own id
        assert {r.topic for r in rows} == {"alarms/over-current/event"} and rows[0].qos == 1
        rule = dict(CONFIG.uplink.forward_rules("gw-7"))["$alarms.cloud"]
        assert rule.topic.apply(rows[0].topic) == "outpost-alarms/gw-7/over-current/event"
        others = [r for name in ("$diagnostics.cloud",) for r in
                  outbox.read(name, 10, False, set())]
        assert not [r for r in others if r.topic.startswith("alarms/")]
        await service.stop()

    asyncio.run(main())


def test_no_built_in_alarm_rule_without_the_diagnostics_rule() -> None:
    uplink = UplinkConfig.model_validate({"enabled": True, "remotes": [
        {"name": "cloud", "addresses": ["h:1"], "diagnostics_topic": ""}]})
    assert uplink.forward_rules("gw-7") == []
