"""Rolling, atomically committed bronze files (cloud_spark.bronze_writer)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from cloud_spark.bronze_writer import BronzeWriter, finish

T0 = 1_717_430_400_000  # 16:00:00 UTC


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def line(n: int) -> bytes:
    return (json.dumps({"n": n}) + "\n").encode()


def committed_files(root: Path) -> list[Path]:
    return sorted(root.glob("bronze/*/*/part-*.json.gz"))


def read(path: Path) -> list[int]:
    with gzip.open(path, "rt") as handle:
        return [json.loads(text)["n"] for text in handle]


def test_nothing_is_visible_or_acked_until_commit(tmp_path: Path) -> None:
    writer: BronzeWriter[int] = BronzeWriter(tmp_path, "lander-1", roll_bytes=10**6)
    for n in range(3):
        assert writer.append(line(n), T0 + n, token=n) is None
    assert writer.pending == 3
    assert committed_files(tmp_path) == []
    temps = list(tmp_path.glob("bronze/*/*/.part-*.tmp"))
    assert len(temps) == 1
    done = writer.commit()
    assert done is not None
    assert done.tokens == [0, 1, 2] and done.records == 3
    assert committed_files(tmp_path) == [done.path]
    assert done.path.parent.name == "ingest_hour=16"
    assert done.path.parent.parent.name == "ingest_date=2024-06-03"
    assert read(done.path) == [0, 1, 2]
    assert list(tmp_path.glob("bronze/*/*/.part-*")) == []
    assert writer.commit() is None and writer.pending == 0


def test_rolls_by_size_and_by_age(tmp_path: Path) -> None:
    clock = FakeClock()
    writer: BronzeWriter[int] = BronzeWriter(
        tmp_path, "l", roll_bytes=27, roll_seconds=5, clock=clock
    )
    writer.append(line(1), T0, 1)
    assert not writer.due()
    writer.append(line(2), T0, 2)
    writer.append(line(3), T0, 3)
    assert writer.due()  # 3 lines of 9 bytes
    writer.commit()
    writer.append(line(4), T0, 4)
    clock.now += 4.9
    assert not writer.due()
    clock.now += 0.1
    assert writer.due()


def test_a_new_ingest_hour_seals_the_open_file_first(tmp_path: Path) -> None:
    writer: BronzeWriter[int] = BronzeWriter(tmp_path, "l")
    writer.append(line(1), T0 + 3_599_999, 1)
    sealed = writer.append(line(2), T0 + 3_600_000, 2)
    assert sealed is not None and sealed.tokens == [1]
    assert writer.pending == 1
    assert finish(sealed).tokens == [1]
    last = writer.commit()
    assert last is not None and last.tokens == [2]
    hours = [p.parent.name for p in committed_files(tmp_path)]
    assert hours == ["ingest_hour=16", "ingest_hour=17"]


def test_temp_files_of_a_killed_run_of_the_same_lander_are_removed(tmp_path: Path) -> None:
    killed: BronzeWriter[int] = BronzeWriter(tmp_path, "lander-1")
    killed.append(line(1), T0, 1)  # never committed: the process "dies" here
    other: BronzeWriter[int] = BronzeWriter(tmp_path, "lander-10")
    other.append(line(2), T0, 2)
    restarted: BronzeWriter[int] = BronzeWriter(tmp_path, "lander-1")
    assert restarted.remove_stale_temp_files() == 1
    remaining = list(tmp_path.glob("bronze/*/*/.part-*.tmp"))
    assert len(remaining) == 1 and "lander-10" in remaining[0].name


def test_file_names_are_unique_across_runs(tmp_path: Path) -> None:
    names = set()
    for _ in range(2):
        writer: BronzeWriter[int] = BronzeWriter(tmp_path, "same id")
        writer.append(line(1), T0, 1)
        done = writer.commit()
        assert done is not None
        names.add(done.path.name)
    assert len(names) == 2
    assert all("same_id" in name for name in names)
