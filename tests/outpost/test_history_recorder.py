"""The history recorder keeps point values only: a point's aggregate windows
(`<prefix>/<device>/<point>/agg/<window>`, bridge/aggregate) reach every bridge observer too,
and are not points."""

from __future__ import annotations

import json
from pathlib import Path

from outpost.history import HistoryRecorder
from storage.history.config import HistoryConfig


def test_only_point_topics_are_recorded(tmp_path: Path) -> None:
    recorder = HistoryRecorder(HistoryConfig(), tmp_path, "devices")
    recorder.start()
    value = json.dumps({"value": 21.5, "unit": "°C", "ts": 1_700_000_000_000,
                        "quality": "good"}).encode()
    window = json.dumps({"ts": 1_700_000_060_000, "mean": 21.5, "min": 21.5, "max": 21.5,
                         "count": 1}).encode()
    recorder.point("devices/plc/temp", value)
    recorder.point("devices/plc/temp/agg/1m", window)
    recorder.stop()  # the last flush
    assert set(recorder.store.ids) == {"plc/temp"}
    assert recorder.unreadable == 0
