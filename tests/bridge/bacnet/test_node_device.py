"""The BACnet family against devices written with @bacnet-js/client (another implementation).

One node process (tests/bridge/bacnet/node_device/device.js) is three devices at one address:
1001 on the IP network, 2001 and 2002 behind the router the process also is (network 5, MACs
01 and 02; 2002 refuses COV). Values go through the bridge on an in-process broker, and in the
last test through `outpost run` to an MQTT client. Everything stays on 127.0.0.x.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from bench.procstat import rss_kib
from bridge.bacnet import tools, wire
from bridge.bacnet.endpoint import Endpoint, RefusedError
from tests.bridge.bacnet.support import NodeDevice, free_udp_port, loopback_host
from tests.bridge.opcua.support import Harness, until
from tests.bridge.support import Watcher
from tests.support.broker_proc import BrokerProcess

# name, object, value device.js gives it, quality
EVERY_TYPE: list[tuple[str, str, Any, str]] = [
    ("temperature", "AI:1", 21.5, "good"),
    ("faulty", "AI:2", 0.0, "bad"),  # status-flags: fault
    ("oos", "analog-input:3", 5.5, "uncertain"),  # out of service
    ("valve", "AO:1", 0.0, "good"),
    ("setpoint", "AV:1", 20.0, "good"),
    ("door", "BI:1", True, "good"),
    ("pump", "BO:1", False, "good"),
    ("enable", "BV:1", True, "good"),
    ("mode", "MSI:1", 2, "good"),
    ("fan", "MSO:1", 1, "good"),
    ("season", "MSV:1", 1, "good"),
]
UNITS = {"temperature": "°C", "faulty": "°C", "oos": "%", "valve": "%", "setpoint": "°C"}
COUNTER = {"name": "counter", "object": "AV:2", "report": "poll"}


def topic(device: str, point: str) -> str:
    return f"devices/{device}/{point}"


def device(name: str, peer: NodeDevice, device_id: int, points: list[dict[str, Any]],
           **extra: Any) -> dict[str, Any]:
    entry = {"name": name, "device_id": device_id, "address": peer.address,
             "local_address": "127.0.0.1:0", "poll_interval": 0.1, "timeout": 0.3,
             "retries": 0, "reconnect_initial": 0.1, "reconnect_max": 0.4, "points": points,
             **extra}
    if device_id // 1000 == 2:
        entry |= {"network": 5, "mac": f"{device_id % 1000:02x}"}
    return entry


@pytest.fixture(scope="module")
def peer() -> Iterator[NodeDevice]:
    devices = NodeDevice().start()
    yield devices
    devices.kill()


def test_every_object_type_units_quality_and_a_missing_object(peer: NodeDevice) -> None:
    points = [{"name": n, "object": o} for n, o, _, _ in EVERY_TYPE]
    points += [{"name": "missing", "object": "AV:99"}, COUNTER]

    async def main() -> None:
        h = Harness({"bacnet": [device("ahu", peer, 1001, points)]})
        await h.bridge.start()
        await until(lambda: h.last(topic("ahu", "status")) == "online")
        for name, _, value, quality in EVERY_TYPE:
            got = h.last(topic("ahu", name))
            assert got["quality"] == quality, (name, got)
            if quality != "bad":
                assert got["value"] == value, (name, got)
            assert got["unit"] == UNITS.get(name), (name, got)
        assert h.last(topic("ahu", "missing"))["quality"] == "bad"
        state = h.bridge.devices["ahu"].points["missing"]  # type: ignore[attr-defined]
        assert state.error == "object: unknown-object"
        plan = h.bridge.devices["ahu"].plan  # type: ignore[attr-defined]
        assert all(read.answer_bytes <= 1476 for read in plan)
        await h.bridge.stop()
        assert h.last(topic("ahu", "status")) == "offline"

    asyncio.run(main())


def test_a_property_that_does_not_exist_is_the_devices_error(peer: NodeDevice) -> None:
    async def main() -> None:
        endpoint = await Endpoint(1.0, 0).open("127.0.0.1", 0)
        route = wire.Route(peer.host, peer.port)
        try:
            with pytest.raises(RefusedError, match="property: unknown-property"):
                await endpoint.request(route, wire.READ_PROPERTY,
                                       wire.read_property(0, 1, 4000))
            answer = await endpoint.request(route, wire.READ_PROPERTY_MULTIPLE,
                                            wire.read_property_multiple([(0, 1, (85, 4000))]))
            [(kind, instance, props)] = wire.parse_read_property_multiple(answer)
            assert (kind, instance, props[85]) == (0, 1, 21.5)
            assert props[4000] == wire.PropertyError(2, 32)  # property: unknown-property
        finally:
            endpoint.close()

    asyncio.run(main())


def test_routed_devices_cov_and_polling_where_cov_is_refused(peer: NodeDevice) -> None:
    async def main() -> None:
        chosen = [{"name": "counter", "object": "AV:2"}, {"name": "door", "object": "BI:1"}]
        h = Harness({"bacnet": [device("cov", peer, 2001, chosen, poll_interval=5.0),
                                device("polled", peer, 2002, chosen)]})
        await h.bridge.start()
        for name in ("cov", "polled"):
            await until(lambda n=name: len(h.values(topic(n, "counter"))) >= 3)
            values = [v["value"] for v in h.values(topic(name, "counter"))]
            assert values == sorted(values) and values[-1] > values[0]
        cov, polled = h.bridge.devices["cov"], h.bridge.devices["polled"]
        assert all(s.subscribed for s in cov.points.values())  # type: ignore[attr-defined]
        assert not any(s.subscribed for s in polled.points.values())  # type: ignore[attr-defined]
        assert cov.plan == []  # type: ignore[attr-defined]
        await h.bridge.stop()

    asyncio.run(main())


def test_priority_writes_relinquish_and_refusals(peer: NodeDevice) -> None:
    points = [
        {"name": "setpoint", "object": "AV:1", "writable": True, "priority": 8},
        {"name": "valve", "object": "AO:1", "writable": True},
        {"name": "pump", "object": "BO:1", "writable": True},
        {"name": "fan", "object": "MSO:1", "writable": True, "enum": {
            1: "off", 2: "low", 3: "high", 4: "boost"}},
        {"name": "season", "object": "MSV:1", "writable": True},
        {"name": "nowhere", "object": "AV:77", "writable": True},
        {"name": "temperature", "object": "AI:1"},
    ]

    async def main() -> None:
        h = Harness({"bacnet": [device("ahu", peer, 2001, points, mode="poll")]})
        await h.bridge.start()
        await until(lambda: h.last(topic("ahu", "status")) == "online")

        async def write(point: str, value: object) -> dict[str, Any]:
            before = len(h.values(topic("ahu", point) + "/set/result"))
            h.write("ahu", point, value)
            await until(lambda: len(h.values(topic("ahu", point) + "/set/result")) > before)
            return dict(h.last(topic("ahu", point) + "/set/result"))

        async def reads(point: str, value: object) -> None:
            await until(lambda: (h.last(topic("ahu", point)) or {}).get("value") == value)

        for point, value in (("setpoint", 25.5), ("valve", 42.0), ("pump", True),
                             ("fan", "high"), ("season", 3)):
            assert (await write(point, value))["ok"] is True, point
            await reads(point, value)
        # relinquish: null at the point's priority; the relinquish default comes back
        result = await write("setpoint", None)
        assert result == {**result, "ok": True, "value": None}
        await reads("setpoint", 20.0)
        assert (await write("pump", None))["ok"] is True
        await reads("pump", False)
        refused = {
            "season": (9, "the device refused the write: property: value-out-of-range"),
            "nowhere": (1.0, "the device refused the write: object: unknown-object"),
            "fan": ("turbo", "is not one of"),
            "pump": (1, "expected true or false"),
            "temperature": (1, "not writable"),
        }
        for point, (value, reason) in refused.items():
            result = await write(point, value)
            assert result["ok"] is False and reason in result["error"], (point, result)
        await h.bridge.stop()

    asyncio.run(main())


def test_discovery_finds_every_device_also_behind_the_router(peer: NodeDevice) -> None:
    async def main() -> list[tools.Discovered]:
        return await tools.discover(("127.0.0.1", 0), ("127.255.255.255", peer.port), 0.5)

    found = asyncio.run(main())
    assert [(d.device_id, d.route) for d in found] == [
        (1001, wire.Route(peer.host, peer.port)),
        (2001, wire.Route(peer.host, peer.port, 5, b"\x01")),
        (2002, wire.Route(peer.host, peer.port, 5, b"\x02"))]
    assert found[1].name == "test device 2001" and found[1].vendor == "bacnet-js test"
    lines = tools.format_discovered(found)
    assert f'device_id = 2002, address = "{peer.address}", network = 5, mac = "02"' in \
        lines[5]


def test_device_down_at_start_then_killed_and_restarted() -> None:
    later = NodeDevice()  # not started yet: the bridge starts first

    async def main() -> None:
        h = Harness({"bacnet": [device("late", later, 1001, [COUNTER])]})
        await h.bridge.start()
        await until(lambda: h.last(topic("late", "status")) == "offline")
        await until(lambda: h.bridge.devices["late"].counters.timeouts >= 2)
        await asyncio.get_running_loop().run_in_executor(None, later.start)
        await until(lambda: h.last(topic("late", "status")) == "online")
        await until(lambda: len(h.values(topic("late", "counter"))) >= 3)
        before = h.values(topic("late", "counter"))[-1]["value"]
        later.kill()
        await until(lambda: h.last(topic("late", "status")) == "offline")
        gone = len(h.seen)
        assert h.last(topic("late", "counter"))["quality"] == "bad"
        await asyncio.get_running_loop().run_in_executor(None, later.start)
        await until(lambda: h.last(topic("late", "status")) == "online")
        fresh = await until(lambda: [v for t, v in h.since(gone)
                                     if t == topic("late", "counter") and v["quality"] == "good"])
        assert fresh[0]["value"] < before + 5  # the new device counts from 0 again
        outage = [v for t, v in h.since(gone) if t == topic("late", "counter")]
        assert outage[0]["quality"] == "good"  # nothing more was published bad meanwhile
        await h.bridge.stop()

    try:
        asyncio.run(main())
    finally:
        later.kill()


def test_a_peer_answering_garbage_stays_offline_and_is_counted() -> None:
    junk = NodeDevice(mode="garbage").start()

    async def main() -> None:
        h = Harness({"bacnet": [device("junk", junk, 1001, [COUNTER])]})
        await h.bridge.start()
        await until(lambda: h.bridge.devices["junk"].counters.timeouts >= 2)
        counters = h.bridge.devices["junk"].counters
        assert counters.crc_errors >= 2 and h.last(topic("junk", "status")) == "offline"
        assert h.values(topic("junk", "counter")) == [{**h.last(topic("junk", "counter")),
                                                       "quality": "bad", "value": None}]
        await h.bridge.stop()

    try:
        asyncio.run(main())
    finally:
        junk.kill()


def test_memory_stays_bounded_over_100_reconnects() -> None:
    # a device address where nothing listens: every attempt opens a socket, sends, times out,
    # closes and backs off (reconnect_max kept tiny so that 100 take a second or two)
    silent = f"{loopback_host()}:{free_udp_port()}"
    config = {"name": "gone", "device_id": 1, "address": silent, "local_address": "127.0.0.1:0",
              "timeout": 0.005, "retries": 0, "reconnect_initial": 0.001,
              "reconnect_max": 0.002, "points": [COUNTER]}

    async def main() -> tuple[int, int]:
        h = Harness({"bacnet": [config]})
        await h.bridge.start()
        counters = h.bridge.devices["gone"].counters
        await until(lambda: counters.timeouts >= 10)
        first = rss_kib(os.getpid())
        await until(lambda: counters.timeouts >= 110)
        last = rss_kib(os.getpid())
        await h.bridge.stop()
        return first, last

    first, last = asyncio.run(main())
    assert last - first <= 1024, f"RSS grew {last - first} KiB over 100 reconnects"


def ahu_config(peer: NodeDevice, points: str) -> str:
    """A `[[bridge.bacnet]]` device "ahu": device 2001 behind the test router, with `points`
    (the rows of its `points` array)."""
    return f"""
[[bridge.bacnet]]
name = "ahu"
device_id = 2001
address = "{peer.address}"
network = 5
mac = "01"
local_address = "127.0.0.1:0"
points = [{points}]
"""


def test_values_on_mqtt_through_outpost_run(
        peer: NodeDevice, broker_factory: Callable[..., BrokerProcess]) -> None:
    config = "[bridge]\ndiagnostics_interval = 0.5\n" + ahu_config(peer, """
  { name = "temperature", object = "analog-input:1" },
  { name = "door", object = "BI:1" },
  { name = "setpoint", object = "AV:1", writable = true, priority = 10 },
""")
    with Watcher(broker_factory(config)) as mqtt:
        assert mqtt.wait(topic("ahu", "status"), lambda s: s == "online") == "online"
        assert mqtt.wait(topic("ahu", "temperature")) == {
            **mqtt.latest(topic("ahu", "temperature")), "value": 21.5, "unit": "°C",
            "quality": "good"}
        assert mqtt.wait(topic("ahu", "door"))["value"] is True
        result = mqtt.set(topic("ahu", "setpoint"), 4, 23.0)
        assert result == {"id": 4, "ok": True, "error": None, "value": 23.0, "registers": None}
        assert mqtt.wait(topic("ahu", "setpoint"), lambda v: v["value"] == 23.0)
        assert mqtt.set(topic("ahu", "setpoint"), 5, None)["ok"] is True
        assert mqtt.wait(topic("ahu", "setpoint"), lambda v: v["value"] == 20.0)
        assert mqtt.wait(topic("ahu", "diagnostics"), lambda d: d["requests"] > 0)[
            "timeouts"] == 0


def test_probe_command(peer: NodeDevice, tmp_path: Path,
                       capsys: pytest.CaptureFixture[str]) -> None:
    from outpost.cli import main

    assert main(["bacnet", "probe", peer.address, "--device-id", "2002", "--network", "5",
                 "--mac", "02", "--bind", "127.0.0.1:0", "--object", "AI:1", "--object",
                 "AV:99"]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert any(line.startswith("p1") and "21.5 °C" in line for line in lines), lines
    assert any(line.startswith("p2") and "FAILED: object: unknown-object" in line
               for line in lines), lines
    assert lines[-1] == "1 of 2 point(s) answered, 1 failed"
    # a device of the configuration, with its points
    config = tmp_path / "outpost.toml"
    config.write_text(ahu_config(peer, """
  { name = "temperature", object = "analog-input:1", unit = "°C" },
"""))
    assert main(["bacnet", "probe", "--config", str(config), "--device", "ahu"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert any(line.startswith("temperature") for line in lines), lines
    assert lines[-1] == "1 of 1 point(s) answered, 0 failed", lines
    assert main(["bacnet", "discover", "--broadcast", f"127.255.255.255:{peer.port}",
                 "--bind", "127.0.0.1:0", "--wait", "0.3"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "3 device(s) answered"
