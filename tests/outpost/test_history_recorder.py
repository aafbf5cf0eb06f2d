"""The history recorder keeps point values only: a point's aggregate windows
(`<prefix>/<device>/<point>/agg/<window>`, bridge/aggregate) reach every bridge observer too,
and are not points. Its reader sees the values received and not flushed yet, once."""

from __future__ import annotations

import json
from pathlib import Path

from outpost.history import HistoryRecorder
from storage.history.config import HistoryConfig


def _value(value: object, ts: int) -> bytes:
    return json.dumps({"value": value, "unit": "°C", "ts": ts, "quality": "good"}).encode()


def test_only_point_topics_are_recorded(tmp_path: Path) -> None:
    recorder = HistoryRecorder(HistoryConfig(), tmp_path, "devices")
    recorder.start()
    value = _value(21.5, 1_700_000_000_000)
    window = json.dumps({"ts": 1_700_000_060_000, "mean": 21.5, "min": 21.5, "max": 21.5,
                         "count": 1}).encode()
    recorder.point("devices/plc/temp", value)
    recorder.point("devices/plc/temp/agg/1m", window)
    recorder.stop()  # the last flush
    assert set(recorder.store.ids) == {"plc/temp"}
    assert recorder.unreadable == 0


def test_its_reader_sees_the_values_not_flushed_yet(tmp_path: Path) -> None:
    recorder = HistoryRecorder(HistoryConfig(flush_interval=600), tmp_path, "devices")
    recorder.start()
    since, until = 1_700_000_000_000, 1_700_000_010_000

    def read() -> list[object]:
        with recorder.reader.view() as view:
            point = view.point("plc/temp")
            return [] if point is None else view.raw(point, since, until).values

    recorder.point("devices/plc/temp", _value(21.5, since))
    recorder.point("devices/plc/temp", b"not json")
    assert read() == [21.5] and recorder.store.flushes == 0  # a point not in the file yet
    recorder._flush()  # as the thread does each flush_interval
    recorder.point("devices/plc/temp", _value(22.0, since + 1000))
    assert read() == [21.5, 22.0]
    recorder.stop()
    assert read() == [21.5, 22.0] and recorder.store.samples_written == 2
