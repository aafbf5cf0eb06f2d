"""report: the summary row computed from the tables, and its rendering."""

from __future__ import annotations

from pyspark.sql import Row, SparkSession
from pyspark.testing import assertDataFrameEqual

from cloud_spark import schemas
from cloud_spark.jobs.report import INPUTS, quarantine_reasons, render, summarize
from cloud_spark.tables import TABLES
from tests.cloud_spark.conftest import T0
from tests.cloud_spark.frames import ledger, point, points, table


def test_summary_from_tables(spark: SparkSession) -> None:
    frames = {name: spark.createDataFrame([], TABLES[name].schema) for name in INPUTS}
    frames["messages"] = ledger(
        spark, [("e-1", 1, 2), ("e-1", 2, 1), ("e-1", 4, 3)], conflict={4: True}
    )
    late = point(2, T0, 1)
    late["is_late"] = True
    frames["points"] = points(spark, [point(1, T0, 1), late])
    frames["quarantine"] = table(
        spark,
        "QUARANTINE",
        [
            {"seq": 4, "reason": "invalid_json", "ingest_ms": T0},
            {"gateway": None, "epoch": None, "reason": "missing_id", "ingest_ms": T0},
            {"gateway": None, "epoch": None, "reason": "missing_id", "ingest_ms": T0},
        ],
    )
    frames["seq_summary"] = spark.createDataFrame(
        [("gw-1", "e-1", 1, 4, 3, 1, 3, 1)], schemas.SEQ_SUMMARY
    )
    frames["outages"] = table(
        spark,
        "OUTAGES",
        [{"device": "m1", "duration_s": 10.0}, {"device": "m2", "duration_s": 20.5}],
    )
    got = summarize(frames)
    assert sorted(got.columns) == sorted(f.name for f in schemas.REPORT.fields)
    assertDataFrameEqual(
        got.select(*[f.name for f in schemas.REPORT.fields]),
        [
            Row(
                bronze_rows=2 + 1 + 3 + 2,  # copies of every id, plus the rows without id
                messages=3,
                duplicates_removed=3,
                id_conflicts=1,
                points=2,
                status_rows=0,
                device_diagnostics_rows=0,
                uplink_diagnostics_rows=0,
                late=1,
                quarantined=3,
                epochs=1,
                missing_seq=1,
                device_outages=2,
                downtime_s=30.5,
                gateway_outages=0,
                gateway_down_s=0.0,
                link_outages=0,
                link_down_s=0.0,
                quality_flags=0,
            )
        ],
    )
    assertDataFrameEqual(
        quarantine_reasons(frames["quarantine"]),
        [Row(reason="missing_id", rows=2), Row(reason="invalid_json", rows=1)],
        checkRowOrder=True,
    )


def test_render_says_whether_anything_was_lost() -> None:
    summary = {
        "bronze_rows": 1200,
        "messages": 1000,
        "duplicates_removed": 200,
        "id_conflicts": 0,
        "points": 990,
        "late": 4,
        "status_rows": 3,
        "device_diagnostics_rows": 5,
        "uplink_diagnostics_rows": 1,
        "quarantined": 1,
        "missing_seq": 0,
        "epochs": 2,
        "device_outages": 1,
        "downtime_s": 61.0,
        "gateway_outages": 1,
        "gateway_down_s": 12.0,
        "link_outages": 1,
        "link_down_s": 45.4,
        "quality_flags": 2,
    }
    text = render(summary, {"invalid_json": 1})
    assert "bronze rows               1,200" in text
    assert "duplicates removed 200" in text
    assert "  invalid_json" in text
    assert "gateway outages               1   downtime 12 s" in text
    assert "link outages                  1   downtime 45 s" in text
    assert text.endswith("OK: nothing lost")
    assert render({**summary, "missing_seq": 3}, {}).endswith("MISSING MESSAGES")
    assert "bronze files skipped" not in text
    skipped = render(summary, {}, {"truncated_gzip": 1, "empty_file": 2})
    assert "bronze files skipped          3" in skipped
    assert "  truncated_gzip                        1" in skipped
