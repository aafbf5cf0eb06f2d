"""The bridge inside one event loop: status for the status page, reload, a crashing device.

These drive `bridge.runtime.Bridge` against an in-process broker (a `Link` watches the
topics) and the pymodbus simulator over TCP.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from typing import Any

import pytest

from bench.bridge.simulator import Simulator
from bridge.runtime import Bridge
from gateway.broker import Broker
from gateway.config import Config, parse_config
from gateway.links import Link
from gateway.message import Message
from storage.memory import MemoryStore

logging.getLogger("pymodbus").setLevel(logging.CRITICAL)


def make_config(port: int, points: str = "r0", devices: tuple[str, ...] = ("a",)) -> Config:
    return parse_config({"bridge": {
        "diagnostics_interval": 0,
        "buses": [{"name": "sim", "type": "tcp", "host": "127.0.0.1", "port": port}],
        "devices": [{"name": name, "bus": "sim", "unit": 1 + i, "address_base": 0,
                     "poll_interval": 0.05, "points": [
                         {"name": p, "address": int(p[1:]), "unit": "V"}
                         for p in points.split(",")]}
                    for i, name in enumerate(devices)]}})


async def until(check: Callable[[], Any], timeout: float = 5.0) -> Any:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not (result := check()):
        assert loop.time() < deadline, f"not met: {check}"
        await asyncio.sleep(0.01)
    return result


class Harness:
    def __init__(self, config: Config) -> None:
        loop = asyncio.get_running_loop()
        self.broker = Broker(config, MemoryStore(), now=loop.time())
        self.seen: list[tuple[str, bytes]] = []
        self.watch = Link(self.broker, "watch", loop.time, self._got)
        self.watch.subscribe("devices/#", 1, no_local=False)
        self.bridge = Bridge(config.bridge, self.broker)

    def _got(self, message: Message, qos: int, retain: bool) -> None:
        self.seen.append((message.topic, message.payload))

    def last(self, topic: str) -> Any:
        found = [p for t, p in self.seen if t == topic]
        return (json.loads(found[-1]) if found[-1].startswith(b"{") else found[-1].decode()
                ) if found else None


@pytest.fixture
def sim() -> Any:
    simulator = Simulator([1, 2], "tcp", size=20)
    simulator.start()
    yield simulator
    simulator.stop()


def test_status_reload_and_crash_restart(sim: Simulator) -> None:
    async def main() -> None:
        h = Harness(make_config(sim.port, "r0,r1", ("a", "b")))
        await h.bridge.start()
        await until(lambda: h.last("devices/b/r1"))
        status = h.bridge.status()
        a = status["devices"][0]
        assert a["name"] == "a" and a["online"] is True and a["requests"] >= 1
        assert a["points"]["r0"]["value"] == 1000 and a["points"]["r0"]["unit"] == "V"
        assert a["counters"]["timeouts"] == 0

        # reload: device b removed, device a gets a new point
        h.bridge.reload(make_config(sim.port, "r0,r5", ("a",)))
        await until(lambda: h.last("devices/a/r5"))
        assert h.last("devices/a/r5")["value"] == 1005
        assert h.last("devices/b/status") == "offline"
        assert [d["name"] for d in h.bridge.status()["devices"]] == ["a"]

        # a device task that dies is restarted, and shows offline meanwhile
        h.bridge.restart_delay = 0.1
        poller = h.bridge.pollers["a"]
        original = poller.poll_group
        crashed: list[bool] = []

        async def broken(group: str) -> bool:
            if not crashed:
                crashed.append(True)
                raise RuntimeError("boom")
            return await original(group)

        poller.poll_group = broken  # type: ignore[method-assign]
        await until(lambda: crashed and h.last("devices/a/status") == "offline")
        await until(lambda: h.last("devices/a/status") == "online")
        await h.bridge.stop()
        assert h.last("devices/a/status") == "offline"
        assert "outpost-bridge" not in h.broker.sessions

    asyncio.run(main())


def test_writes_from_retained_or_malformed_messages(sim: Simulator) -> None:
    async def main() -> None:
        h = Harness(make_config(sim.port))
        await h.bridge.start()
        await until(lambda: h.last("devices/a/r0"))
        h.watch.publish("devices/a/r0/set", b"not json", qos=1)
        await until(lambda: h.last("devices/a/r0/set/result"))
        assert h.last("devices/a/r0/set/result") == {"id": None, "ok": False,
                                                     "error": "payload is not JSON"}
        h.watch.publish("devices/a/r0/set", b'{"id": 9, "value": 5}', qos=1)
        await until(lambda: h.last("devices/a/r0/set/result")["id"] == 9)
        assert h.last("devices/a/r0/set/result")["error"] == "point 'r0' is not writable"
        h.watch.publish("devices/zz/r0/set", b'{"id": 10, "value": 5}', qos=1)
        await until(lambda: h.last("devices/zz/r0/set/result"))
        assert h.last("devices/zz/r0/set/result")["error"] == "unknown device 'zz'"
        await h.bridge.stop()

    asyncio.run(main())


def test_on_change_is_the_default_with_retain(sim: Simulator) -> None:
    async def main() -> None:
        config = make_config(sim.port, "r0,r1")
        config = config.model_copy(update={"bridge": config.bridge.model_copy(
            update={"retain": True})})
        h = Harness(config)
        await h.bridge.start()
        poller = h.bridge.pollers["a"]
        await until(lambda: poller.cycles >= 5)
        assert [t for t, _ in h.seen].count("devices/a/r0") == 1  # unchanged: published once
        sim.set_registers(1, "holding", 0, [7])
        await until(lambda: h.last("devices/a/r0")["value"] == 7)
        assert [t for t, _ in h.seen].count("devices/a/r1") == 1
        late: list[str] = []
        loop = asyncio.get_running_loop()
        newcomer = Link(h.broker, "newcomer", loop.time,
                        lambda m, q, r: late.append(m.topic) if r else None)
        newcomer.subscribe("devices/a/+", 0)
        assert sorted(late) == ["devices/a/r0", "devices/a/r1", "devices/a/status"]
        await h.bridge.stop()

    asyncio.run(main())
