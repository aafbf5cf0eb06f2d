"""Read planning: the fewest requests within 125 registers / 2000 bits and the maximum gap."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bridge.modbus.plan import Read, Span, plan_reads, split_gaps


def shape(reads: list[Read]) -> list[tuple[str, int, int, list[str]]]:
    return [(r.table, r.address, r.count, [s.key for s in r.spans]) for r in reads]


def test_contiguous_points_become_one_read_per_table() -> None:
    spans = [Span("v", "holding", 0, 2), Span("i", "holding", 2, 2), Span("p", "holding", 4, 2),
             Span("t", "input", 0, 1), Span("run", "coil", 3, 1), Span("on", "coil", 0, 1)]
    assert shape(plan_reads(spans, max_gap=0)) == [
        ("coil", 0, 1, ["on"]),
        ("coil", 3, 1, ["run"]),
        ("holding", 0, 6, ["v", "i", "p"]),
        ("input", 0, 1, ["t"]),
    ]
    # coils 0 and 3 are 2 bits apart: a gap of 1 register allows 16 bits
    assert shape(plan_reads(spans, max_gap=1))[0] == ("coil", 0, 4, ["on", "run"])


def test_gap_limit() -> None:
    spans = [Span("a", "holding", 0, 1), Span("b", "holding", 5, 1), Span("c", "holding", 20, 2)]
    assert shape(plan_reads(spans, max_gap=3)) == [
        ("holding", 0, 1, ["a"]), ("holding", 5, 1, ["b"]), ("holding", 20, 2, ["c"])]
    assert shape(plan_reads(spans, max_gap=4)) == [
        ("holding", 0, 6, ["a", "b"]), ("holding", 20, 2, ["c"])]
    assert shape(plan_reads(spans, max_gap=14)) == [("holding", 0, 22, ["a", "b", "c"])]
    reads = plan_reads(spans, max_gap=4)
    assert reads[0].unused == 4
    assert shape(split_gaps(reads[0])) == [("holding", 0, 1, ["a"]), ("holding", 5, 1, ["b"])]


def test_register_and_bit_limits() -> None:
    regs = [Span(f"r{i}", "input", i * 2, 2) for i in range(100)]  # 200 registers
    reads = plan_reads(regs)
    assert [(r.address, r.count) for r in reads] == [(0, 124), (124, 76)]  # float32 never split
    bits = [Span(f"b{i}", "discrete", i, 1) for i in range(2500)]
    assert [(r.address, r.count) for r in plan_reads(bits)] == [(0, 2000), (2000, 500)]
    assert [r.count for r in plan_reads(regs, max_registers=50)] == [50, 50, 50, 50]
    with pytest.raises(ValueError, match="exceeds the read limit"):
        plan_reads([Span("s", "holding", 0, 126)])


def test_bits_of_one_register_share_it() -> None:
    spans = [Span(f"b{i}", "holding", 7, 1) for i in range(16)] + [Span("w", "holding", 8, 1)]
    assert shape(plan_reads(spans)) == [
        ("holding", 7, 2, [*sorted(f"b{i}" for i in range(16)), "w"])]


def _brute_force_minimum(spans: list[Span], limit: int, gap: int) -> int:
    """Fewest reads by trying every way to cut the sorted spans into consecutive runs."""
    ordered = sorted(spans, key=lambda s: s.address)
    best = len(ordered)
    for cuts in itertools.product((False, True), repeat=len(ordered) - 1):
        groups, current = [], [ordered[0]]
        for span, cut in zip(ordered[1:], cuts, strict=True):
            if cut:
                groups.append(current)
                current = [span]
            else:
                current.append(span)
        groups.append(current)
        ok = all(max(s.end for s in g) - g[0].address <= limit and all(
            b.address - max(s.end for s in g[:i + 1]) <= gap for i, b in enumerate(g[1:]))
            for g in groups)
        if ok:
            best = min(best, len(groups))
    return best


@given(st.lists(st.tuples(st.integers(0, 60), st.sampled_from([1, 2, 4])), min_size=1,
                max_size=9, unique_by=lambda t: t[0]),
       st.integers(4, 20), st.integers(0, 6))
def test_sweep_is_minimal_and_covers_everything(points: list[tuple[int, int]], limit: int,
                                                 gap: int) -> None:
    # non-overlapping spans, like a validated device map
    spans, end = [], -1
    for address, size in sorted(points):
        if address >= end and size <= limit:
            spans.append(Span(f"p{address}", "holding", address, size))
            end = address + size
    if not spans:
        return
    reads = plan_reads(spans, max_registers=limit, max_gap=gap)
    covered = [s for r in reads for s in r.spans]
    assert sorted(covered, key=lambda s: s.address) == spans
    for read in reads:
        assert read.count <= limit
        assert all(read.address <= s.address and s.end <= read.address + read.count
                   for s in read.spans)
    assert len(reads) == _brute_force_minimum(spans, limit, gap)
