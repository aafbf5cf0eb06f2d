"""`history_answer`: the parameters, the resolution it picks, the size of a day, the errors."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from outpost.history_api import HistoryRequestError, history_answer, parse_time
from storage.history.config import HistoryConfig
from storage.history.reader import HistoryReader
from storage.history.store import HistoryStore

T0 = 1_796_000_000_000 - 1_796_000_000_000 % 86_400_000  # midnight UTC
DAY = 86_400_000


@pytest.fixture(scope="module")
def day(tmp_path_factory: pytest.TempPathFactory) -> HistoryReader:
    """24 h of a 1 s point (compacted every 10 min, as the daemon does), a switch that
    changes every 10 min, and 30 s not yet compacted at the end."""
    store = HistoryStore(tmp_path_factory.mktemp("history") / "history.db", HistoryConfig())
    batch = []
    for second in range(DAY // 1000):
        ts = T0 + second * 1000
        batch.append(("boiler/temp", "degC", ts, 60 + 10 * math.sin(second / 600), "good"))
        if second % 600 == 0:
            batch.append(("boiler/pump", None, ts, (second // 600) % 2 == 0, "good"))
        if len(batch) >= 30_000:
            store.write(batch)
            batch = []
            store.compact()
    store.write(batch)
    store.close()
    return HistoryReader(store.path)


NOW = T0 + DAY


def test_a_day_of_a_1s_point_is_1440_minutes_under_200_kb(day: HistoryReader) -> None:
    answer = history_answer(day, {"point": "boiler/temp", "since": "-24h"}, NOW)
    series = answer["series"][0]
    assert (answer["since_ms"], answer["until_ms"]) == (T0, NOW)
    assert series["step_ms"] == 60_000 and len(series["t"]) == 1440
    assert series["unit"] == "degC"
    assert all(lo <= v <= hi for lo, v, hi in zip(series["min"], series["value"], series["max"],
                                                  strict=True))
    assert len(json.dumps(answer, separators=(",", ":"))) <= 200_000


def test_the_raw_samples_when_they_fit(day: HistoryReader) -> None:
    answer = history_answer(day, {"point": ["boiler/temp"], "since": "-10m",
                                  "max_points": "600"}, NOW)
    series = answer["series"][0]
    assert series["step_ms"] == 0 and series["min"] is None
    assert series["t"] == [NOW - 600_000 + i * 1000 for i in range(600)]
    assert series["value"][0] == pytest.approx(60 + 10 * math.sin((DAY // 1000 - 600) / 600))


def test_an_hour_gets_a_round_step_from_raw_samples(day: HistoryReader) -> None:
    series = history_answer(day, {"point": "boiler/temp"}, NOW)["series"][0]
    assert series["step_ms"] == 5000 and len(series["t"]) == 720
    first = [60 + 10 * math.sin(s / 600) for s in range(DAY // 1000 - 3600,
                                                          DAY // 1000 - 3595)]
    assert series["value"][0] == pytest.approx(sum(first) / 5)
    assert series["min"][0] == pytest.approx(min(first))


def test_a_step_reads_the_aggregates_and_equals_the_raw_figures(day: HistoryReader) -> None:
    quarter = history_answer(day, {"point": "boiler/temp", "since": "-24h", "step": "15m"},
                             NOW)["series"][0]
    assert quarter["step_ms"] == 900_000 and len(quarter["t"]) == 96
    raw_step = history_answer(day, {"point": "boiler/temp", "since": "-2h", "step": "30s"},
                              NOW)["series"][0]
    minutes = history_answer(day, {"point": "boiler/temp", "since": "-2h", "step": "1m"},
                             NOW)["series"][0]
    assert len(raw_step["t"]) == 240 and len(minutes["t"]) == 120
    for i, t in enumerate(minutes["t"]):
        halves = raw_step["t"].index(t)
        mean = (raw_step["value"][halves] + raw_step["value"][halves + 1]) / 2
        assert minutes["value"][i] == pytest.approx(mean)
        assert minutes["max"][i] == max(raw_step["max"][halves:halves + 2])


def test_values_that_are_not_numbers_come_raw(day: HistoryReader) -> None:
    series = history_answer(day, {"point": "boiler/pump", "since": "-1h"}, NOW)["series"][0]
    assert series["step_ms"] == 0 and len(series["t"]) == 6
    assert series["value"] == [0.0, 1.0, 0.0, 1.0, 0.0, 1.0] or series["value"] == [
        1.0, 0.0, 1.0, 0.0, 1.0, 0.0]
    week = history_answer(day, {"point": "boiler/pump", "since": "-24h", "max_points": "10"},
                          NOW)["series"][0]
    assert len(week["t"]) <= 10 and week["step_ms"] > 0


def test_unknown_point_is_named_in_its_series(day: HistoryReader) -> None:
    answer = history_answer(day, {"point": ["boiler/temp", "boiler/nothing"], "since": "-5m"},
                            NOW)
    known, unknown = answer["series"]
    assert len(known["t"]) == 300
    assert unknown == {"point": "boiler/nothing", "unit": None, "step_ms": 0, "t": [],
                       "value": [], "min": None, "max": None, "error": "unknown point"}


@pytest.mark.parametrize(("params", "message"), [
    ({}, "point: at least one"),
    ({"point": "temp"}, "'temp' is not device/point"),
    ({"point": "a/b", "since": "yesterday"}, "since: 'yesterday' is not a time"),
    ({"point": "a/b", "until": "-1x"}, "until: '1x' is not a duration"),
    ({"point": "a/b", "since": "-1h", "until": "-2h"}, "must be before until"),
    ({"point": "a/b", "step": "0s"}, "step: '0s' must be longer than 0"),
    ({"point": "a/b", "step": "fast"}, "step: 'fast' is not a duration"),
    ({"point": "a/b", "since": "-7d", "step": "1ms"}, "more than 100000 buckets"),
    ({"point": "a/b", "max_points": "many"}, "max_points: 'many' is not a whole number"),
    ({"point": "a/b", "max_points": "0"}, "max_points: 0 is not within"),
])
def test_bad_parameters_are_named(day: HistoryReader, params: dict[str, str],
                                  message: str) -> None:
    with pytest.raises(HistoryRequestError, match=message.replace("(", r"\(")):
        history_answer(day, params, NOW)


def test_time_forms() -> None:
    assert parse_time("2026-12-06T21:00:00Z", 0, "since") == 1796590800000
    assert parse_time("2026-12-06T22:00:00+01:00", 0, "since") == 1796590800000
    assert parse_time("2026-12-06T21:00:00", 0, "since") == 1796590800000  # UTC
    assert parse_time("1796590800000", 0, "since") == 1796590800000
    assert parse_time("-90s", 100_000, "since") == 10_000
    assert parse_time("now", 5, "until") == 5


def test_a_missing_file_is_an_error(tmp_path: Path) -> None:
    from storage.history.schema import HistoryFileError

    with pytest.raises(HistoryFileError, match="no history file"):
        history_answer(HistoryReader(tmp_path / "history.db"), {"point": "a/b"}, NOW)
