"""Incremental ``silver``: several runs over growing bronze equal one full run; bad files.

The generated set has duplicates landed up to 10 minutes after the original and late
records landed up to an hour after their event, so cutting its files into batches puts
copies of one id and late rows of one event date into different runs.
"""

from __future__ import annotations

import gzip
import json
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession
from pyspark.testing import assertDataFrameEqual

from bench.cloud.tsbs_iot import GenConfig, generate
from cloud_spark import bronze_files as bf
from cloud_spark.jobs import manifest as mf
from cloud_spark.jobs import rollups, silver, silver_merge
from cloud_spark.records import partition_dir
from cloud_spark.tables import idempotent, read_bronze, read_table
from tests.cloud_spark.conftest import T0, bronze_row, point_payload, write_bronze

SILVER = ("messages", "points", "status", "device_diagnostics", "uplink_diagnostics", "quarantine")

CONFIG = GenConfig(
    rows=800,
    gateways=2,
    devices=10,
    dup_rate=0.08,
    late_rate=0.05,
    bad_rate=0.01,
    outage_rate=6.0,
    link_outage_rate=30.0,
    rows_per_file=90,
)


def _copy_batch(source: Path, root: Path, files: list[Path]) -> None:
    for file in files:
        target = root / "bronze" / file.relative_to(source / "bronze")
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(file, target)


def _redeliver(root: Path, files: list[Path], name: str, delay_ms: int) -> int:
    """Land every 20th line of ``files`` again ``delay_ms`` later (a redelivery); how many."""
    rows = []
    for file in files:
        with gzip.open(file, "rt") as handle:
            rows += [json.loads(line) for line in handle][::20]
    for row in rows:
        row["ingest_ms"] += delay_ms
        row["lander_id"] = "lander-redelivery"
    write_bronze(root, name, rows, ingest_ms=rows[0]["ingest_ms"])
    return len(rows)


def _assert_same_silver(spark: SparkSession, got: Path, want: Path) -> None:
    for name in SILVER:
        got_rows, want_rows = read_table(spark, str(got), name), read_table(spark, str(want), name)
        assertDataFrameEqual(got_rows, want_rows, checkRowOrder=False)


@pytest.mark.pipeline  # minutes: `make pipeline-test`
@pytest.mark.timeout(600)  # five silver runs and a full one: minutes on a busy 2-core machine
def test_incremental_runs_over_batches_equal_one_full_run(
    spark: SparkSession, tmp_path: Path
) -> None:
    source, root = tmp_path / "generated", tmp_path / "landing"
    manifest = generate(CONFIG, source)
    files = sorted((source / "bronze").rglob("*.json.gz"))
    assert len(files) >= 9
    batches = [files[:4], files[4:7], files[7:]]
    inc, full = tmp_path / "incremental", tmp_path / "full"
    params = silver.SilverParams()
    within_runs = redelivered = 0
    for number, batch in enumerate(batches):
        _copy_batch(source, root, batch)
        if number:  # copies of ids committed by the previous run land in this one
            name = f"part-re-{number}.json.gz"
            redelivered += _redeliver(root, batches[number - 1], name, 60_000)
        result = silver.run(spark, str(root), str(inc), params)
        assert result["mode"] == ("full" if number == 0 else "incremental")
        assert result["files"] == len(batch) + (1 if number else 0)
        within_runs += result["duplicates_removed"]
    # the redelivered copies were removed by the merge with silver, not within their run
    assert within_runs < manifest.duplicates + redelivered
    silver.run(spark, str(root), str(full), silver.SilverParams(full=True))
    _assert_same_silver(spark, inc, full)
    messages = read_table(spark, str(inc), "messages")
    assert messages.count() == manifest.distinct_ids
    copies = messages.groupBy().sum("copies").first()[0]  # type: ignore[index]
    no_id_redelivered = 0  # id-less lines redelivered stay separate rows, not copies
    quarantine = read_table(spark, str(inc), "quarantine")
    no_id_redelivered = quarantine.where("gateway is null").count() - manifest.no_id
    assert copies == manifest.rows - manifest.no_id + redelivered - no_id_redelivered
    again = silver.run(spark, str(root), str(inc), params)
    assert again["files"] == 0 and again["rows"] == 0
    _assert_same_silver(spark, inc, full)


@pytest.mark.pipeline
@pytest.mark.timeout(600)
def test_a_run_that_died_half_way_is_redone_without_doubles(
    spark: SparkSession, tmp_path: Path
) -> None:
    """The state a killed run leaves (files claimed, some tables merged, run not committed)
    heals: the next run finishes it, and the tables the dead run merged are not merged again."""
    source, root = tmp_path / "generated", tmp_path / "landing"
    generate(CONFIG, source)
    files = sorted((source / "bronze").rglob("*.json.gz"))
    inc, full = tmp_path / "incremental", tmp_path / "full"
    _copy_batch(source, root, files[:5])
    silver.run(spark, str(root), str(inc), silver.SilverParams())
    _copy_batch(source, root, files[5:])
    # what the dead run got to do: claimed its files, merged its points and status
    landed = bf.list_bronze(spark, str(root))[5:]
    claimed = mf.claim(spark, str(inc), "dead-run", landed, full=False)
    assert len(claimed) == len(files) - 5
    dead = silver.silver_tables(
        read_bronze(spark, str(root), [f.rel for f in claimed]), silver.SilverParams()
    )
    old_ledger = read_table(spark, str(inc), "messages")
    resolution = silver_merge.resolve(old_ledger, dead["messages"]).cache()
    for name in ("points", "status"):
        with idempotent(spark, "silver-dead-run", 0):
            silver_merge.merge_into(spark, str(inc), name, dead[name], resolution)
    assert [run["run_id"] for run in mf.pending_runs(spark, str(inc))] == ["dead-run"]
    result = silver.run(spark, str(root), str(inc), silver.SilverParams())
    assert result["files"] == 0  # the dead run's files were its own, finished first
    assert not mf.pending_runs(spark, str(inc))
    assert mf.runs(spark, str(inc))[-1]["run_id"] == "dead-run"
    silver.run(spark, str(root), str(full), silver.SilverParams(full=True))
    _assert_same_silver(spark, inc, full)


DAY = 86_400_000


@pytest.mark.pipeline
@pytest.mark.timeout(600)
def test_rollups_recompute_the_touched_days_and_equal_a_full_run(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Three days of a series; a later run brings a late sample just before midnight of
    day 1 (its value holds into day 2) and new samples on day 3."""
    root, out, full = tmp_path / "landing", tmp_path / "tables", tmp_path / "full"
    topic = "devices/m1/power"

    def sample(seq: int, event_ms: int, value: float) -> dict[str, Any]:
        return bronze_row(seq, topic, point_payload(value, event_ms), received_ms=event_ms)

    first = [sample(i + 1, T0 + i * DAY // 4, 10.0 + i) for i in range(8)]  # 2 days, 6 h apart
    write_bronze(root, "part-a.json.gz", first, ingest_ms=T0)
    silver.run(spark, str(root), str(out), silver.SilverParams())
    params = rollups.RollupParams(max_hold_ms=2 * 3_600_000)
    assert rollups.run(spark, "", str(out), params)["recomputed_days"] == "all"
    midnight = (T0 // DAY + 1) * DAY
    later = [sample(20, midnight - 60_000, 99.0), sample(21, midnight + DAY + 300_000, 5.0)]
    write_bronze(root, "part-b.json.gz", later, ingest_ms=T0 + 2 * DAY)
    silver.run(spark, str(root), str(out), silver.SilverParams())
    again = rollups.run(spark, "", str(out), params)
    assert again["recomputed_days"] == 4  # the 2 touched days and the day after each
    rebuilt = rollups.run(spark, "", str(out), replace(params, full=True))
    assert rebuilt["recomputed_days"] == "all"
    # --full is not a parameter change: the next plain run has nothing to redo
    assert rollups.run(spark, "", str(out), params)["recomputed_days"] == 0
    silver.run(spark, str(root), str(full), silver.SilverParams(full=True))
    rollups.run(spark, "", str(full), params)
    assertDataFrameEqual(
        read_table(spark, str(out), "rollups"),
        read_table(spark, str(full), "rollups"),
        checkRowOrder=False,
    )
    held = read_table(spark, str(out), "rollups").where(
        f"grain = '1h' and window_start = timestamp_millis({midnight})"
    )
    assert held.first()["twa"] is not None  # type: ignore[index]  # 99.0 held past midnight


@pytest.mark.timeout(300)  # four silver runs, each a few Delta commits per table
def test_an_earlier_copy_landed_later_replaces_the_kept_one(
    spark: SparkSession, tmp_path: Path
) -> None:
    """A second lander's older copy (smaller ingest time) wins across runs, as in a full run."""
    root, out = tmp_path / "landing", tmp_path / "tables"
    topic = "devices/m1/power"
    first = bronze_row(1, topic, point_payload(1.0, T0), ingest_ms=T0 + 9000, lander="b")
    write_bronze(root, "part-1.json.gz", [first], ingest_ms=T0 + 9000)
    silver.run(spark, str(root), str(out), silver.SilverParams())
    earlier = bronze_row(1, topic, point_payload(1.0, T0), ingest_ms=T0 + 500, lander="a")
    write_bronze(root, "part-2.json.gz", [earlier], ingest_ms=T0 + 500)
    silver.run(spark, str(root), str(out), silver.SilverParams())
    (point,) = read_table(spark, str(out), "points").collect()
    assert (point["ingest_ms"], point["copies"]) == (T0 + 500, 2)
    silver.run(spark, str(root), str(tmp_path / "full"), silver.SilverParams(full=True))
    _assert_same_silver(spark, out, tmp_path / "full")


def test_bad_files_are_recorded_with_a_reason_and_never_reread(
    spark: SparkSession, tmp_path: Path
) -> None:
    root, out = tmp_path / "landing", tmp_path / "tables"
    topic = "devices/m1/power"
    good = [bronze_row(seq, topic, point_payload(seq, T0 + seq)) for seq in range(1, 4)]
    write_bronze(root, "part-good.json.gz", good, ingest_ms=T0)
    unknown = bronze_row(4, "somewhere/else", point_payload(4, T0))
    one_bad = write_bronze(root, "part-one-bad-line.json.gz", [unknown], ingest_ms=T0)
    with gzip.open(one_bad, "ab") as handle:
        handle.write(b'{"gateway": "gw-1", "seq": \n')
    truncated = write_bronze(
        root,
        "part-truncated.json.gz",
        [bronze_row(seq, topic, point_payload(seq, T0 + seq)) for seq in range(10, 400)],
        ingest_ms=T0,
    )
    truncated.write_bytes(truncated.read_bytes()[:-200])
    (root / "bronze" / partition_dir(T0) / "part-empty.json.gz").write_bytes(b"")
    doomed = write_bronze(
        root, "part-vanishing.json.gz", [bronze_row(500, topic, "{}")], ingest_ms=T0
    )

    listed = bf.list_bronze(spark, str(root))
    assert len(listed) == 5
    doomed.unlink()  # gone between listing and reading
    result = silver.process(spark, str(root), str(out), silver.SilverParams(), listed)

    assert result["files"] == 5
    assert result["files_skipped"] == {
        "empty_file": 1,
        "truncated_gzip": 1,
        "vanished": 1,
    }
    reasons = {
        row["reason"]: row["count"]
        for row in read_table(spark, str(out), "quarantine").groupBy("reason").count().collect()
    }
    assert reasons["unknown_topic"] == 1
    assert reasons["corrupt_bronze"] >= 1
    seqs = {row["seq"] for row in read_table(spark, str(out), "points").collect()}
    assert {1, 2, 3, 10, 11}.issubset(seqs)  # the truncated file's complete lines landed
    assert mf.skipped_counts(spark, str(out)) == result["files_skipped"]
    again = silver.run(spark, str(root), str(out), silver.SilverParams())
    assert again["files"] == 0


def test_the_listing_holds_committed_files_only(spark: SparkSession, tmp_path: Path) -> None:
    root = tmp_path / "landing"
    topic = "devices/m1/power"
    first = write_bronze(root, "part-1.json.gz", [bronze_row(1, topic, "{}")], ingest_ms=T0)
    later = write_bronze(
        root, "part-2.json.gz", [bronze_row(2, topic, "{}")], ingest_ms=T0 + 7_200_000
    )
    hour = first.parent
    (hour / ".part-3.json.gz.tmp").write_bytes(b"open")  # a lander still writing
    (hour / ".part-4.json.gz").write_bytes(b"hidden")
    (hour / "_staging").mkdir()
    (hour / "_staging" / "part-5.json.gz").write_bytes(b"staged")
    (hour / "notes.txt").write_text("not bronze")

    listed = bf.list_bronze(spark, str(root))

    bronze = root / "bronze"
    assert listed == [
        bf.BronzeFile(str(path.relative_to(bronze)), path.stat().st_size)
        for path in sorted([first, later])
    ]
    assert bf.list_bronze(spark, str(tmp_path / "nothing-landed")) == []


@pytest.mark.parametrize("version", ["3.5.1", "5.0.0", "banana"])
def test_an_unsupported_spark_version_is_refused_with_a_clear_error(version: str) -> None:
    from cloud_spark.spark import SparkVersionError, check_spark_version

    with pytest.raises(SparkVersionError, match="Spark"):
        check_spark_version(version)
    check_spark_version("4.0.1")


def test_an_old_processed_ingest_date_is_not_listed_or_read_again(
    spark: SparkSession, tmp_path: Path
) -> None:
    """An incremental run lists bronze and reads the manifest from one day before the latest
    ingest date it processed: the directories of older dates are not listed at all."""
    root, out = tmp_path / "landing", tmp_path / "tables"
    topic, day = "devices/m1/power", 86_400_000

    def land(seq: int, ingest_ms: int) -> None:
        row = bronze_row(seq, topic, point_payload(seq, ingest_ms), ingest_ms=ingest_ms)
        write_bronze(root, f"part-{seq}.json.gz", [row], ingest_ms=ingest_ms)

    land(1, T0 - 5 * day)  # an old ingest date
    land(2, T0)
    assert silver.run(spark, str(root), str(out), silver.SilverParams())["files"] == 2
    land(3, T0 + 1000)
    old_dir = f"{bf.DATE_PREFIX}2024-05-29/"

    everything: list[str] = []
    bf.list_bronze(spark, str(root), on_list=everything.append)
    assert old_dir in everything  # a full listing walks it

    since = bf.listing_cutoff(mf.manifest_dates(spark, str(out)), relist_days=1)
    assert since == "2024-06-02"
    walked: list[str] = []
    listed = bf.list_bronze(spark, str(root), since, on_list=walked.append)
    assert not any(prefix.startswith(old_dir) for prefix in walked)
    assert [bf.ingest_date_of(f.rel) for f in listed] == ["2024-06-03", "2024-06-03"]
    assert mf.processed(spark, str(out), since) == {listed[0].rel}

    result = silver.process(spark, str(root), str(out), silver.SilverParams(), listed)
    assert result["files"] == 1 and result["mode"] == "incremental"
    seqs = sorted(row["seq"] for row in read_table(spark, str(out), "points").collect())
    assert seqs == [1, 2, 3]
    assert silver.run(spark, str(root), str(out), silver.SilverParams())["files"] == 0
