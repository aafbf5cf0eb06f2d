"""The window math of bridge/aggregate/window.py against a brute-force model of the signal.

The model: a sample's value holds until the next sample (None: unknown until the next good
one); a window's mean is the integral of that step function over the window divided by the
time it was known, computed here millisecond by millisecond over small windows.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bridge.aggregate.window import MAX_WINDOWS_PER_STEP, Window, WindowAccumulator

WIDTH = 200  # ms: small enough to integrate by brute force


def brute_force(samples: list[tuple[int, float | None]], width: int, until: int,
                start_known: bool = False) -> dict[int, dict[str, object]]:
    """Per window start: the signal's integral and coverage ms by ms, min/max of the signal,
    the samples inside (samples must be sorted by time)."""
    windows: dict[int, dict[str, object]] = {}
    held: float | None = None
    index = 0
    for t in range(samples[0][0] if samples else 0, until):
        while index < len(samples) and samples[index][0] <= t:
            ts, value = samples[index]
            held = value
            win = windows.setdefault(ts - ts % width, _empty())
            if value is not None:
                win["samples"].append(value)  # type: ignore[attr-defined]
            index += 1
        start = t - t % width
        if held is not None:
            win = windows.setdefault(start, _empty())
            win["integral"] += held  # type: ignore[operator]
            win["covered"] += 1  # type: ignore[operator]
            win["signal"].append(held)  # type: ignore[attr-defined]
    return windows


def _empty() -> dict[str, object]:
    return {"integral": 0.0, "covered": 0, "signal": [], "samples": []}


def run(samples: list[tuple[int, float | None]], until: int) -> list[Window]:
    acc = WindowAccumulator(WIDTH)
    closed: list[Window] = []
    for ts, value in samples:
        closed += acc.add(ts, value)
    closed += acc.advance(until)
    return closed


sample_lists = st.lists(
    st.tuples(st.integers(0, 2000), st.one_of(st.none(), st.floats(-1e6, 1e6))),
    min_size=1, max_size=40,
).map(lambda xs: sorted(xs, key=lambda x: x[0]))


@settings(max_examples=150, deadline=None)
@given(sample_lists)
def test_windows_equal_the_brute_force_integral(samples: list[tuple[int, float | None]]) -> None:
    # the sample at the same millisecond as another: the later one wins in both
    until = 2400
    closed = run(samples, until)
    model = brute_force(samples, WIDTH, until)
    by_start = {w.start_ms: w for w in closed}
    for start, expected in model.items():
        if start + WIDTH > until:
            continue
        window = by_start.get(start)
        covered = expected["covered"]
        samples_in = expected["samples"]
        if not covered and not samples_in:
            assert window is None or (window.covered_ms == 0 and window.count == 0)
            continue
        assert window is not None, f"window {start} missing: {closed}"
        assert window.end_ms == start + WIDTH
        assert window.covered_ms == covered
        assert window.count == len(samples_in)  # type: ignore[arg-type]
        if covered:
            mean = expected["integral"] / covered  # type: ignore[operator]
            assert window.mean == pytest.approx(mean, rel=1e-9, abs=1e-6)
            signal = expected["signal"]
            assert window.min is not None and window.max is not None
            assert window.min <= min(signal) + 1e-9  # type: ignore[type-var]
            assert window.max >= max(signal) - 1e-9  # type: ignore[type-var]
        assert window.partial == (covered < WIDTH)
        if samples_in:
            assert window.first == samples_in[0]  # type: ignore[index]
            assert window.last == samples_in[-1]  # type: ignore[index]
            assert window.min is not None and window.max is not None
            assert window.min <= min(samples_in)  # type: ignore[type-var]
            assert window.max >= max(samples_in)  # type: ignore[type-var]
    # every window that closed is aligned and one of the model's
    for window in closed:
        assert window.start_ms % WIDTH == 0 and window.start_ms in model


@settings(max_examples=100, deadline=None)
@given(sample_lists, st.integers(1, 5))
def test_ticks_in_between_change_nothing(samples: list[tuple[int, float | None]],
                                         step: int) -> None:
    """Advancing the clock between samples (the runtime's tick) closes the same windows."""
    until = 2400
    plain = run(samples, until)
    acc = WindowAccumulator(WIDTH)
    ticked: list[Window] = []
    t = 0
    for ts, value in samples:
        while t < ts:
            ticked += acc.advance(t)
            t += step * 37
        ticked += acc.add(ts, value)
    ticked += acc.advance(until)
    assert [_exact(w) for w in ticked] == [_exact(w) for w in plain]
    for a, b in zip(ticked, plain, strict=True):
        assert (a.mean is None) == (b.mean is None)
        assert a.mean is None or a.mean == pytest.approx(b.mean, rel=1e-9, abs=1e-6)


def _exact(window: Window) -> tuple[object, ...]:
    return (window.start_ms, window.min, window.max, window.first, window.last,
            window.count, window.covered_ms, window.partial)


def test_the_first_sample_of_a_window_is_weighted_from_the_carried_value() -> None:
    acc = WindowAccumulator(60_000)
    assert acc.add(30_000, 10.0) == []  # first window after a start: half of it seen
    [first] = acc.add(90_000, 20.0)  # closes [0, 60 s)
    assert (first.mean, first.count, first.covered_ms, first.partial) == (10.0, 1, 30_000, True)
    [second] = acc.advance(120_000)
    # 10 held from 60 s to 90 s, then 20: the carried value weighs the first half
    assert second.mean == 15.0
    assert (second.min, second.max, second.first, second.last, second.count) == (
        10.0, 20.0, 20.0, 20.0, 1)
    assert not second.partial


def test_a_quiet_point_closes_windows_of_its_held_value() -> None:
    acc = WindowAccumulator(10_000)
    acc.add(5_000, 3.0)
    closed = acc.advance(40_000)
    assert [(w.start_ms, w.mean, w.count, w.first, w.partial) for w in closed] == [
        (0, 3.0, 1, 3.0, True), (10_000, 3.0, 0, None, False),
        (20_000, 3.0, 0, None, False), (30_000, 3.0, 0, None, False)]


def test_a_gap_ends_the_hold_and_marks_the_window_partial() -> None:
    acc = WindowAccumulator(10_000)
    acc.add(0, 4.0)
    acc.add(5_000, None)  # bad quality, an offline device
    [window] = acc.advance(10_000)
    assert (window.mean, window.covered_ms, window.count, window.partial) == (4.0, 5_000, 1, True)
    assert acc.advance(50_000) == []  # nothing known: no window at all
    acc.add(52_000, 1.0)
    [after] = acc.advance(60_000)
    assert (after.start_ms, after.mean, after.covered_ms, after.partial) == (50_000, 1.0, 8_000,
                                                                             True)


def test_a_clock_stepped_back_counts_at_the_last_time() -> None:
    acc = WindowAccumulator(10_000)
    acc.add(8_000, 1.0)
    acc.add(3_000, 5.0)  # older than the last sample: taken at 8 s
    [window] = acc.advance(10_000)
    assert (window.first, window.last, window.count) == (1.0, 5.0, 2)
    assert window.mean == 5.0  # 5.0 held from 8 s to 10 s; 1.0 for no time


def test_a_clock_jumping_years_ahead_stops_carrying() -> None:
    acc = WindowAccumulator(10_000)
    acc.add(0, 1.0)
    closed = acc.advance(10_000 * (MAX_WINDOWS_PER_STEP + 500))
    assert len(closed) == MAX_WINDOWS_PER_STEP
    assert acc.start is None and acc.held is None


def test_restore_closes_the_window_partial_with_what_it_had() -> None:
    acc = WindowAccumulator(60_000)
    acc.add(60_000, 2.0)  # a whole window from its start
    acc.add(70_000, 4.0)
    acc.advance(80_000)  # the last tick before the cut
    saved = acc.snapshot()
    assert saved is not None
    restored = WindowAccumulator.restore(60_000, saved)
    # the process was down from 80 s to 150 s: the window ended meanwhile
    [window] = restored.advance(150_000)
    assert (window.start_ms, window.count, window.first, window.last) == (60_000, 2, 2.0, 4.0)
    assert window.covered_ms == 20_000 and window.mean == 3.0
    assert window.partial
    assert restored.advance(400_000) == []  # no value carried across the outage


def test_a_restored_window_still_running_goes_on_and_closes_partial() -> None:
    acc = WindowAccumulator(60_000)
    for t in range(0, 30_000, 1000):
        acc.add(t, 1.0)
    acc.advance(30_000)
    saved = acc.snapshot()
    assert saved is not None
    restored = WindowAccumulator.restore(60_000, saved)
    restored.add(40_000, 3.0)  # back 10 s later, inside the same window
    [window] = restored.advance(60_000)
    assert window.count == 31 and window.covered_ms == 50_000
    assert window.mean == pytest.approx((30_000 * 1.0 + 20_000 * 3.0) / 50_000)
    assert window.partial


@pytest.mark.parametrize("saved, problem", [
    ({"start": 1, "cursor": 1}, "do not fit"),
    ({"start": 0, "cursor": 70_000}, "do not fit"),
    ({"start": 0, "cursor": 10}, "incomplete"),
])
def test_restore_refuses_saved_data_that_does_not_fit(saved: dict[str, object],
                                                      problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        WindowAccumulator.restore(60_000, saved)


def test_mean_of_bools_is_the_share_of_time_on() -> None:
    acc = WindowAccumulator(10_000)
    acc.add(0, 1.0)
    acc.add(2_500, 0.0)
    [window] = acc.advance(10_000)
    assert math.isclose(window.mean or 0.0, 0.25)
