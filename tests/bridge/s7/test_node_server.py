"""The S7 family against node-snap7, snap7's C server (another implementation than the client).

One server process serves the module (tests/bridge/s7/node_server/server.js describes its
memory); the restart test kills it (SIGKILL) and starts it again on the same port, as a PLC
restarts, and another test starts a PLC only after the bridge. A peer that answers junk must
leave the device offline and retried; the reconnect test cuts the connection 100 times through
a proxy and compares the process's RSS after 10 and after 100 (nothing timed). Values go
through the bridge on an in-process broker, and in one test through `outpost run` to an MQTT
client.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.bridge.opcua.support import Harness, until
from tests.bridge.s7.support import S7Server
from tests.bridge.session_outages import (
    down_at_start_then_up,
    garbage_is_offline_and_retried,
    memory_over_100_reconnects,
)
from tests.bridge.support import Watcher
from tests.support.broker_proc import BrokerProcess

DEVICE = "plc"
# name, address, type / extra keys, the value server.js put there
EVERY_TYPE: list[tuple[str, str, dict[str, Any], Any]] = [
    ("bit0", "DB1.DBX0.0", {}, True),
    ("bit3", "DB1.DBX0.3", {"type": "BOOL"}, True),
    ("bit1", "DB1.DBX0.1", {}, False),
    ("byte", "DB1.DBB1", {"type": "BYTE"}, 171),
    ("word", "DB1.DBW2", {"type": "WORD"}, 0xBEEF),
    ("dword", "DB1.DBD4", {"type": "DWORD"}, 0xDEADBEEF),
    ("int", "DB1.DBW8", {"type": "INT"}, -1234),
    ("dint", "DB1.DBD10", {"type": "DINT"}, -123456789),
    ("real", "DB1.DBD14", {"type": "REAL"}, 21.5),
    ("lreal", "DB1.DBB18", {"type": "LREAL"}, math.pi),
    ("string", "DB1.DBB26", {"type": "STRING", "length": 20}, "hello S7"),
    ("wstring", "DB1.DBB48", {"type": "WSTRING", "length": 10}, "grüße ☃"),
    ("dt", "DB1.DBB72", {"type": "DT"}, "2024-03-15T13:45:30.123Z"),
    ("dtl", "DB1.DBB80", {"type": "DTL"}, "2024-03-15T13:45:30.123Z"),
    ("sint", "DB1.DBB92", {"type": "SINT"}, -5),
    ("usint", "DB1.DBB93", {"type": "USINT"}, 200),
    ("uint", "DB1.DBW94", {"type": "UINT"}, 60000),
    ("udint", "DB1.DBD96", {"type": "UDINT"}, 4000000000),
    ("lint", "DB1.DBB100", {"type": "LINT"}, -9000000000000000),
    ("ulint", "DB1.DBB108", {"type": "ULINT"}, 18000000000000000000),
    ("marker", "M0.1", {}, True),
    ("mb5", "%MB5", {"type": "BYTE"}, 7),
    ("mw10", "MW10", {"type": "INT"}, 1000),
    ("md20", "MD20", {"type": "REAL"}, 1.5),
    ("input", "I0.0", {}, True),
    ("id4", "ID4", {"type": "DINT"}, 70000),
    ("iw64", "IW64", {"type": "INT"}, 27648),
    ("ew64", "EW64", {"type": "WORD"}, 27648),  # the German mnemonic of the same input word
    ("output", "Q0.1", {}, True),
    ("qb1", "QB1", {"type": "BYTE"}, 0x5A),
    ("qw2", "QW2", {"type": "INT"}, 500),
    ("counter", "C3", {}, 42),
    ("timer", "T2", {}, 12.3),
    # more than one PDU: a WSTRING[254] (512 bytes) and 128 REALs right after it in DB2
    ("long_text", "DB2.DBB0", {"type": "WSTRING"}, "Ω" * 254),
    *[(f"r{i}", f"DB2.DBD{512 + 4 * i}", {"type": "REAL"}, i + 0.5) for i in range(128)],
]
FAILING: list[dict[str, Any]] = [
    {"name": "no_db", "address": "DB99.DBW0", "type": "INT"},
    {"name": "past_end", "address": "DB1.DBD254", "type": "REAL"},
]
COUNTING = {"name": "ticks", "address": "DB1.DBD124", "type": "DINT", "report": "poll"}


def points() -> list[dict[str, Any]]:
    return [{"name": name, "address": address, **extra}
            for name, address, extra, _ in EVERY_TYPE]


def topic(point: str) -> str:
    return f"devices/{DEVICE}/{point}"


def device(port: int, chosen: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {"s7": [{"name": DEVICE, "host": "127.0.0.1", "port": port, "poll_interval": 0.1,
                    "timeout": 1.0, "reconnect_initial": 0.1, "reconnect_max": 0.5,
                    "points": chosen, **extra}]}


@pytest.fixture(scope="module")
def server() -> Iterator[S7Server]:
    plc = S7Server().start()
    yield plc
    plc.kill()


def test_every_type_and_area_and_reads_larger_than_a_pdu(server: S7Server) -> None:
    async def main() -> None:
        h = Harness(device(server.port, [*points(), *FAILING, COUNTING]))
        await h.bridge.start()
        await until(lambda: h.last(topic("status")) == "online")
        for name, _, _, expected in EVERY_TYPE:
            got = await until(lambda n=name: h.last(topic(n)))
            assert got["quality"] == "good", (name, got)
            assert got["value"] == (pytest.approx(expected) if isinstance(expected, float)
                                    else expected), name
        # a DB that does not exist, an address past the DB's end: bad, each with its reason
        assert h.last(topic("no_db")) == {**h.last(topic("no_db")), "quality": "bad",
                                          "value": None}
        assert h.last(topic("past_end"))["quality"] == "bad"
        device_ = h.bridge.devices[DEVICE]
        assert "DB99 does not exist" in device_.points["no_db"].error  # type: ignore[attr-defined]
        assert "past the end of DB1" in device_.points["past_end"].error  # type: ignore[attr-defined]
        # ... while the others keep coming
        seen = len(h.values(topic("ticks")))
        await until(lambda: len(h.values(topic("ticks"))) > seen + 1)
        assert h.values(topic("ticks"))[-1]["value"] > h.values(topic("ticks"))[seen]["value"]
        # the plan: no answer larger than the PDU of 480 bytes, and no more requests than the
        # bytes of all items need (DB2's 1,024 bytes alone are more than two answers)
        plan = device_.plan  # type: ignore[attr-defined]
        assert all(r.answer_bytes <= 480 for r in plan)
        carried = sum(item.cost for request in plan for item in request.items)
        assert len(plan) == math.ceil(carried / (480 - 14)) == 3
        await h.bridge.stop()
        assert h.last(topic("status")) == "offline"

    asyncio.run(main())


def test_a_point_past_the_end_read_with_others_is_read_apart(server: S7Server) -> None:
    # DB1.DBD252 is read in one piece with DB1.DBW250 (2 bytes apart); the PLC refuses the
    # piece, the device reads the two apart, and the one inside the DB answers.
    chosen = [{"name": "inside", "address": "DB1.DBW250", "type": "INT"},
              {"name": "across", "address": "DB1.DBD254", "type": "REAL"}]

    async def main() -> None:
        h = Harness(device(server.port, chosen))
        await h.bridge.start()
        await until(lambda: (h.last(topic("inside")) or {}).get("quality") == "good")
        assert h.last(topic("inside"))["value"] == 0
        assert h.last(topic("across"))["quality"] == "bad"
        await h.bridge.stop()

    asyncio.run(main())


WRITES: list[tuple[dict[str, Any], Any, Any]] = [  # point, value written, value read back
    ({"address": "DB1.DBX128.5"}, True, True),
    ({"address": "DB1.DBB129", "type": "BYTE"}, 255, 255),
    ({"address": "DB1.DBW130", "type": "INT", "min": -100, "max": 100}, -42, -42),
    ({"address": "DB1.DBD132", "type": "REAL"}, 0.1, pytest.approx(0.1)),
    ({"address": "DB1.DBB136", "type": "LREAL"}, 2.5e100, 2.5e100),
    ({"address": "DB1.DBD144", "type": "DINT", "enum": {0: "off", 7: "on"}}, "on", "on"),
    ({"address": "DB1.DBB148", "type": "STRING", "length": 12}, "line 2", "line 2"),
    ({"address": "DB1.DBB162", "type": "WSTRING", "length": 8}, "Größe", "Größe"),
    ({"address": "DB1.DBB182", "type": "DT"}, "2025-01-02T03:04:05.678Z",
     "2025-01-02T03:04:05.678Z"),
    ({"address": "DB1.DBB190", "type": "DTL"}, "2025-01-02T03:04:05.678901Z",
     "2025-01-02T03:04:05.678Z"),
    ({"address": "MW40", "type": "UINT"}, 65535, 65535),
    ({"address": "Q4.2"}, True, True),
]


def test_writes_land_and_bad_writes_are_refused(server: S7Server) -> None:
    chosen = [{"name": f"w{i}", "writable": True, **point}
              for i, (point, _, _) in enumerate(WRITES)]
    chosen += [{"name": "neighbour", "address": "DB1.DBX128.4"},
               {"name": "readonly", "address": "DB1.DBW200", "type": "INT"},
               {"name": "nowhere", "address": "DB98.DBW0", "type": "INT", "writable": True}]

    async def main() -> None:
        h = Harness(device(server.port, chosen))
        await h.bridge.start()
        await until(lambda: h.last(topic("status")) == "online")

        async def write(point: str, value: object) -> dict[str, Any]:
            before = len(h.values(topic(point) + "/set/result"))
            h.write(DEVICE, point, value)
            await until(lambda: len(h.values(topic(point) + "/set/result")) > before)
            return dict(h.last(topic(point) + "/set/result"))

        for i, (_, value, back) in enumerate(WRITES):
            result = await write(f"w{i}", value)
            assert result["ok"] is True, (WRITES[i], result)
            await until(lambda n=f"w{i}", b=back: (h.last(topic(n)) or {}).get("value") == b)
        assert h.last(topic("neighbour"))["value"] is False  # a bit write leaves its byte be
        refused = {
            "w2": (500, "above max 100"),
            "w1": (256, "out of range for BYTE"),
            "w5": ("maybe", "is not one of"),
            "w6": ("a much too long line", "do not fit STRING[12]"),
            "w0": (1, "expected true or false"),
            "readonly": (1, "not writable"),
            "nowhere": (1, "the PLC refused the write: DB98 does not exist"),
        }
        for point, (value, reason) in refused.items():
            result = await write(point, value)
            assert result["ok"] is False and reason in result["error"], (point, result)
        await h.bridge.stop()

    asyncio.run(main())


def test_plc_killed_and_restarted_goes_offline_and_comes_back_with_fresh_values(
        server: S7Server) -> None:
    plc = server

    async def main() -> None:
        chosen = [COUNTING, {"name": "real", "address": "DB1.DBD14", "type": "REAL"}]
        h = Harness(device(plc.port, chosen))
        await h.bridge.start()
        await until(lambda: len(h.values(topic("ticks"))) >= 2)
        before = h.values(topic("ticks"))[-1]["value"]  # the old server counted for a while
        plc.kill()
        await until(lambda: h.last(topic("status")) == "offline")
        went_offline = max(i for i, m in enumerate(h.seen) if m == (topic("status"),
                                                                      b"offline"))
        await until(lambda: all(h.last(topic(p["name"]))["quality"] == "bad" for p in chosen))
        await asyncio.get_running_loop().run_in_executor(None, plc.start)
        await until(lambda: h.last(topic("status")) == "online")
        back = went_offline + h.seen[went_offline:].index((topic("status"), b"online"))
        # fresh values from the new server: its counter starts again from 0
        fresh = await until(lambda: [v for t, v in h.since(back)
                                     if t == topic("ticks") and v["quality"] == "good"])
        assert fresh[0]["value"] < before
        # nothing was published as good while the PLC was away, each point bad only once
        outage = [m for m in h.since(went_offline)[:back - went_offline]
                  if isinstance(m[1], dict)]
        assert all(v["quality"] == "bad" for _, v in outage)
        assert len([t for t, _ in outage if t == topic("ticks")]) <= 1
        assert h.bridge.status()["devices"][0]["counters"]["timeouts"] >= 1
        await h.bridge.stop()

    try:
        asyncio.run(main())
    finally:
        if plc.process is None:
            plc.start()


def test_down_at_start_then_up() -> None:
    plc = S7Server()  # not started yet: the bridge starts first
    try:
        asyncio.run(down_at_start_then_up(lambda port: device(port, [COUNTING]), plc, DEVICE,
                                          "ticks"))
    finally:
        plc.kill()


def test_a_peer_that_answers_garbage_is_offline_and_retried() -> None:
    asyncio.run(garbage_is_offline_and_retried(lambda port: device(port, [COUNTING]), DEVICE,
                                               "ticks"))


def test_memory_is_bounded_over_100_reconnects(server: S7Server) -> None:
    asyncio.run(memory_over_100_reconnects(
        lambda port: device(port, [COUNTING], poll_interval=0.02, reconnect_initial=0.01,
                            reconnect_max=0.01), server.port, DEVICE))


def test_values_on_mqtt_through_outpost_run(
        server: S7Server, broker_factory: Callable[..., BrokerProcess]) -> None:
    config = f"""
[bridge]
diagnostics_interval = 0.5

[[bridge.s7]]
name = "{DEVICE}"
host = "127.0.0.1"
port = {server.port}
poll_interval = 0.1
points = [
  {{ name = "temperature", address = "DB1.DBD14", type = "REAL", unit = "°C" }},
  {{ name = "running", address = "DB1.DBX0.0" }},
  {{ name = "label", address = "DB1.DBB26", type = "STRING", length = 20 }},
  {{ name = "setpoint", address = "DB1.DBD120", type = "REAL", writable = true }},
]
"""
    with Watcher(broker_factory(config)) as mqtt:
        assert mqtt.wait(topic("status"), lambda s: s == "online") == "online"
        assert mqtt.wait(topic("temperature")) == {**mqtt.latest(topic("temperature")),
                                                   "value": 21.5, "unit": "°C",
                                                   "quality": "good"}
        assert mqtt.wait(topic("running"))["value"] is True
        assert mqtt.wait(topic("label"))["value"] == "hello S7"
        result = mqtt.set(topic("setpoint"), 9, 61.25)
        assert result == {"id": 9, "ok": True, "error": None, "value": 61.25,
                          "registers": None}
        assert mqtt.wait(topic("setpoint"), lambda v: v["value"] == 61.25)
        assert mqtt.wait(topic("diagnostics"), lambda d: d["requests"] > 0)["timeouts"] == 0


def test_probe_prints_the_plan_and_every_point(server: S7Server, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    from outpost.cli import main

    config = tmp_path / "outpost.toml"
    config.write_text(f"""
[[bridge.s7]]
name = "press-1"
host = "127.0.0.1"
port = {server.port}
points = [
  {{ name = "temperature", address = "DB1.DBD14", type = "REAL", unit = "°C" }},
  {{ name = "running", address = "DB1.DBX0.0" }},
  {{ name = "missing", address = "DB99.DBW0", type = "INT" }},
]
""")
    assert main(["s7", "probe", "--config", str(config), "--device", "press-1"]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert any("PDU 480" in line for line in lines), lines
    assert any(line.startswith("request 1:") for line in lines), lines
    assert any("DB1.DBB0..DBB17" in line and "running, temperature" in line
               for line in lines), lines
    assert any(line.startswith("temperature") and "21.5 °C" in line for line in lines), lines
    assert any(line.startswith("missing") and "FAILED: DB99 does not exist" in line
               for line in lines), lines
    assert lines[-1] == "2 of 3 point(s) answered, 1 failed"

    # without a configuration: a host and addresses
    assert main(["s7", "probe", f"127.0.0.1:{server.port}", "--point", "DB1.DBW8:INT",
                 "--point", "M0.1"]) == 0
    out = capsys.readouterr().out
    assert "-1234" in out and "True" in out
