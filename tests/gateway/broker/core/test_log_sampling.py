"""Log sampling and client data in log lines: `worth_logging`, `SourceCounts`, `clip`."""

from __future__ import annotations

from gateway.broker.core.log_sampling import SourceCounts, clip, worth_logging


def test_worth_logging_first_ten_then_every_hundredth() -> None:
    logged = [n for n in range(1, 1001) if worth_logging(n, 100)]
    assert logged == [*range(1, 11), *range(100, 1001, 100)]


def test_source_counts_are_per_address_and_bounded() -> None:
    counts = SourceCounts(max_sources=2)
    assert [counts.add("10.0.0.1") for _ in range(3)] == [1, 2, 3]
    assert counts.add("10.0.0.2") == 1  # another address starts at one
    assert counts.add("10.0.0.1") == 4
    counts.add("10.0.0.3")  # a third address: the least recent (10.0.0.2) is forgotten
    assert counts.add("10.0.0.2") == 1
    assert counts.add("10.0.0.3") == 2


def test_clip_cuts_long_text_and_states_its_length() -> None:
    assert clip("sensor-7") == "sensor-7"
    assert clip(None) == "(none)"
    long = clip("x" * 65_535)
    assert long == "x" * 64 + "...(65535 chars)"
    assert clip("abcdef", limit=3) == "abc...(6 chars)"


def test_clip_escapes_what_would_forge_a_log_line() -> None:
    forged = clip("id\n2026-01-01 ERROR outpost: fake")
    assert "\n" not in forged and forged.startswith("id\\n2026")
    assert clip("\x1b[31mred") == "\\x1b[31mred"
