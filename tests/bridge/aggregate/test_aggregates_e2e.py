"""pymodbus simulator -> `outpost run` -> MQTT: aggregates against the raw values, and kill -9.

The simulator's registers change every 70 ms; the gateway polls every 0.1 s and aggregates two
points over 2 s windows, one beside its raw values and one instead of them. A subscriber takes
both topics: each whole window must be exactly what the raw values it received make
(recomputed with the window math the gateway uses, bridge/aggregate/window.py, whose own tests
check it against a brute-force integral). Then the gateway is killed with SIGKILL inside a
window, and started again on the same state directory: that window is published `partial`.
"""

from __future__ import annotations

import json
import logging
import random
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from bench.bridge.simulator import Simulator
from bridge.aggregate.window import Window, WindowAccumulator
from tests.bridge.support import Watcher
from tests.gateway.broker.e2e.helpers import PahoClient
from tests.support.broker_proc import BrokerProcess
from tests.support.waiting import wait_for

logging.getLogger("pymodbus").setLevel(logging.CRITICAL)

WIDTH_MS = 2000


def config(port: int) -> str:
    return f"""
[bridge]
diagnostics_interval = 0
qos = 1  # the persistent session below gets what was published while it was away

[[bridge.buses]]
name = "line"
type = "tcp"
host = "127.0.0.1"
port = {port}

[[bridge.devices]]
name = "plc"
bus = "line"
unit_id = 1
address_base = 0
poll_interval = 0.1
report = "poll"
points = [
  {{ name = "flow", address = 0, unit = "m3/h", aggregate = "2s" }},
  {{ name = "level", address = 1, scale = 0.5, aggregate = "2s", aggregate_send = "instead" }},
]
"""


@pytest.fixture
def changing() -> Iterator[Simulator]:
    """A simulator whose registers 0 and 1 take a new random value every 70 ms."""
    sim = Simulator([1], "tcp", size=10)
    sim.start()
    stop = threading.Event()
    rng = random.Random(43)

    def change() -> None:
        while not stop.wait(0.07):
            sim.set_registers(1, "holding", 0, [rng.randrange(0, 500), rng.randrange(0, 90)])

    thread = threading.Thread(target=change, daemon=True)
    thread.start()
    yield sim
    stop.set()
    thread.join()
    sim.stop()


def aggregates(mqtt: PahoClient, topic: str) -> list[dict[str, Any]]:
    return [json.loads(m.payload) for m in mqtt.messages if m.topic == topic]


def recomputed(raw: list[dict[str, Any]]) -> dict[int, Window]:
    acc = WindowAccumulator(WIDTH_MS)
    closed: list[Window] = []
    for sample in raw:
        closed += acc.add(sample["ts"], sample["value"] if sample["quality"] == "good" else None)
    return {w.start_ms: w for w in closed}


def test_aggregates_match_the_raw_values_and_survive_kill_9(
    changing: Simulator, broker_factory: Callable[..., BrokerProcess], tmp_path: Path
) -> None:
    state = tmp_path / "state"
    gateway = broker_factory(config(changing.port), "--state-dir", str(state))
    flow_agg = "devices/plc/flow/agg/2s"
    # a persistent session: what the restarted gateway publishes before we reconnect is
    # queued for it (a retained message would only keep the last window)
    keeper = PahoClient(gateway, client_id="agg-keeper", clean_session=False)
    keeper.connect()
    keeper.subscribe("devices/+/+/agg/#", 1)
    keeper.close()
    with Watcher(gateway) as mqtt:
        whole = wait_for(lambda: [a for a in aggregates(mqtt, flow_agg) if not a["partial"]][2:],
                         timeout=20, message="three whole windows of flow")
        raw = [json.loads(p) for p in mqtt.payloads("devices/plc/flow")]
        windows = recomputed(raw)
        for agg in whole:
            mine = windows[agg["start"]]
            assert (agg["end"], agg["ts"]) == (mine.end_ms, mine.end_ms)
            assert (agg["count"], agg["first"], agg["last"], agg["min"], agg["max"]) == (
                mine.count, mine.first, mine.last, mine.min, mine.max)
            assert agg["covered_ms"] == mine.covered_ms == WIDTH_MS
            assert agg["mean"] == pytest.approx(mine.mean, rel=1e-9)
            assert agg["unit"] == "m3/h"
            assert agg["count"] >= 2 and agg["min"] < agg["max"]  # the values moved
        # `instead`: the level's raw values never reach MQTT, its aggregates do
        level = wait_for(lambda: [a for a in aggregates(mqtt, "devices/plc/level/agg/2s")
                                  if not a["partial"]], message="a whole window of level")
        assert mqtt.payloads("devices/plc/level") == []
        assert all(0 <= a["min"] <= a["mean"] <= a["max"] <= 44.5 for a in level)

        # SIGKILL 1.3-1.8 s into a window: the last save (right after the previous window
        # was published, within the 1 s tick) holds this window open
        wait_for(lambda: 1300 <= time.time() * 1000 % WIDTH_MS <= 1800, interval=0.005,
                 message="the middle of a window")
        killed_in = int(time.time() * 1000) // WIDTH_MS * WIDTH_MS
        gateway.stop(signal.SIGKILL)
        before = {a["start"] for a in aggregates(mqtt, flow_agg)}
    assert killed_in not in before

    again = broker_factory(config(changing.port), "--state-dir", str(state))
    with PahoClient(again, client_id="agg-keeper", clean_session=False) as mqtt:
        mqtt.connect()
        for topic in (flow_agg, "devices/plc/level/agg/2s"):
            cut = wait_for(lambda t=topic: [a for a in aggregates(mqtt, t)
                                            if a["start"] == killed_in], timeout=15,
                           message=f"{topic}: the window open at the kill ({killed_in})")
            assert all(a["partial"] for a in cut), cut
            assert 0 < cut[0]["covered_ms"] < WIDTH_MS
        # and the windows go on, the first one after the start partial too
        wait_for(lambda: [a for a in aggregates(mqtt, flow_agg)
                          if a["start"] > killed_in and not a["partial"]], timeout=15,
                 message="a whole window after the restart")
    assert "window from" in again.log()  # resumed or closed, said in the log
