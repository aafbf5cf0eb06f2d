"""Alarm transitions survive `kill -9` of `outpost run` (bench/alarms_kill.py with a few kills;
the bench runs 20): every transition the journal holds reached an MQTT subscriber, numbered
without a gap, each starting where the one before ended."""

from __future__ import annotations

from pathlib import Path

from bench.alarms_kill import run


def test_no_transition_is_lost_over_kill_9(tmp_path: Path) -> None:
    result = run(kills=3, workdir=tmp_path, seed=7)
    assert len(result.journal) >= 4, "the value crossed the limit too rarely to show anything"
    assert result.gaps == []
    assert result.lost == []
    assert result.broken_chain == []
