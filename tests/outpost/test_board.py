"""The status board and the reload registry, driven with a real broker core and a fake clock:
providers and their failures, the topic watcher reading the documented device/uplink topics,
bounded history, the STATUS= line and the `outpost status` text; reload rules (restart-only
keys, announced limits, secrets, sections, callbacks that refuse)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from gateway.base.settings import ConfigError
from gateway.broker.codec.packets import Publish
from gateway.broker.contracts.hooks import BrokerHooks, HookChain
from gateway.broker.engine.links import Link
from outpost import status as status_module
from outpost.config import Config, load_config
from outpost.reload import Reloader, broker_reloader, diff, reloadable_hooks
from outpost.status import StatusBoard, StatusProvider, render_text, summary_line
from tests.gateway.broker.core.fakes import Harness


class Clock:
    def __init__(self, harness: Harness) -> None:
        self.harness = harness
        self.wall = 1_700_000_000.0

    def mono(self) -> float:
        return self.harness.now

    def wallclock(self) -> float:
        return self.wall + self.harness.now


def board_for(harness: Harness, history: int = 120) -> StatusBoard:
    clock = Clock(harness)
    return StatusBoard(harness.broker, clock.mono, clock.wallclock, history)


def test_broker_part_of_the_status() -> None:
    h = Harness()
    board = board_for(h)
    client, _sink = h.connect("plc-7")
    h.subscribe(client, "a/#", qos=1)
    other, _ = h.connect("hmi")
    h.send(other, Publish("a/1", b"x", qos=0))
    h.advance(5)
    board.sample()
    h.send(other, Publish("a/2", b"x", qos=0))
    h.send(other, Publish("a/3", b"x", qos=0))
    h.advance(2)
    status = board.sample()
    assert status["clients"]["connected"] == 2
    assert [c["client_id"] for c in status["clients"]["list"]] == ["hmi", "plc-7"]
    assert status["messages"]["received"] == 3
    assert status["messages"]["received_per_s"] == 1.0  # 2 messages in 2 s
    assert status["subscriptions"] == 1
    assert "devices" not in status and "uplink" not in status  # nothing to show
    assert summary_line(status) == "2 clients, 1.0 msg/s in"


class Fixed:
    def __init__(self, section: dict[str, Any] | None) -> None:
        self.section = section

    def status(self) -> dict[str, Any] | None:
        return self.section


class Broken:
    def status(self) -> dict[str, Any]:
        raise RuntimeError("disk on fire")


def test_providers_sections_and_a_broken_one(caplog: pytest.LogCaptureFixture) -> None:
    board = board_for(Harness())
    assert isinstance(Fixed(None), StatusProvider)
    board.add_provider("uplink", Fixed({"connected": True, "backlog_messages": 12,
                                        "backlog_bytes": 2048, "oldest_age_s": 90.0,
                                        "dropped": 0, "drain_rate": 4.0, "eta_s": 3.0}))
    board.add_provider("store", Broken())
    board.add_provider("devices", Fixed(None))  # nothing to say: section left out
    with pytest.raises(TypeError):
        board.add_provider("bad", object())  # type: ignore[arg-type]
    with caplog.at_level(logging.ERROR):
        status = board.collect()
    assert status["store"] == {"error": "RuntimeError: disk on fire"}
    assert "status provider 'store' failed" in caplog.text
    assert "devices" not in status
    assert summary_line(status) == "0 clients, uplink up, backlog 12, 0.0 msg/s in"
    text = render_text(status)
    assert "uplink: connected" in text
    assert "backlog     12 messages (2.0 KiB), oldest 1:30" in text
    assert "drain       4.0 msg/s, ETA 3s" in text
    assert "store       error: RuntimeError: disk on fire" in text


def point(value: object, unit: str = "kW", quality: str = "good") -> bytes:
    import json

    return json.dumps({"value": value, "unit": unit, "ts": 1717430400100,
                       "quality": quality}).encode()


def test_topic_watcher_reads_the_documented_topics() -> None:
    h = Harness()
    board = board_for(h, history=3)
    board.watch_topics("site/devices")
    bridge = Link(h.broker, "bridge", lambda: h.now)
    bridge.publish("site/devices/meter-1/status", b"online", 1, True)
    bridge.publish("site/devices/meter-1/power", point(12.5))
    bridge.publish("site/devices/meter-1/diagnostics",
                   b'{"ts":1,"requests":10,"timeouts":2,"crc_errors":1,"exceptions":0,'
                   b'"stale_frames":5,"latency_ms":3.5}')
    bridge.publish("site/devices/meter-2/status", b"offline", 1, True)
    bridge.publish("site/devices/meter-2/mode", b"not json")
    bridge.publish("site/devices/meter-2/a/b", b"too deep: ignored")
    bridge.publish("$SYS/outpost/uplink", b'{"connected":false,"backlog_messages":7}', 0, True)
    for value in (1, 2, 3, 4):
        bridge.publish("site/devices/meter-1/power", point(value))
        h.advance(1)
        board.sample()
    status = board.collect(history=True)
    devices = {d["name"]: d for d in status["devices"]["devices"]}
    assert (status["devices"]["online"], status["devices"]["offline"]) == (1, 1)
    meter = devices["meter-1"]
    assert meter["online"] is True and meter["errors"] == 3 and meter["requests"] == 10
    assert meter["points"]["power"]["value"] == 4 and meter["points"]["power"]["unit"] == "kW"
    assert meter["last_value_age_s"] == 1.0
    assert devices["meter-2"]["points"]["mode"]["value"] == "not json"
    assert set(devices["meter-2"]["points"]) == {"mode"}
    assert status["uplink"] == {"connected": False, "backlog_messages": 7}
    # Bounded history: the last 3 samples only.
    assert [v for _t, v in status["history"]["points/meter-1/power"]] == [2.0, 3.0, 4.0]
    assert [v for _t, v in status["history"]["uplink/backlog_messages"]] == [7, 7, 7]
    assert summary_line(status).startswith("0 clients, devices 1/2 online, uplink down, "
                                           "backlog 7")
    # The watcher's link is not a client.
    assert status["clients"]["connected"] == 0 and status["clients"]["links"] == 2
    # A registered provider replaces the watcher's section.
    board.add_provider("devices", Fixed({"devices": [{"name": "x", "online": True}]}))
    assert board.collect()["devices"] == {"devices": [{"name": "x", "online": True}],
                                          "online": 1, "offline": 0}
    board.close()
    assert "$outpost-status" not in h.broker.sessions


def test_topic_watcher_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(status_module, "MAX_DEVICES", 3)
    h = Harness()
    board = board_for(h)
    board.watch_topics("devices")
    link = Link(h.broker, "noisy", lambda: h.now)
    for i in range(10):
        link.publish(f"devices/d{i}/v", point(i))
    assert len(board.collect()["devices"]["devices"]) == 3
    assert board.watcher is not None and board.watcher.ignored == 7


def test_render_text_of_a_full_status() -> None:
    h = Harness()
    board = board_for(h)
    h.connect("plc-7")
    board.add_provider("store", Fixed({"path": "/var/lib/outpost/outpost.db",
                                       "durability": "full", "size_bytes": 3 << 20,
                                       "wal_bytes": 4096}))
    board.add_provider("devices", Fixed({"devices": [
        {"name": "meter-1", "online": True, "last_value_age_s": 0.4, "errors": 0,
         "points": {"power": {"value": 12.5, "unit": "kW", "quality": "good"}}},
        {"name": "meter-2", "online": False, "last_value_age_s": 3700.0, "errors": 17,
         "points": {"power": {"value": None, "unit": "kW", "quality": "bad"}}},
    ]}))
    text = render_text(board.collect())
    assert "clients     1 connected" in text
    assert "store       /var/lib/outpost/outpost.db (full): 3.0 MiB, WAL 4.0 KiB" in text
    assert "devices: 1 online, 1 offline" in text
    assert "meter-2              offline  last value 1:01:40 ago, 17 errors" in text
    assert "power                    12.5 kW" in text
    assert "power                    - (bad)" in text
    assert "uplink" not in text
    assert "plc-7" in text


# -- reload --------------------------------------------------------------------------------


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_reload_rules(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = write(tmp_path / "outpost.toml", '[limits]\nmax_packet_size = 65536\n'
                 'max_queued_messages = 100\n[[listeners]]\nbind = "127.0.0.1:1883"\n')
    h = Harness(max_packet_size=65536, max_queued_messages=100)
    config = load_config(path)
    reloader = Reloader(config, lambda: load_config(path))
    calls: dict[str, list[Config]] = {"broker": [], "bridge": [], "always": []}
    reloader.register("broker", lambda c: (calls["broker"].append(c),
                                           broker_reloader(h.broker)(c)),
                      sections=("limits", "sys"))
    reloader.register("bridge", calls["bridge"].append, sections=("bridge",))
    reloader.register("always", calls["always"].append)
    session_client, _ = h.connect("keeper", clean=False)
    write(path, 'gateway_id = "renamed"\n[limits]\nmax_packet_size = 1024\n'
          'max_queued_messages = 50\nmax_inflight = 8\n'
          '[[listeners]]\nbind = "127.0.0.1:1884"\n[storage]\ndurability = "memory"\n'
          '[status]\nhistory = 50\n')
    with caplog.at_level(logging.INFO, logger="outpost.reload"):
        assert reloader.reload()
    log = caplog.text
    assert "gateway_id: 'outpost' -> 'renamed' (needs a restart" in log
    assert "listeners: addresses changed (needs a restart" in log
    assert "storage.durability: 'full' -> 'memory' (needs a restart" in log
    assert "limits.max_packet_size: 65536 -> 1024 (lowering a limit announced" in log
    assert "reload: limits.max_inflight: 64 -> 8" in log
    assert "status.history: 120 -> 50 (nothing applies [status] live" in log
    running = reloader.config
    assert running.gateway_id == "outpost" and running.listeners[0].port == 1883
    assert running.storage.durability == "full" and running.status.history == 120
    assert running.limits.max_packet_size == 65536 and running.limits.max_inflight == 8
    assert h.broker.limits.max_inflight == 8 and h.broker.dispatch.limits.max_inflight == 8
    # Queue bounds only grow for existing sessions: nothing queued is dropped by a reload.
    outbound = h.broker.sessions["keeper"].outbound
    assert outbound.limits.max_messages == 100
    assert h.broker.new_outbound().limits.max_messages == 50
    assert len(calls["broker"]) == 1 and calls["bridge"] == [] and len(calls["always"]) == 1
    assert session_client.session is not None
    # Unchanged file: callbacks without sections still run (files they read may have changed).
    assert reloader.reload()
    assert len(calls["broker"]) == 1 and len(calls["always"]) == 2


def test_reload_refuses_invalid_files_and_reports_callback_errors(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = write(tmp_path / "outpost.toml", "[sys]\ninterval = 5\n")
    reloader = Reloader(load_config(path), lambda: load_config(path))

    def refuse(config: Config) -> None:
        raise ConfigError("/etc/outpost/acl", ["line 3: unknown access word 'raed'"])

    reloader.register("Security", refuse)
    reloader.register("broker", lambda config: None, sections=("sys",))
    write(path, "[sys]\ninterval = -5\n[limits]\nqueue_overflow = 1\n")
    with caplog.at_level(logging.INFO, logger="outpost.reload"):
        assert not reloader.reload()
        assert "reload: sys.interval: Input should be greater than or equal to 0" in caplog.text
        assert "reload: limits.queue_overflow:" in caplog.text
        assert reloader.config.sys.interval == 5 and reloader.failures == 1
        write(path, "[sys]\ninterval = 7\n")
        assert reloader.reload()
    assert "Security kept its running settings: /etc/outpost/acl is invalid" in caplog.text
    assert "reload: line 3: unknown access word 'raed'" in caplog.text
    assert reloader.config.sys.interval == 7 and reloader.reloads == 1


def test_secrets_and_tables_are_not_logged() -> None:
    old = Config()
    new = Config.model_validate({"bridge": {"prefix": "plant"}, "listeners": [
        {"bind": "127.0.0.1:1883"}, {"bind": "127.0.0.1:1884"}]})
    described = {c.path: c.describe() for c in diff(old, new)}
    assert described["bridge.prefix"] == "bridge.prefix: 'devices' -> 'plant'"
    assert described["listeners"] == "listeners: changed"
    from outpost.reload import Change

    assert Change("uplink.remotes.password", "a", "b").describe() == (
        "uplink.remotes.password: changed (secret, not shown)")


def test_reloadable_hooks_are_found_inside_chains() -> None:
    class Acl(BrokerHooks):
        def reload(self, config: Config) -> None:
            pass

    inner = Acl()
    chain = HookChain([BrokerHooks(), HookChain([BrokerHooks(), inner])])
    found = list(reloadable_hooks(chain))
    assert [(name, callback.__self__) for name, callback in found] == [  # type: ignore[attr-defined]
        ("Acl", inner)]
