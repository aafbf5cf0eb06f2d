"""The OPC UA family against node-opcua, a third-party server: values, writes, failures.

One server process serves the module; the restart test kills it and starts it again on the
same port with the same certificate folder (only the first start makes a certificate), as a
PLC restarts.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.bridge.opcua.support import Harness, NodeServer, Proxy, until

DEVICE = "plc"
POINTS: list[dict[str, Any]] = [
    {"name": "counter", "node": "ns=1;s=Counter", "type": "uint32", "report": "poll"},
    {"name": "temperature", "node": "/1:PLC/1:Temperature", "type": "float64", "unit": "°C"},
    {"name": "running", "node": "ns=1;s=Running", "type": "bool"},
    {"name": "mode", "node": "ns=1;s=Mode", "enum": {0: "off", 1: "auto", 2: "manual"},
     "writable": True},
    {"name": "setpoint", "node": "ns=1;s=Setpoint", "type": "float64", "writable": True,
     "min": 0, "max": 100},
    {"name": "label", "node": "ns=1;s=Name", "type": "string", "writable": True},
    {"name": "started", "node": "ns=1;s=Started", "type": "datetime"},
    {"name": "vector", "node": "ns=1;s=Vector", "type": "json"},
    {"name": "locked", "node": "ns=1;s=Locked", "writable": True},
    {"name": "failing", "node": "ns=1;s=Failing"},
    {"name": "doubtful", "node": "ns=1;s=Doubtful"},
    {"name": "missing", "node": "ns=1;s=NoSuchTag"},
    {"name": "wrong_type", "node": "ns=1;s=Counter", "type": "string"},
]


def topic(point: str) -> str:
    return f"devices/{DEVICE}/{point}"


def device(endpoint: str, points: list[dict[str, Any]] = POINTS, **extra: Any) -> dict[str, Any]:
    return {"opcua": [{"name": DEVICE, "endpoint": endpoint, "publishing_interval": 0.1,
                       "sampling_interval": 0.05, "keepalive": 0.5, "reconnect_initial": 0.2,
                       "reconnect_max": 1.0, "request_timeout": 4.0, "points": points,
                       **extra}]}


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("node-opcua-pki")


@pytest.fixture(scope="module")
def server(pki: Path) -> Iterator[NodeServer]:
    plc = NodeServer(pki).start()
    yield plc
    plc.kill()


def test_values_timestamps_qualities_and_bad_points(server: NodeServer) -> None:
    async def main() -> None:
        h = Harness(device(server.endpoint))
        await h.bridge.start()
        await until(lambda: h.last(f"devices/{DEVICE}/status") == "online")
        # Counter changes every 100 ms on the server: the next values arrive by themselves (a
        # session the loaded machine lets time out in between publishes one bad value first)
        def good() -> list[Any]:
            return [v for v in h.values(topic("counter")) if v["quality"] == "good"]
        first = (await until(good))[0]
        await until(lambda: len(good()) >= 3)
        later = good()[-1]
        assert later["quality"] == "good" and later["value"] > first["value"]
        # ts is the server's source timestamp, not ours: it is in the past and moves on
        assert later["ts"] > first["ts"] and later["ts"] <= time.time() * 1000 + 1000
        assert h.last(topic("temperature"))["unit"] == "°C"
        assert isinstance(h.last(topic("running"))["value"], bool)
        assert h.last(topic("mode"))["value"] == "auto"
        assert h.last(topic("label"))["value"] == "line 1"
        assert h.last(topic("started"))["value"].endswith("Z")
        assert h.last(topic("vector"))["value"] == [1.5, 2.5, 3.5]
        # Bad and Uncertain status codes map to the quality (Bad: no value)
        assert h.last(topic("failing")) == await until(
            lambda: h.last(topic("failing"))) and h.last(topic("failing"))["quality"] == "bad"
        assert h.last(topic("failing"))["value"] is None
        doubtful = await until(lambda: h.last(topic("doubtful")))
        assert doubtful == {**doubtful, "value": 3.0, "quality": "uncertain"}
        # a node that does not exist and a type mismatch are bad on their own ...
        assert h.last(topic("missing"))["quality"] == "bad"
        assert h.last(topic("wrong_type"))["quality"] == "bad"
        # ... while the others keep coming
        count = len(h.values(topic("counter")))
        await until(lambda: len(h.values(topic("counter"))) > count)
        status = {d["name"]: d for d in h.bridge.status()["devices"]}[DEVICE]
        assert status["online"] is True and status["counters"]["exceptions"] == 2
        await h.bridge.stop()
        assert h.last(f"devices/{DEVICE}/status") == "offline"

    asyncio.run(main())


def test_poll_mode_reads_every_interval(server: NodeServer) -> None:
    async def main() -> None:
        points = [POINTS[0], {"name": "missing", "node": "ns=1;s=NoSuchTag"}]
        h = Harness(device(server.endpoint, points, mode="poll", poll_interval=0.2))
        await h.bridge.start()
        await until(lambda: len(h.values(topic("counter"))) >= 3)
        seen = h.values(topic("counter"))
        assert all(v["quality"] == "good" for v in seen)
        assert seen[-1]["value"] > seen[0]["value"] and seen[-1]["ts"] > seen[0]["ts"]
        assert h.last(topic("missing"))["quality"] == "bad"
        assert h.bridge.status()["devices"][0]["counters"]["requests"] >= 3
        await h.bridge.stop()

    asyncio.run(main())


def test_writes_land_and_bad_writes_are_refused_per_point(server: NodeServer) -> None:
    async def main() -> None:
        h = Harness(device(server.endpoint))
        await h.bridge.start()
        await until(lambda: h.last(topic("setpoint")))

        async def write(point: str, value: object) -> dict[str, Any]:
            before = len(h.values(topic(point) + "/set/result"))
            h.write(DEVICE, point, value)
            await until(lambda: len(h.values(topic(point) + "/set/result")) > before)
            return dict(h.last(topic(point) + "/set/result"))

        assert (await write("setpoint", 42.5))["ok"] is True
        await until(lambda: h.last(topic("setpoint"))["value"] == 42.5)
        assert (await write("label", "line 2"))["value"] == "line 2"
        await until(lambda: h.last(topic("label"))["value"] == "line 2")
        assert (await write("mode", "manual"))["value"] == "manual"
        await until(lambda: h.last(topic("mode"))["value"] == "manual")

        refused = {
            "setpoint": (250, "above max 100"),
            "label": (7, "expected a string"),
            "mode": ("fast", "is not one of"),
            "locked": (1.0, "the server refused the write: Bad"),
            "counter": (5, "not writable"),
            "missing": (1, "not writable"),
        }
        for point, (value, reason) in refused.items():
            result = await write(point, value)
            assert result["ok"] is False and reason in result["error"], (point, result)
        # the device is still there and its values keep coming
        count = len(h.values(topic("counter")))
        await until(lambda: len(h.values(topic("counter"))) > count)
        await h.bridge.stop()

    asyncio.run(main())


def test_server_restart_brings_the_subscription_back_without_stale_good_values(
        server: NodeServer) -> None:
    plc = server  # killed and started again on the same port, as a restarted PLC is

    async def main() -> None:
        h = Harness(device(plc.endpoint, POINTS[:3]))
        await h.bridge.start()
        await until(lambda: len(h.values(topic("counter"))) >= 2)
        plc.kill()
        status = f"devices/{DEVICE}/status"
        await until(lambda: h.last(status) == "offline")
        # the outage is told by where the status messages sit in what was seen, not by when
        # the polls below notice them (a loaded machine may see more messages by then)
        went_offline = max(i for i, m in enumerate(h.seen) if m == (status, b"offline"))
        await until(lambda: all(h.last(topic(p["name"]))["quality"] == "bad"
                                for p in POINTS[:3]))
        await asyncio.get_running_loop().run_in_executor(None, plc.start)
        await until(lambda: h.last(status) == "online")
        back = went_offline + h.seen[went_offline:].index((status, b"online"))
        # the new subscription delivers by itself: fresh, good values from the new server
        await until(lambda: any(t == topic("counter") and v["quality"] == "good"
                                for t, v in h.since(back)))
        # nothing was published as good while the server was away
        outage = h.since(went_offline)[:back - went_offline]
        assert not [m for m in outage if isinstance(m[1], dict) and m[1]["quality"] != "bad"]
        await h.bridge.stop()

    try:
        asyncio.run(main())
    finally:
        if plc.process is None:  # the other tests of the module need it
            plc.start()


def test_dropped_connection_goes_offline_and_resubscribes(server: NodeServer) -> None:
    async def main() -> None:
        proxy = await Proxy(server.port).start()
        h = Harness(device(f"opc.tcp://127.0.0.1:{proxy.port}/UA/Plc", POINTS[:1]))
        await h.bridge.start()
        await until(lambda: len(h.values(topic("counter"))) >= 2)
        proxy.blackhole()  # packets vanish: only the keepalive notices
        await until(lambda: h.last(f"devices/{DEVICE}/status") == "offline")
        assert h.last(topic("counter"))["quality"] == "bad"
        proxy.heal()
        await until(lambda: h.last(f"devices/{DEVICE}/status") == "online")
        await until(lambda: h.last(topic("counter"))["quality"] == "good")
        device_status = h.bridge.status()["devices"][0]
        assert device_status["counters"]["timeouts"] >= 1
        await h.bridge.stop()
        await proxy.close()

    asyncio.run(main())


def test_browse_and_probe_commands(server: NodeServer, tmp_path: Path,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    from outpost.cli import main

    assert main(["opcua", "browse", server.endpoint, "/1:PLC"]) == 0
    listing = capsys.readouterr().out
    assert "ns=1;s=Setpoint" in listing and "1:Setpoint" in listing and "float64 = " in listing

    certificate = tmp_path / "server.der"
    assert main(["opcua", "probe", server.endpoint, "--save-certificate", str(certificate)]) == 0
    report = capsys.readouterr().out
    assert "Basic256Sha256           SignAndEncrypt" in report and certificate.exists()

    # a configured device, over SignAndEncrypt with the saved certificate trusted
    config = tmp_path / "outpost.toml"
    config.write_text(f"""
[[bridge.opcua]]
name = "press-1"
endpoint = "{server.endpoint}"
security_policy = "Basic256Sha256"
security_mode = "SignAndEncrypt"
trusted_certificates = ["{certificate}"]
points = [
  {{ name = "setpoint", node = "ns=1;s=Setpoint", type = "float64" }},
  {{ name = "missing", node = "ns=1;s=NoSuchTag" }},
]
""")
    assert main(["opcua", "probe", "--config", str(config), "--device", "press-1",
                 "--state-dir", str(tmp_path / "state")]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert any(line.startswith("setpoint") and "(good, float64" in line for line in lines)
    assert any(line.startswith("missing") and "FAILED: node ns=1;s=NoSuchTag does not exist"
               in line for line in lines)
    assert lines[-1] == "1 of 2 point(s) answered, 1 failed"


def test_secured_devices_starting_together_share_one_client_certificate(
        server: NodeServer, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # The first start of three secured devices: each needs the client certificate at once,
    # and the server (auto-accepting unknown client certificates, node-opcua-pki 5.7 moving
    # them to trusted/ without a lock) must see one first secure channel at a time, or one
    # in six runs left a device refused for good.
    caplog.set_level(logging.INFO, "outpost.bridge.opcua")
    secured = [("b256-sign", "Basic256Sha256", "Sign"),
               ("b256-encrypt", "Basic256Sha256", "SignAndEncrypt"),
               ("pss-encrypt", "Aes256_Sha256_RsaPss", "SignAndEncrypt")]
    devices = [{**device(server.endpoint, POINTS[:1])["opcua"][0], "name": name,
                "security_policy": policy, "security_mode": mode, "trust_on_first_use": True}
               for name, policy, mode in secured]

    async def main() -> None:
        h = Harness({"opcua": devices}, state_dir=tmp_path)
        await h.bridge.start()
        for name, _, _ in secured:
            await until(lambda n=name: (h.last(f"devices/{n}/counter") or {}).get("quality")
                        == "good")
        await h.bridge.stop()

    asyncio.run(main())
    made = [r for r in caplog.records if "made the client certificate" in r.getMessage()]
    assert len(made) == 1, [r.getMessage() for r in made]
