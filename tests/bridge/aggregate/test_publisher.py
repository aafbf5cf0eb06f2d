"""AggregatePublisher on its own: restarts, configuration changes, a corrupt state file.

The clock is a variable the test moves; what is published is collected as the bridge's link
would get it.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from bridge.aggregate.publisher import STATE_FILE, AggregatePublisher
from bridge.config import BridgeConfig
from outpost.config import parse_config


def bridge(window: str | None = "1m", send: str = "beside") -> BridgeConfig:
    extra = {} if window is None else {"aggregate": window, "aggregate_send": send}
    return parse_config({"bridge": {
        "buses": [{"name": "sim", "type": "tcp", "host": "127.0.0.1", "port": 5020}],
        "devices": [{"name": "m", "bus": "sim", "unit_id": 1, "address_base": 0,
                     "points": [{"name": "p", "address": 0, **extra}]}]}}).bridge


class Clock:
    def __init__(self) -> None:
        self.ms = 1_700_000_000_000 // 60_000 * 60_000  # a minute boundary

    def __call__(self) -> float:
        return self.ms / 1000


def sample(value: float, ts_ms: int) -> bytes:
    return json.dumps({"value": value, "unit": None, "ts": ts_ms, "quality": "good"}).encode()


def make(tmp_path: Path, clock: Clock, config: BridgeConfig,
         out: list[tuple[str, dict[str, Any]]]) -> AggregatePublisher:
    pub = AggregatePublisher(lambda t, p: out.append((t, json.loads(p))), clock, tmp_path)
    pub.configure(config)
    return pub


def test_restart_after_the_window_ended_publishes_it_partial(tmp_path: Path) -> None:
    async def main() -> None:
        clock, out = Clock(), []
        t0 = clock.ms
        pub = make(tmp_path, clock, bridge(), out)
        pub.start()
        for i in range(30):
            pub.point("devices/m/p", sample(float(i), t0 + i * 1000))
        clock.ms = t0 + 30_000
        pub.advance()
        pub.save()
        # killed here (no stop); back two minutes later
        clock.ms = t0 + 150_000
        again = make(tmp_path, clock, bridge(), out)
        again.start()
        assert [(t, a["start"], a["count"], a["partial"]) for t, a in out] == [
            ("devices/m/p/agg/1m", t0, 30, True)]
        assert out[0][1]["covered_ms"] == 30_000 and out[0][1]["last"] == 29
        await again.stop()
        await pub.stop()

    asyncio.run(main())


def test_a_changed_window_closes_the_open_one(tmp_path: Path) -> None:
    clock, out = Clock(), []
    t0 = clock.ms
    pub = make(tmp_path, clock, bridge("1m"), out)
    pub.point("devices/m/p", sample(5.0, t0 + 10_000))
    pub.configure(bridge("5m"))  # reload: the 1m window so far goes out, partial
    assert [(t, a["count"], a["partial"]) for t, a in out] == [("devices/m/p/agg/1m", 1, True)]
    assert pub.withheld == frozenset()
    pub.configure(bridge("5m", "instead"))
    assert pub.withheld == {"devices/m/p"}


def test_a_saved_window_of_a_point_no_longer_aggregated_is_published(tmp_path: Path) -> None:
    async def main() -> None:
        clock, out = Clock(), []
        pub = make(tmp_path, clock, bridge("1m"), out)
        pub.point("devices/m/p", sample(2.0, clock.ms + 1000))
        await pub.stop()
        again = make(tmp_path, clock, bridge(None), out)
        again.start()
        assert [(t, a["partial"]) for t, a in out] == [("devices/m/p/agg/1m", True)]
        await again.stop()

    asyncio.run(main())


def test_a_corrupt_state_file_is_moved_aside_and_said(tmp_path: Path,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> None:
        (tmp_path / STATE_FILE).write_text('{"version": 1, "windows": [')
        pub = make(tmp_path, Clock(), bridge(), [])
        pub.start()
        await pub.stop()

    asyncio.run(main())
    assert (tmp_path / f"{STATE_FILE}.corrupt").exists()
    assert "is unreadable" in caplog.text and "are lost" in caplog.text
    assert json.loads((tmp_path / STATE_FILE).read_text())["version"] == 1
