"""Faults the simulator cannot make, from a raw RTU-over-TCP responder, through `outpost run`.

Late answers, CRC errors, silence, exception responses and garbage: the bridge never publishes
a wrong value (every register holds 1000 * unit + address, so a misplaced answer shows), counts
each fault in the device's diagnostics, and keeps polling the other devices on the line.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.bridge.responder import Responder, value_at
from tests.bridge.support import Watcher
from tests.gateway.broker.e2e.helpers import wait_for
from tests.support.broker_proc import BrokerProcess


@pytest.fixture
def responder() -> Iterator[Responder]:
    line = Responder()
    line.start()
    yield line
    line.stop()


def config(port: int, units: tuple[int, ...], retries: int = 0) -> str:
    devices = "".join(f"""
[[bridge.devices]]
name = "u{unit}"
bus = "line"
unit_id = {unit}
address_base = 0
poll_interval = 0.05
report = "poll"
offline_after = 3
backoff_initial = 0.1
backoff_max = 0.2
max_gap = 0
points = [
  {{ name = "a", address = 0, type = "uint32" }},
  {{ name = "b", address = 50, type = "uint32" }},
]
""" for unit in units)
    return f"""
[bridge]
diagnostics_interval = 0.2

[[bridge.buses]]
name = "line"
type = "rtu-over-tcp"
host = "127.0.0.1"
port = {port}
timeout = 0.2
retries = {retries}
quiet_after_timeout = 0.1
{devices}"""


def expected(unit: int, address: int) -> int:
    return value_at(unit, address) << 16 | value_at(unit, address + 1)


def assert_never_wrong(mqtt: Watcher, units: tuple[int, ...]) -> int:
    """Every published value is the right one or null; returns how many were checked."""
    checked = 0
    for unit in units:
        for point, address in (("a", 0), ("b", 50)):
            for payload in mqtt.payloads(f"devices/u{unit}/{point}"):
                value: Any = __import__("json").loads(payload)
                assert value["value"] in (expected(unit, address), None), (unit, point, value)
                assert (value["value"] is None) == (value["quality"] == "bad")
                checked += 1
    return checked


def diagnostics(mqtt: Watcher, unit: int) -> dict[str, Any]:
    return mqtt.latest(f"devices/u{unit}/diagnostics") or {}


def wait_counter(mqtt: Watcher, unit: int, name: str, above: int) -> dict[str, Any]:
    result: dict[str, Any] = mqtt.wait(f"devices/u{unit}/diagnostics",
                                       lambda d: d[name] > above)
    return result


def test_late_answer_of_the_same_shape_is_never_taken(
    responder: Responder, broker_factory: Callable[..., BrokerProcess]
) -> None:
    # One device, two reads of the same shape (unit 3, FC 3, 2 registers) at 0 and 50: the
    # answer to "50" is held back and arrives right in front of the answer to the next "0".
    with Watcher(broker_factory(config(responder.port, (3,)))) as mqtt:
        mqtt.wait("devices/u3/status", lambda s: s == "online")
        responder.late_address = 50
        for round_ in range(3):
            sent = responder.late_sent
            responder.modes[3] = "late"
            wait_for(lambda s=sent: responder.late_sent > s, message="no late answer")  # type: ignore[misc]
            before = len(mqtt.payloads("devices/u3/a"))
            wait_for(lambda b=before: len(mqtt.payloads("devices/u3/a")) > b + 2)  # type: ignore[misc]
            counters = wait_counter(mqtt, 3, "stale_frames", round_)
            assert counters["timeouts"] >= round_ + 1
        assert assert_never_wrong(mqtt, (3,)) > 10
        assert mqtt.latest("devices/u3/status") == "online"


FAULTS = [
    ("silent", "timeouts"),
    ("crc", "crc_errors"),
    ("garbage", "crc_errors"),
    ("exception", "exceptions"),
    ("late-quiet", "stale_frames"),
]


def test_faults_are_counted_and_other_devices_keep_polling(
    responder: Responder, broker_factory: Callable[..., BrokerProcess]
) -> None:
    with Watcher(broker_factory(config(responder.port, (1, 2), retries=1))) as mqtt:
        mqtt.wait("devices/u1/status", lambda s: s == "online")
        mqtt.wait("devices/u2/status", lambda s: s == "online")
        for mode, counter in FAULTS:
            before = diagnostics(mqtt, 2).get(counter, 0)
            healthy = len(mqtt.payloads("devices/u1/a"))
            responder.modes[2] = mode
            wait_counter(mqtt, 2, counter, before)
            if mode == "exception":  # an answer: the device stays online, its points go bad
                assert mqtt.wait("devices/u2/a", lambda v: v["quality"] == "bad")["value"] is None
                assert mqtt.latest("devices/u2/status") == "online"
            if mode in ("silent", "crc", "garbage"):  # no answer: offline after 3 failures
                mqtt.wait("devices/u2/status", lambda s: s == "offline")
            # unit 1 was polled all along, and never went offline
            wait_for(lambda h=healthy: len(mqtt.payloads("devices/u1/a")) > h + 3)  # type: ignore[misc]
            responder.modes[2] = "ok"
            mqtt.wait("devices/u2/status", lambda s: s == "online")
            mqtt.wait("devices/u2/a", lambda v: v["quality"] == "good")
        statuses = mqtt.payloads("devices/u1/status")
        assert statuses[statuses.index(b"online"):] == [b"online"]  # never offline once up
        assert assert_never_wrong(mqtt, (1, 2)) > 50
        final = diagnostics(mqtt, 2)
        assert final["timeouts"] >= 1 and final["crc_errors"] >= 2
        assert final["exceptions"] >= 1 and final["stale_frames"] >= 1
        clean = diagnostics(mqtt, 1)
        assert clean["timeouts"] == clean["crc_errors"] == clean["exceptions"] == 0
