"""The history store: samples in, the same samples and exact aggregates out; retention by age
and by size; a damaged file is moved aside."""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from storage.history.codec import NUMERIC, OTHER, Series, decode_block, encode_block
from storage.history.config import HistoryConfig, HistoryRule
from storage.history.reader import HistoryReader
from storage.history.store import HistoryStore

T0 = 1_796_000_000_000 - 1_796_000_000_000 % 900_000  # a quarter-hour boundary
DAY = 86_400_000


def _store(tmp_path: Path, **config: object) -> HistoryStore:
    return HistoryStore(tmp_path / "history.db", HistoryConfig.model_validate(config))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 10**13), st.one_of(
    st.none(), st.floats(allow_nan=False), st.integers(-2**53, 2**53))), max_size=50))
def test_numeric_blocks_round_trip(samples: list[tuple[int, float | int | None]]) -> None:
    series = Series(NUMERIC)
    for ts, value in samples:
        series.add(ts, value, 0)
    back = decode_block(NUMERIC, encode_block(series))
    assert back.ts == series.ts
    assert back.values == [None if v is None else float(v) for v in series.values]


def test_other_values_round_trip() -> None:
    series = Series(OTHER)
    for i, value in enumerate([True, False, "on", None, [1, 2], {"a": "b"}]):
        series.add(T0 + i, value, i % 3)
    back = decode_block(OTHER, encode_block(series))
    assert (back.ts, back.values, back.quality) == (series.ts, series.values, series.quality)


def _feed(store: HistoryStore, seconds: int, points: int = 3, start: int = T0,
          flush_every: int = 30, compact_every: int = 600) -> dict[str, list[tuple[int, float]]]:
    """One sample per point per second, flushed every `flush_every` s, compacted every
    `compact_every` s; returns what was written."""
    rng = random.Random(7)
    written: dict[str, list[tuple[int, float]]] = {f"dev/p{i}": [] for i in range(points)}
    batch = []
    for second in range(seconds):
        for name, samples in written.items():
            ts = start + second * 1000 + rng.randrange(0, 900)
            value = round(rng.gauss(20, 5), 3)
            samples.append((ts, value))
            batch.append((name, "degC", ts, value, "good"))
        if (second + 1) % flush_every == 0:
            store.write(batch)
            batch = []
        if (second + 1) % compact_every == 0:
            store.compact()
    store.write(batch)
    return written


def _expected(samples: list[tuple[int, float]], step: int) -> dict[int, tuple[int, float,
                                                                              float, float]]:
    buckets: dict[int, list[float]] = {}
    for ts, value in samples:
        buckets.setdefault(ts - ts % step, []).append(value)
    return {t: (len(v), min(v), max(v), sum(v) / len(v)) for t, v in buckets.items()}


def test_raw_and_aggregates_match_what_was_written(tmp_path: Path) -> None:
    store = _store(tmp_path)
    written = _feed(store, 3000)  # 50 min: blocks, aggregates and frames not yet compacted
    reader = HistoryReader(store.path)
    with reader.view() as view:
        point = view.point("dev/p1")
        assert point is not None and point.unit == "degC"
        raw = view.raw(point, T0, T0 + DAY)
        assert list(zip(raw.ts, raw.values, strict=True)) == written["dev/p1"]
        for step in (60_000, 900_000, 300_000):
            rows = view.buckets(point, T0, T0 + DAY, step, 60_000)
            expected = _expected(written["dev/p1"], step)
            assert [r[0] for r in rows] == sorted(expected)
            for t, n, low, high, mean in rows:
                want = expected[t]
                assert (n, low, high) == want[:3]
                assert mean == pytest.approx(want[3], rel=1e-12)
        quarters = view.buckets(point, T0, T0 + DAY, 900_000, 900_000)
        from_raw = view.buckets(point, T0, T0 + DAY, 900_000, 0)
        assert [r[:4] for r in quarters] == [r[:4] for r in from_raw]
    store.compact()  # everything folded: the same answer from blocks and tables alone
    with reader.view() as view:
        point = view.point("dev/p1")
        assert point is not None
        raw = view.raw(point, T0, T0 + DAY)
        assert list(zip(raw.ts, raw.values, strict=True)) == written["dev/p1"]
        assert view.conn.execute("SELECT count(*) FROM frames").fetchone()[0] == 0
        stored = {r[0]: r[1:] for r in view.conn.execute(
            "SELECT t, n, min, max, mean FROM agg_1m WHERE point_id = ?", (point.id,))}
        expected = _expected(written["dev/p1"], 60_000)
        assert stored.keys() == expected.keys()
        for t, (n, low, high, mean) in stored.items():
            assert (n, low, high) == expected[t][:3]
            assert math.isclose(mean, expected[t][3], rel_tol=1e-12)


def test_retention_by_age_per_pattern(tmp_path: Path) -> None:
    store = _store(tmp_path, raw_days=1, minute_days=2, quarter_days=3,
                   points=[HistoryRule(match="dev/p0", raw_days=0.5, minute_days=0.5,
                                       quarter_days=0.5)])
    _feed(store, 1200)
    store.compact()
    reader = HistoryReader(store.path)

    def counts(name: str) -> tuple[int, int, int]:
        with reader.view() as view:
            point = view.point(name)
            assert point is not None
            return tuple(int(view.conn.execute(  # type: ignore[return-value]
                f"SELECT count(*) FROM {table} WHERE point_id = ?", (point.id,)).fetchone()[0])
                for table in ("blocks", "agg_1m", "agg_15m"))

    assert counts("dev/p0") == (2, 20, 2)
    store.retain(T0 + DAY // 2 + 3_600_000)  # 13 h later: p0's rule keeps 12 h of everything
    assert counts("dev/p0") == (0, 0, 0)
    assert counts("dev/p1") == (2, 20, 2)
    store.retain(T0 + DAY + 3_600_000)  # past a day: raw gone, aggregates kept
    assert counts("dev/p1") == (0, 20, 2)
    store.retain(T0 + 2 * DAY + 3_600_000)
    assert counts("dev/p1") == (0, 0, 2)
    store.retain(T0 + 3 * DAY + 3_600_000)
    assert counts("dev/p1") == (0, 0, 0)


def test_retention_by_size_drops_the_oldest_raw_first(tmp_path: Path) -> None:
    store = _store(tmp_path, max_mb=1)
    _feed(store, 2400, points=40, compact_every=300)  # 96,000 samples, several MiB
    store.compact()
    before = store.live_bytes()
    assert before > 1 << 20
    deleted = store.retain(T0 + 2400 * 1000)
    assert deleted > 0
    assert store.live_bytes() <= 1 << 20
    with HistoryReader(store.path).view() as view:
        oldest_block = view.conn.execute("SELECT min(t0) FROM blocks").fetchone()[0]
        assert oldest_block is None or oldest_block > T0 + 300_000  # the oldest went first
        assert view.conn.execute("SELECT count(*) FROM agg_1m").fetchone()[0] == 40 * 40


def test_a_damaged_file_is_moved_aside(tmp_path: Path) -> None:
    path = tmp_path / "history.db"
    path.write_bytes(b"this is not a database" * 100)
    store = HistoryStore(path, HistoryConfig())
    assert store.write([("dev/p", None, T0, 1.0, "good")]) == 1
    moved = [p.name for p in tmp_path.iterdir() if ".corrupt-" in p.name]
    assert len(moved) == 1
    with HistoryReader(path).view() as view:
        assert view.points() == ["dev/p"]


def test_bad_quality_and_no_value_are_kept(tmp_path: Path) -> None:
    store = _store(tmp_path)
    store.write([("dev/p", None, T0, None, "bad"), ("dev/p", None, T0 + 1000, 2.5, "uncertain"),
                 ("dev/p", None, T0 + 2000, 3.5, "good")])
    store.compact()
    with HistoryReader(store.path).view() as view:
        point = view.point("dev/p")
        assert point is not None
        raw = view.raw(point, T0, T0 + 10_000)
        assert raw.values == [None, 2.5, 3.5] and list(raw.quality) == [2, 1, 0]
        assert view.buckets(point, T0, T0 + 60_000, 60_000, 60_000) == [(T0, 2, 2.5, 3.5, 3.0)]


def test_reader_refuses_a_missing_file(tmp_path: Path) -> None:
    from storage.history.schema import HistoryFileError

    with pytest.raises(HistoryFileError, match="no history file"), \
            HistoryReader(tmp_path / "history.db").view():
        pass


class _Waiting:
    """A writer's unflushed samples (the reader's `Unflushed`)."""

    def __init__(self, samples: list[tuple[str, str | None, int, object, str]]) -> None:
        self.waiting = samples

    def names(self) -> list[str]:
        return sorted({sample[0] for sample in self.waiting})

    def samples(self, name: str) -> list[tuple[str, str | None, int, object, str]]:
        return [sample for sample in self.waiting if sample[0] == name]


def test_a_view_counts_the_unflushed_values_once(tmp_path: Path) -> None:
    """The writer's values not in the file yet are read as the newest frame, those a flush
    committed since they were taken are not counted twice, and a point with no flush yet is
    known by them."""
    store = _store(tmp_path)
    flushed = [("dev/p", "degC", T0 + i * 1000, 20.0 + i, "good") for i in range(3)]
    store.write(flushed[:2])
    store.compact()
    store.write(flushed[2:])
    waiting = _Waiting([*flushed[1:],  # the batch being written when the view was taken
                        ("dev/p", "degC", T0 + 3000, 23, "bad"), ("dev/p", "degC", T0 + 4000,
                                                                   "off", "good"),
                        ("dev/new", None, T0 + 500, 1.5, "good")])
    reader = HistoryReader(store.path, lambda: waiting)
    with reader.view() as view:
        assert view.points() == ["dev/new", "dev/p"]
        point = view.point("dev/p")
        assert point is not None
        assert view.raw_count(point, T0, T0 + 10_000) == 5
        raw = view.raw(point, T0, T0 + 10_000)
        assert (raw.ts, raw.values, list(raw.quality)) == (
            [T0 + i * 1000 for i in range(5)], [20.0, 21.0, 22.0, 23.0, "off"], [0, 0, 0, 2, 0])
        assert view.buckets(point, T0, T0 + 10_000, 60_000, 0) == [(T0, 4, 20.0, 23.0, 21.5)]
        new = view.point("dev/new")
        assert new is not None and view.raw(new, T0, T0 + 1000).values == [1.5]
    with HistoryReader(store.path).view() as view:  # another process: the file alone
        assert view.points() == ["dev/p"]
    store.close()
