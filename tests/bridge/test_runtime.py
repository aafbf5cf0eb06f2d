"""The bridge inside one event loop: status for the status page, reload, a crashing device.

These drive `bridge.runtime.Bridge` against an in-process broker (a `Link` watches the
topics) and the pymodbus simulator over TCP.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from bench.bridge.simulator import Simulator
from bridge.config import BridgeConfig
from bridge.driver import WriteError
from bridge.modbus.bus import Counters, TransactionError
from bridge.modbus.frames import Request, Response
from bridge.modbus.poller import DevicePoller
from bridge.runtime import Bridge
from bridge.serial.reader import SerialLineDevice
from gateway.broker.core.message import Message
from gateway.broker.engine.broker import Broker
from gateway.broker.engine.links import Link
from outpost.config import Config, parse_config
from outpost.daemon import JournalHandler
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
        h.bridge.reload(make_config(sim.port, "r0,r5", ("a",)).bridge)
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


def test_writes_from_retained_or_malformed_messages(
    sim: Simulator, caplog: pytest.LogCaptureFixture
) -> None:
    async def main() -> None:
        h = Harness(make_config(sim.port))
        await h.bridge.start()
        await until(lambda: h.last("devices/a/r0"))
        h.watch.publish("devices/a/r0/set", b"not json", qos=1)
        await until(lambda: h.last("devices/a/r0/set/result"))
        assert h.last("devices/a/r0/set/result") == {
            "id": None, "ok": False, "value": None, "registers": None,
            "error": 'payload is not JSON (expected {"id": ..., "value": ...})'}
        h.watch.publish("devices/a/r0/set", b'{"id": 9, "value": 5}', qos=1)
        await until(lambda: h.last("devices/a/r0/set/result")["id"] == 9)
        assert h.last("devices/a/r0/set/result")["error"] == "point 'r0' is not writable"
        h.watch.publish("devices/zz/r0/set", b'{"id": 10, "value": 5}', qos=1)
        await until(lambda: h.last("devices/zz/r0/set/result"))
        assert h.last("devices/zz/r0/set/result")["error"] == "unknown device 'zz'"
        await h.bridge.stop()

    with caplog.at_level(logging.WARNING, logger="outpost.bridge"):
        asyncio.run(main())
    refused = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert ("bridge: write a/r0 = b'not json' refused: payload is not JSON (expected "
            '{"id": ..., "value": ...})') in refused
    assert "bridge: write a/r0 = 5 refused: point 'r0' is not writable" in refused


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



def test_reload_restarts_only_what_changed(sim: Simulator) -> None:
    """Unchanged devices keep running and publish no status (no false outage upstream)."""
    master, slave = os.openpty()
    tty = os.ttyname(slave)

    def config(b_points: str = "r0", devices: str = "a,b", timeout: float = 1.0,
               pattern: str = "W=", diagnostics: float = 0) -> BridgeConfig:
        return parse_config({"bridge": {
            "diagnostics_interval": diagnostics,
            "buses": [{"name": "sim", "type": "tcp", "host": "127.0.0.1", "port": sim.port,
                       "timeout": timeout}],
            "devices": [{"name": name, "bus": "sim", "unit": 1 + i, "address_base": 0,
                         "poll_interval": 0.05, "points": [
                             {"name": p, "address": int(p[1:])}
                             for p in (b_points if name == "b" else "r0").split(",")]}
                        for i, name in enumerate(devices.split(","))],
            "serial": [{"name": "scale", "device": tty, "delimiter": "\n",
                        "pattern": rf"{pattern}(?P<w>[0-9]+)",
                        "points": [{"name": "weight", "field": "w"}]}]}}).bridge

    async def main(h: Harness) -> None:
        def statuses(since: int) -> list[tuple[str, str]]:
            return [(t.split("/")[1], p.decode()) for t, p in h.seen[since:]
                    if t.endswith("/status")]

        async def reload(new: BridgeConfig) -> None:
            h.bridge.reload(new)
            assert h.bridge._reloading is not None
            await h.bridge._reloading

        def weigh(grams: int) -> bool:  # until the reader has the port open and takes it
            os.write(master, b"W=%d\n" % grams)
            return (h.last("devices/scale/weight") or {}).get("value") == grams

        await h.bridge.start()
        await until(lambda: weigh(5))
        await until(lambda: all(h.last(f"devices/{n}/status") == "online"
                                for n in ("a", "b", "scale")))
        a, scale, bus = h.bridge.pollers["a"], h.bridge.serial["scale"], h.bridge.buses["sim"]
        a_task = h.bridge._tasks["a"]

        # b changes (a new point), c is new: a and the serial device keep running, silently
        mark = len(h.seen)
        await reload(config("r0,r5", "a,b,c"))
        await until(lambda: h.last("devices/b/r5") and h.last("devices/c/status") == "online")
        assert h.bridge.pollers["a"] is a and h.bridge._tasks["a"] is a_task
        assert h.bridge.serial["scale"] is scale and h.bridge.buses["sim"] is bus
        assert not a_task.done()
        seen = statuses(mark)
        assert [s for s in seen if s[0] in ("a", "scale")] == []
        assert ("b", "offline") not in seen  # restarted, but it was never down
        assert [s for s in seen if s[0] == "c"] == [("c", "offline"), ("c", "online")]
        cycles = a.cycles
        await until(lambda: a.cycles > cycles)  # a still polls

        # c removed: it is gone, so it is offline; the others stay silent
        mark = len(h.seen)
        await reload(config("r0,r5"))
        await asyncio.sleep(0.2)
        assert statuses(mark) == [("c", "offline")]
        assert [d["name"] for d in h.bridge.status()["devices"]] == ["a", "b", "scale"]

        # the bus changes: its devices restart on a new connection, none of them flaps
        mark = len(h.seen)
        await reload(config("r0,r5", timeout=0.5))
        await until(lambda: h.bridge.pollers["a"].online and h.bridge.pollers["b"].online)
        assert h.bridge.pollers["a"] is not a and h.bridge.buses["sim"] is not bus
        assert not bus.channel.is_open and h.bridge.serial["scale"] is scale
        assert [s for _, s in statuses(mark)] in ([], ["online"], ["online", "online"])

        # a changed serial device reopens its port and keeps its state: no offline either;
        # two reloads in a row apply in order
        mark = len(h.seen)
        h.bridge.reload(config("r0,r5", timeout=0.5, pattern="X="))
        await reload(config("r0,r5", timeout=0.5))
        assert h.bridge.config == config("r0,r5", timeout=0.5)
        assert h.bridge.serial["scale"] is not scale and h.bridge.serial["scale"].online
        await until(lambda: weigh(7))
        assert statuses(mark) == []

        # diagnostics switched on: only the diagnostics task starts
        mark = len(h.seen)
        await reload(config("r0,r5", timeout=0.5, diagnostics=0.05))
        await until(lambda: h.last("devices/a/diagnostics") and h.last("devices/scale/diagnostics"))
        assert statuses(mark) == []

        await h.bridge.stop()
        assert {h.last(f"devices/{n}/status") for n in ("a", "b", "c", "scale")} == {"offline"}

    try:
        asyncio.run(main_with_harness(lambda: Harness(make_config(sim.port)), config(), main))
    finally:
        os.close(master)
        os.close(slave)


async def main_with_harness(make: Callable[[], Harness], config: BridgeConfig,
                            body: Callable[[Harness], Coroutine[Any, Any, None]]) -> None:
    h = make()
    h.bridge = Bridge(config, h.broker)
    await body(h)


def test_device_log_lines_carry_the_journal_device_field(sim: Simulator) -> None:
    """Online/offline, writes and a vanished serial port log `extra={"device": ...}`, which
    the daemon's journal handler sends as DEVICE= (journalctl DEVICE=meter-1)."""
    entries: list[tuple[str, object]] = []
    handler = JournalHandler(lambda message, **fields: entries.append(
        (message, fields.get("DEVICE"))))
    logger = logging.getLogger("outpost.bridge")
    logger.addHandler(handler)
    level = logger.level
    logger.setLevel(logging.INFO)
    master, slave = os.openpty()
    tty = os.ttyname(slave)

    class DeadBus:
        def counters_for(self, unit: int) -> Counters:
            return Counters()

        async def execute(self, request: Request, retries: int | None = None) -> Response:
            raise TransactionError("timeout", "no response")

    async def main() -> None:
        h = Harness(make_config(sim.port))
        await h.bridge.start()
        await until(lambda: h.last("devices/a/status") == "online")
        h.watch.publish("devices/a/r0/set", b'{"id": 1, "value": 5}', qos=1)
        await until(lambda: h.last("devices/a/r0/set/result"))
        point = h.bridge.pollers["a"].points["r0"]
        point.config = point.config.model_copy(update={"writable": True})
        h.watch.publish("devices/a/r0/set", b'{"id": 2, "value": 1000}', qos=1)
        await until(lambda: h.last("devices/a/r0/set/result")["id"] == 2)
        assert h.last("devices/a/r0/set/result")["ok"] is True
        await h.bridge.stop()

        dead = h.bridge.config.devices[0].model_copy(update={"name": "dead"})
        poller = DevicePoller(dead, DeadBus(), "devices",  # type: ignore[arg-type]
                              lambda t, p: None, lambda n, o: None)
        for _ in range(dead.offline_after):
            await poller.poll_group("default")

        scale = SerialLineDevice(
            parse_config({"bridge": {"serial": [{
                "name": "scale", "device": tty, "pattern": "W=(?P<w>[0-9]+)",
                "reopen_initial": 5, "points": [{"name": "w", "field": "w"}]}]}}
            ).bridge.serial[0], "devices", lambda t, p: None, lambda n, o: None)
        task = asyncio.create_task(scale.run())
        await until(lambda: scale.channel.is_open)
        os.close(master)  # the far end hangs up: EIO, like a USB adapter pulled
        await until(lambda: not scale.channel.is_open)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    try:
        asyncio.run(main())
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        os.close(slave)
    by_message = dict(entries)
    assert by_message["a: online"] == "a"
    assert by_message["bridge: write a/r0 = 5 refused: point 'r0' is not writable"] == "a"
    assert by_message["bridge: write a/r0 = 1000 done (wrote 1000, registers [1000])"] == "a"
    assert by_message["dead: offline after 3 failures (no response)"] == "dead"
    assert by_message[f"scale: {tty} open"] == "scale"
    assert [device for message, device in entries if "went away" in message] == ["scale"]


class UnitRecorder:
    """A TCP proxy in front of the simulator that records the unit id of every request."""

    def __init__(self, target: int) -> None:
        self.target = target
        self.units: list[int] = []
        self.server: asyncio.Server | None = None

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return int(self.server.sockets[0].getsockname()[1])

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target)

        async def answers() -> None:
            while data := await up_reader.read(4096):
                writer.write(data)

        relay = asyncio.create_task(answers())
        try:
            while True:
                header = await reader.readexactly(7)  # MBAP: tid, protocol, length, unit
                body = await reader.readexactly(int.from_bytes(header[4:6], "big") - 1)
                self.units.append(header[6])
                up_writer.write(header + body)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            relay.cancel()
            up_writer.close()
            writer.close()

    def close(self) -> None:
        if self.server is not None:
            self.server.close()


def test_a_disabled_device_is_not_polled_until_a_reload_enables_it(sim: Simulator) -> None:
    def config(port: int, b_enabled: bool) -> BridgeConfig:
        return parse_config({"bridge": {
            "diagnostics_interval": 0,
            "buses": [{"name": "sim", "type": "tcp", "host": "127.0.0.1", "port": port}],
            "devices": [{"name": name, "bus": "sim", "unit_id": unit, "address_base": 0,
                         "poll_interval": 0.05, "enabled": enabled,
                         "points": [{"name": "r0", "address": 0}]}
                        for name, unit, enabled in (("a", 1, True), ("b", 2, b_enabled))]}}
                            ).bridge

    async def main() -> None:
        recorder = UnitRecorder(sim.port)
        port = await recorder.start()
        h = Harness(make_config(port))
        h.bridge = Bridge(config(port, False), h.broker)
        await h.bridge.start()
        assert h.last("devices/b/status") == "offline"  # a stale "online" is corrected
        a = h.bridge.pollers["a"]
        await until(lambda: a.cycles >= 5)
        assert set(recorder.units) == {1} and "b" not in h.bridge.devices
        assert [(d["name"], d.get("disabled")) for d in h.bridge.status()["devices"]] == [
            ("a", None), ("b", True)]
        with pytest.raises(WriteError, match="'b' is disabled"):
            await h.bridge.write("b", "r0", 1)

        h.bridge.reload(config(port, True))
        await until(lambda: h.last("devices/b/status") == "online")
        assert 2 in recorder.units and h.bridge.pollers["a"] is a  # a kept running
        assert h.last("devices/b/r0")["value"] == 2000

        h.bridge.reload(config(port, False))  # and off again: stopped, offline
        await until(lambda: h.last("devices/b/status") == "offline" and "b" not in
                    h.bridge.devices)
        assert h.bridge.pollers["a"] is a
        await h.bridge.stop()
        recorder.close()

    asyncio.run(main())
