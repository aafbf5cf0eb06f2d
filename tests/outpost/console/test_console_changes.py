"""The console's change path without a browser: a form becomes a device table, an edit keeps
the file's comments, a wrong value comes back at its field, a stale file is never overwritten,
and the live values keep only what a tab can take."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path

import pytest

from gateway.base.settings import ConfigError
from gateway.broker.core.message import Message
from outpost.config_store import ConfigStore
from outpost.console.changes import ConfigFile, StaleFileError, field_errors
from outpost.console.context import audit, audit_log
from outpost.console.devices import (
    NEW_BUS,
    add_device_edit,
    device_table,
    enabled_edit,
    update_device_edit,
)
from outpost.console.live import QUEUE_SIZE, LiveValues
from outpost.daemon import JournalHandler

TEXT = """# kept: a comment of the technician
gateway_id = "site-1"  # the name the cloud knows

[[bridge.buses]]
name = "line"
type = "tcp"
host = "127.0.0.1"

[[bridge.devices]]
name = "plc"   # the PLC in cabinet 2
bus = "line"
unit_id = 2
address_base = 0
points = [{ name = "temperature", address = 0, deadband = 0.5 }]
"""


@pytest.fixture
def config_file(tmp_path: Path) -> ConfigFile:
    path = tmp_path / "outpost.toml"
    path.write_text(TEXT, encoding="utf-8")
    return ConfigFile(path, ConfigStore(path, tmp_path / "state"))


def test_a_form_becomes_a_device_table_with_numbers_and_a_new_bus() -> None:
    device, bus = device_table({
        "name": "meter-1", "map": "eastron-sdm630", "bus": NEW_BUS, "unit_id": "7",
        "poll_interval": "0.5", "bus.name": "rs485", "bus.type": "rtu",
        "bus.device": "/dev/ttyUSB0", "bus.baudrate": "19200",
        "points.0.name": "setpoint", "points.0.address": "10", "points.0.writable": "1",
        "points.1.name": "", "points.1.table": "holding",  # an empty row
    })
    assert device == {"name": "meter-1", "bus": "rs485", "unit_id": 7, "poll_interval": 0.5,
                      "map": "profile:eastron-sdm630",
                      "points": [{"name": "setpoint", "address": 10, "writable": True}]}
    assert bus == {"name": "rs485", "type": "rtu", "device": "/dev/ttyUSB0", "baudrate": 19200}


def test_an_edit_keeps_the_comments_and_shows_its_diff(config_file: ConfigFile) -> None:
    proposal = config_file.propose(
        add_device_edit({"name": "meter-1", "bus": "line", "unit_id": 1,
                         "map": "profile:eastron-sdm630"}, None), "add meter-1", "/")
    assert proposal.new_text.startswith(TEXT.rstrip("\n"))
    assert '+name = "meter-1"' in proposal.diff
    assert config_file.path.read_text() == TEXT  # proposing writes nothing
    config_file.apply(proposal, "alice", lambda: True)
    assert config_file.path.read_text() == proposal.new_text
    newest = config_file.store.history()[-1]
    assert (newest.source, newest.result, newest.reason) == ("console:alice", "applied",
                                                            "add meter-1")


def test_disabling_writes_the_key_in_the_device_table_and_enabling_takes_it_away(
        config_file: ConfigFile) -> None:
    """`enabled = false` lands in the device's own table even when sub-tables follow it."""
    text = TEXT.replace("points = [{ name = \"temperature\", address = 0, deadband = 0.5 }]\n",
                        "\n[[bridge.devices.points]]  # the probe\nname = \"temperature\"\n"
                        "address = 0\n")
    config_file.path.write_text(text, encoding="utf-8")
    proposal = config_file.propose(enabled_edit("devices", "plc", False), "disable plc", "/")
    assert "+enabled = false" in proposal.diff
    disabled = proposal.new_text
    assert disabled.index("enabled = false") < disabled.index("[[bridge.devices.points]]")
    config = config_file.check_text(disabled).bridge
    assert config.devices[0].enabled is False and config.devices[0].points[0].name == "temperature"
    config_file.path.write_text(disabled, encoding="utf-8")
    assert config_file.propose(enabled_edit("devices", "plc", True), "enable", "/").new_text == text


def test_a_wrong_value_is_reported_at_its_field(config_file: ConfigFile) -> None:
    with pytest.raises(ConfigError) as caught:
        config_file.propose(update_device_edit("plc", {}, {"temperature": {"deadband": -1}}),
                            "deadband", "/")
    fields, general = field_errors(caught.value.errors, "bridge.devices.0")
    assert "points.0.deadband" in fields and not general
    assert config_file.path.read_text() == TEXT


def test_a_file_changed_meanwhile_is_not_overwritten(config_file: ConfigFile) -> None:
    proposal = config_file.propose(update_device_edit("plc", {"unit_id": 3}, {}), "unit", "/")
    edited = TEXT + "# edited by hand\n"
    config_file.path.write_text(edited, encoding="utf-8")
    with pytest.raises(StaleFileError):
        config_file.apply(proposal, "alice", lambda: True)
    assert config_file.path.read_text() == edited


def test_a_refused_reload_puts_the_running_file_back(config_file: ConfigFile) -> None:
    proposal = config_file.propose(update_device_edit("plc", {"unit_id": 3}, {}), "unit", "/")
    with pytest.raises(ConfigError, match="previous file is back"):
        config_file.apply(proposal, "alice", lambda: False)
    assert config_file.path.read_text() == TEXT


def test_a_slow_tab_loses_the_oldest_values_only() -> None:
    async def scenario() -> None:
        live = LiveValues("devices")
        queue = live.watch("plc", "session", "alice")
        assert queue is not None
        for n in range(QUEUE_SIZE + 10):
            payload = json.dumps({"value": n, "unit": "°C", "quality": "good"}).encode()
            live.on_message(Message("devices/plc/temperature", payload, 0, False), 0, False)
        live.on_message(Message("devices/other/temperature", b'{"value": 1}', 0, False), 0,
                        False)
        events = [json.loads(queue.get_nowait() or "") for _ in range(queue.qsize())]
        assert len(events) == QUEUE_SIZE and events[-1]["value"] == QUEUE_SIZE + 9
        assert {e["device"] for e in events} == {"plc"}
        live.close()
        assert queue.get_nowait() is None  # the end of the stream

    asyncio.run(scenario())


def test_an_audit_line_carries_who_and_what_as_journal_fields() -> None:
    sent: list[tuple[str, dict[str, object]]] = []
    handler = JournalHandler(lambda message, **fields: sent.append((message, fields)))
    audit_log.addHandler(handler)
    level = audit_log.level
    audit_log.setLevel(logging.INFO)  # (the daemon's root level: --log-level, INFO by default)
    try:
        audit("alice", "change", "add device meter-1", device="meter-1")
    finally:
        audit_log.removeHandler(handler)
        audit_log.setLevel(level)
    message, fields = sent[0]
    assert message == "console: alice change: add device meter-1"
    assert (fields["CONSOLE_USER"], fields["CONSOLE_ACTION"], fields["DEVICE"]) == (
        "alice", "change", "meter-1")
