"""The EtherNet/IP family against cpppo's Logix simulator (another implementation than the
client library), started on a free loopback port for the module.

Values go through the bridge on an in-process broker, and in one test through `outpost run`
to an MQTT client. The restart test kills the simulator (SIGKILL) and starts it again on the
same port, as a controller restarts; the reconnect test cuts the connection 100 times through
a proxy and compares the process's RSS before and after (nothing timed).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.bridge.enip.support import LogixSimulator
from tests.bridge.opcua.support import Harness, free_port, until
from tests.bridge.session_outages import (
    down_at_start_then_up,
    garbage_is_offline_and_retried,
    memory_over_100_reconnects,
)
from tests.bridge.support import Watcher
from tests.support.broker_proc import BrokerProcess

DEVICE = "plc"
# name, tag, type, extra keys; every value is zero in a fresh simulator
EVERY_TYPE: list[tuple[str, str, str, dict[str, Any]]] = [
    ("flag", "Flag", "BOOL", {}), ("small", "Small", "SINT", {}), ("word", "Word", "INT", {}),
    ("count", "Count", "DINT", {}), ("big", "Big", "LINT", {}), ("byte", "Byte", "USINT", {}),
    ("unsigned", "Unsigned", "UINT", {}), ("wide", "Wide", "UDINT", {}),
    ("speed", "Speed", "REAL", {}), ("precise", "Precise", "LREAL", {}),
    ("label", "Label", "STRING", {}), ("recipe", "Recipe", "DINT", {"elements": 10}),
    ("recipe3", "Recipe[3]", "DINT", {}), ("motor_speed", "Motor.Speed", "REAL", {}),
    ("running", "Motor.Running", "BOOL", {}), ("main_count", "Program:Main.Count", "DINT", {}),
    ("levels", "Levels", "REAL", {"elements": 300}),  # larger than one answer: fragments
]
ZERO: dict[str, Any] = {"flag": False, "label": "", "recipe": [0] * 10, "levels": [0.0] * 300}


def topic(point: str) -> str:
    return f"devices/{DEVICE}/{point}"


def points(chosen: list[tuple[str, str, str, dict[str, Any]]]) -> list[dict[str, Any]]:
    return [{"name": n, "tag": t, "type": k, **extra} for n, t, k, extra in chosen]


def device(port: int, chosen: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {"enip": [{"name": DEVICE, "host": "127.0.0.1", "port": port, "poll_interval": 0.1,
                      "timeout": 1.0, "reconnect_initial": 0.05, "reconnect_max": 0.2,
                      "points": chosen, **extra}]}


@pytest.fixture(scope="module")
def simulator() -> Iterator[LogixSimulator]:
    plc = LogixSimulator().start()
    yield plc
    plc.kill()


WRITES: list[tuple[str, str, dict[str, Any], Any]] = [  # tag, type, extra, value written
    ("Setpoint", "REAL", {"min": 0, "max": 100}, 42.5),
    ("Mode", "DINT", {"enum": {0: "off", 1: "auto", 2: "manual"}}, "manual"),
    ("Name", "STRING", {}, "line 2"),
    ("Recipe[4]", "DINT", {}, -7),
    ("Motor.Running", "BOOL", {}, True),
]


def test_every_type_arrays_members_writes_and_refusals(simulator: LogixSimulator) -> None:
    chosen = [
        *points(EVERY_TYPE),
        {"name": "missing", "tag": "NoSuchTag", "type": "DINT"},
        {"name": "wrong_type", "tag": "Big", "type": "REAL"},
        *[{"name": f"w{i}", "tag": t, "type": k, "writable": True, **extra}
          for i, (t, k, extra, _) in enumerate(WRITES)],
        {"name": "readonly", "tag": "Word", "type": "INT"},
        {"name": "typo", "tag": "Speed", "type": "DINT", "writable": True},
        {"name": "nowhere", "tag": "NoSuchTag", "type": "DINT", "writable": True},
    ]

    async def main() -> None:
        h = Harness(device(simulator.port, chosen))
        await h.bridge.start()
        await until(lambda: h.last(topic("status")) == "online")
        for name, *_ in EVERY_TYPE:
            got = await until(lambda n=name: h.last(topic(n)))
            assert got["quality"] == "good", (name, got)
            assert got["value"] == ZERO.get(name, 0), name
        dev = h.bridge.devices[DEVICE]
        assert h.last(topic("missing"))["quality"] == "bad"
        assert "no such tag" in dev.points["missing"].error  # type: ignore[attr-defined]
        assert "the controller says LINT, the point says REAL" in \
            dev.points["wrong_type"].error  # type: ignore[attr-defined]
        # one request for every point; the simulator answers the 1,200-byte array in part
        # (at most 488 bytes) and the rest comes in fragments
        assert len(dev.plan) == 1  # type: ignore[attr-defined]

        async def write(point: str, value: object) -> dict[str, Any]:
            before = len(h.values(topic(point) + "/set/result"))
            h.write(DEVICE, point, value)
            await until(lambda: len(h.values(topic(point) + "/set/result")) > before)
            return dict(h.last(topic(point) + "/set/result"))

        for i, (_, _, _, value) in enumerate(WRITES):
            result = await write(f"w{i}", value)
            assert result["ok"] is True, (WRITES[i], result)
            await until(lambda n=f"w{i}", v=value: (h.last(topic(n)) or {}).get("value") == v)
        await until(lambda: (h.last(topic("recipe")) or {}).get("value", [])[4:5] == [-7])
        refused = {
            "w0": (500, "above max 100"),
            "w1": ("maybe", "is not one of"),
            "w2": ("x" * 83, "do not fit a STRING"),
            "w4": (1, "expected true or false"),
            "readonly": (1, "not writable"),
            # a DINT to a tag the controller answered as a REAL: refused with its type
            "typo": (3, "the controller says REAL, the point says DINT"),
            "nowhere": (3, "the controller refused the write: no such tag"),
        }
        for point, (value, reason) in refused.items():
            result = await write(point, value)
            assert result["ok"] is False and reason in result["error"], (point, result)
        await h.bridge.stop()
        assert h.last(topic("status")) == "offline"

    asyncio.run(main())


def test_killed_and_restarted_goes_offline_and_comes_back_with_fresh_values() -> None:
    plc = LogixSimulator().start()
    chosen = points([("speed", "Speed", "REAL", {}), ("count", "Count", "DINT", {})])
    chosen[0]["writable"] = True

    async def main() -> None:
        h = Harness(device(plc.port, chosen))
        await h.bridge.start()
        await until(lambda: h.last(topic("status")) == "online")
        h.write(DEVICE, "speed", 12.5)
        await until(lambda: (h.last(topic("speed")) or {}).get("value") == 12.5)
        plc.kill()
        await until(lambda: h.last(topic("status")) == "offline")
        went = max(i for i, m in enumerate(h.seen) if m == (topic("status"), b"offline"))
        await until(lambda: all(h.last(topic(p["name"]))["quality"] == "bad" for p in chosen))
        await asyncio.get_running_loop().run_in_executor(None, plc.start)
        await until(lambda: h.last(topic("status")) == "online")
        # fresh values from the restarted controller (its tags start at zero again)
        await until(lambda: (h.last(topic("speed")) or {}).get("value") == 0.0)
        outage = [v for t, v in h.since(went) if isinstance(v, dict) and t == topic("speed")]
        assert outage[0]["quality"] == "bad" and outage[1]["quality"] == "good"
        assert h.bridge.status()["devices"][0]["counters"]["timeouts"] >= 1
        await h.bridge.stop()

    try:
        asyncio.run(main())
    finally:
        plc.kill()


def count_device(port: int, **extra: Any) -> dict[str, Any]:
    """The device with one DINT point, `count`."""
    return device(port, points([("count", "Count", "DINT", {})]), **extra)


def test_down_at_start_then_up() -> None:
    plc = LogixSimulator(port=free_port())
    try:
        asyncio.run(down_at_start_then_up(count_device, plc, DEVICE, "count"))
    finally:
        plc.kill()


def test_a_peer_that_answers_garbage_is_offline_and_retried() -> None:
    asyncio.run(garbage_is_offline_and_retried(count_device, DEVICE, "count"))


def test_memory_is_bounded_over_100_reconnects(simulator: LogixSimulator) -> None:
    asyncio.run(memory_over_100_reconnects(
        lambda port: count_device(port, reconnect_initial=0.01, reconnect_max=0.01),
        simulator.port, DEVICE))


def test_values_on_mqtt_through_outpost_run(
        simulator: LogixSimulator, broker_factory: Callable[..., BrokerProcess]) -> None:
    config = f"""
[bridge]
diagnostics_interval = 0.5

[[bridge.enip]]
name = "{DEVICE}"
host = "127.0.0.1"
port = {simulator.port}
poll_interval = 0.1
points = [
  {{ name = "speed", tag = "Motor.Speed", type = "REAL", unit = "rpm" }},
  {{ name = "recipe", tag = "Recipe", type = "DINT", elements = 3 }},
  {{ name = "target", tag = "Program:Main.Count", type = "DINT", writable = true }},
]
"""
    with Watcher(broker_factory(config)) as mqtt:
        assert mqtt.wait(topic("status"), lambda s: s == "online") == "online"
        assert mqtt.wait(topic("speed")) == {**mqtt.latest(topic("speed")), "value": 0.0,
                                             "unit": "rpm", "quality": "good"}
        assert mqtt.wait(topic("recipe"))["value"][:3] == [0, 0, 0]
        result = mqtt.set(topic("target"), 9, 1234)
        assert result == {"id": 9, "ok": True, "error": None, "value": 1234,
                          "registers": None}
        assert mqtt.wait(topic("target"), lambda v: v["value"] == 1234)
        assert mqtt.wait(topic("diagnostics"), lambda d: d["requests"] > 0)["timeouts"] == 0


def test_probe_prints_the_plan_and_every_point(simulator: LogixSimulator, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    from outpost.cli import main

    config = tmp_path / "outpost.toml"
    config.write_text(f"""
[[bridge.enip]]
name = "line-1"
host = "127.0.0.1"
port = {simulator.port}
points = [
  {{ name = "speed", tag = "Motor.Speed", type = "REAL", unit = "rpm" }},
  {{ name = "missing", tag = "NoSuchTag", type = "DINT" }},
]
""")
    assert main(["enip", "probe", "--config", str(config), "--device", "line-1"]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert any("connection size 4000 bytes" in line for line in lines), lines
    assert any(line.startswith("request 1: 2 tag(s)") and "Motor.Speed, NoSuchTag" in line
               for line in lines), lines
    assert any(line.startswith("speed") and "0.0 rpm" in line for line in lines), lines
    assert any(line.startswith("missing") and "FAILED: no such tag" in line
               for line in lines), lines
    assert lines[-1] == "1 of 2 point(s) answered, 1 failed"
    assert main(["enip", "probe", f"127.0.0.1:{simulator.port}", "--point", "Count:DINT"]) == 0
    # cpppo keeps no tag list: browse says so instead of failing silently
    assert main(["enip", "browse", f"127.0.0.1:{simulator.port}"]) == 1
    assert "does not list its tags" in capsys.readouterr().err
