"""Alarms at run time (bridge/alarms/service.py): the pymodbus simulator drives a value
through a limit, the bridge polls it, the service raises, takes an acknowledgement over MQTT and
clears; a journal left with an unpublished transition is published again at the next start."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from bench.bridge.simulator import Simulator
from bridge.alarms.journal import SqliteJournal
from bridge.alarms.machine import AlarmState, Cause, State, step
from bridge.alarms.service import AlarmService
from bridge.runtime import Bridge
from gateway.broker.core.message import Message
from gateway.broker.engine.broker import Broker
from gateway.broker.engine.links import Link
from outpost.config import Config, parse_config
from storage.memory import MemoryStore

logging.getLogger("pymodbus").setLevel(logging.CRITICAL)


def make_config(port: int, **alarm: Any) -> Config:
    return parse_config({
        "bridge": {"diagnostics_interval": 0, "buses": [
            {"name": "sim", "type": "tcp", "host": "127.0.0.1", "port": port}],
            "devices": [{"name": "boiler", "bus": "sim", "unit_id": 1, "address_base": 0,
                         "poll_interval": 0.05, "points": [{"name": "temp", "address": 0}]}]},
        "alarms": {"rules": [{"name": "hot", "point": "boiler/temp", "kind": "high",
                              "limit": 1500, "deadband": 100, "severity": "high", **alarm}]}})


async def until(check: Callable[[], Any], timeout: float = 10.0) -> Any:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not (result := check()):
        assert loop.time() < deadline, f"not met: {check}"
        await asyncio.sleep(0.01)
    return result


class Site:
    """A broker, the bridge polling the simulator, the alarm service, an MQTT watcher."""

    def __init__(self, config: Config, journal: SqliteJournal) -> None:
        loop = asyncio.get_running_loop()
        self.broker = Broker(config, MemoryStore(), now=loop.time())
        self.events: list[dict[str, Any]] = []
        self.states: dict[str, dict[str, Any]] = {}
        self.watch = Link(self.broker, "watch", loop.time, self._got)
        self.watch.subscribe("alarms/#", 1, no_local=False)
        self.bridge = Bridge(config.bridge, self.broker)
        self.alarms = AlarmService(config.alarms, config.bridge.prefix, self.broker, journal)

    def _got(self, message: Message, qos: int, retain: bool) -> None:
        leaf = message.topic.rsplit("/", 1)[1]
        if leaf == "event":
            self.events.append(json.loads(message.payload))
        elif leaf == "state":
            self.states[message.topic.split("/")[1]] = json.loads(message.payload)

    async def start(self) -> None:
        self.alarms.start()
        self.bridge.observers.append(self.alarms)
        await self.bridge.start()

    async def stop(self) -> None:
        await self.bridge.stop()
        await self.alarms.stop()

    def went(self, to: str) -> Callable[[], bool]:
        return lambda: any(e["to"] == to for e in self.events)


@pytest.fixture
def sim() -> Iterator[Simulator]:
    simulator = Simulator([1], "tcp", size=4)
    simulator.start()
    yield simulator
    simulator.stop()


def test_raise_acknowledge_over_mqtt_and_clear(sim: Simulator, tmp_path: Path) -> None:
    async def main() -> None:
        site = Site(make_config(sim.port), SqliteJournal(tmp_path))
        await site.start()
        await until(lambda: site.states.get("hot", {}).get("state") == "normal")
        sim.set_registers(1, "holding", 0, [1600])
        await until(site.went("active_unacked"))
        site.watch.publish("alarms/hot/ack", b'{"user": "olga"}', qos=1)
        await until(site.went("active_acked"))
        sim.set_registers(1, "holding", 0, [1450])  # inside the deadband: still active
        await until(lambda: site.alarms.alarms["hot"].condition.last_value == 1450)
        sim.set_registers(1, "holding", 0, [1300])
        await until(site.went("normal"))
        assert [(e["transition"], e["from"], e["to"], e["cause"]) for e in site.events] == [
            (1, "normal", "active_unacked", "raise"), (2, "active_unacked", "active_acked", "ack"),
            (3, "active_acked", "normal", "clear")]
        raised, acked, cleared = site.events
        assert raised["value"] == 1600 and raised["severity"] == "high"
        assert acked["user"] == "olga" and cleared["value"] == 1300
        assert raised["point"] == "boiler/temp" and raised["ts"] <= cleared["ts"]
        assert site.states["hot"]["state"] == "normal" and site.states["hot"]["transition"] == 3
        await until(lambda: not site.alarms.journal.load()[1])  # every one confirmed
        await site.stop()

    asyncio.run(main())


def test_shelving_hides_an_alarm_until_it_is_unshelved(sim: Simulator, tmp_path: Path) -> None:
    async def main() -> None:
        site = Site(make_config(sim.port), SqliteJournal(tmp_path))
        await site.start()
        site.watch.publish("alarms/hot/shelve", b'{"seconds": 600}', qos=1)
        await until(site.went("shelved"))
        sim.set_registers(1, "holding", 0, [1600])
        await until(lambda: site.alarms.alarms["hot"].state.active)
        assert [e["to"] for e in site.events] == ["shelved"]
        site.watch.publish("alarms/hot/shelve", b'{"seconds": 0}', qos=1)
        await until(site.went("active_unacked"))
        site.watch.publish("alarms/hot/shelve", b'{"seconds": -5}', qos=1)
        site.watch.publish("alarms/nope/ack", b"", qos=1)
        site.watch.publish("alarms/hot/ack", b"[1]", qos=1)
        site.watch.publish("alarms/hot/ack", b"", qos=1)
        await until(site.went("active_acked"))
        assert [e["to"] for e in site.events] == ["shelved", "active_unacked", "active_acked"]
        await site.stop()

    asyncio.run(main())


def test_a_transition_not_known_published_is_published_again_and_the_state_restored(
        sim: Simulator, tmp_path: Path) -> None:
    # What a kill between the journal's fsync and the broker's commit leaves behind.
    journal = SqliteJournal(tmp_path)
    state, transition = step(AlarmState("hot"), Cause.RAISE, 1_700_000_000_000, 1600)
    assert transition is not None
    journal.record(state, transition)
    journal.close()
    sim.set_registers(1, "holding", 0, [1000])  # normal again while the gateway was down

    async def main() -> None:
        site = Site(make_config(sim.port), SqliteJournal(tmp_path))
        await site.start()
        await until(site.went("cleared_unacked"))
        republished, cleared = site.events[:2]
        assert (republished["transition"], republished["to"], republished["ts"]) == (
            1, "active_unacked", 1_700_000_000_000)
        assert (cleared["transition"], cleared["value"]) == (2, 1000)
        assert site.alarms.alarms["hot"].state.state is State.CLEARED_UNACKED
        await until(lambda: not site.alarms.journal.load()[1])
        await site.stop()

    asyncio.run(main())


def test_timers_raise_a_stale_value_and_end_a_shelving(sim: Simulator, tmp_path: Path) -> None:
    async def main() -> None:
        config = make_config(sim.port, kind="stale", stale_after=0.3, limit=None, deadband=0)
        site = Site(config, SqliteJournal(tmp_path))
        await site.start()
        await until(site.went("active_unacked"))  # polled, unchanged: stale by the timer
        sim.set_registers(1, "holding", 0, [1234])
        await until(site.went("cleared_unacked"))
        site.watch.publish("alarms/hot/shelve", b'{"seconds": 1.0}', qos=1)
        await until(site.went("shelved"))
        # stale again 0.3 s after the change, silently; when the shelving ends, raised
        await until(lambda: site.events[-1]["cause"] == "unshelve")
        assert [(e["cause"], e["to"]) for e in site.events] == [
            ("raise", "active_unacked"), ("clear", "cleared_unacked"), ("shelve", "shelved"),
            ("unshelve", "active_unacked")]
        await site.stop()

    asyncio.run(main())
