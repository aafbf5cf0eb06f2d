"""The instruction-count mode (bench/instructions.py): reading callgrind's counters, the
figures per part, and one short workload on a broker under callgrind (counts, no timing)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from bench import instructions, loadgen

CALLGRIND_E = """\
PID 1234: /work/main/.venv/bin/python -m outpost run

  Totals:             Ir
   Th 1    151,943,852
   Th 2         12,000
"""


def test_counted_instructions_sum_every_thread() -> None:
    assert instructions.counted_instructions(CALLGRIND_E) == 151_955_852


def test_counted_instructions_without_totals_is_an_error() -> None:
    with pytest.raises(RuntimeError, match="no instruction totals"):
        instructions.counted_instructions("No active callgrind runs detected.\n")


def test_figures_divide_by_what_each_part_delivered() -> None:
    retained = {"retained": 500, "delivered": 400}
    counts = {"retained-store": 5_000_000, "retained-delivery": 2_000_000}
    rows = instructions.figures("retained", retained, counts)
    assert [(r["part"], r["count"], r["per_unit"]) for r in rows] == [
        ("retained-store", 500, 10_000), ("retained-delivery", 400, 5_000),
    ]
    rows = instructions.figures("qos1", {"delivered_in_window": 0}, {"qos1": 7})
    assert rows[0]["per_unit"] is None  # nothing delivered: no figure, not a division error


@pytest.mark.skipif(shutil.which("callgrind_control") is None, reason="valgrind not installed")
def test_idle_connections_under_callgrind(tmp_path: Path) -> None:
    opts = loadgen.LoadOptions(idle_connections=20, idle_settle=0.1, cpus=None)
    setup = instructions.Setup(workdir=tmp_path, broker_cpu=None)
    outcome = instructions.run_scenario("idle", setup, opts)
    [row] = outcome["figures"]
    assert row["part"] == "idle"
    assert row["count"] == 20
    assert row["instructions"] > 0
    assert row["per_unit"] == round(row["instructions"] / 20)
