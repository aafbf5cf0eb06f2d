"""silver transforms on tiny inline frames, against hand-written expected rows."""

from __future__ import annotations

import base64
import datetime as dt
import gzip
import json
from pathlib import Path

from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql import functions as F  # noqa: N812
from pyspark.testing import assertDataFrameEqual

from cloud_spark.jobs import silver
from cloud_spark.jobs import silver_parse as sp
from cloud_spark.tables import read_bronze
from tests.cloud_spark.conftest import T0, bronze_frame, bronze_row, point_payload

DAY = dt.date(2024, 6, 3)


def test_classify_uses_the_local_topic_only(spark: SparkSession) -> None:
    topics = [
        "devices/m1/active_power",
        "devices/m1/status",
        "devices/m1/diagnostics",
        "$SYS/outpost/uplink",
        "devices/m1",
        "devices/m1/a/b",
        "devices//p",
        "devices/m1/",
        "devices/",
        "other/m1/p",
        None,
    ]
    rows = [bronze_row(n, topic, "x", remote="sites/s/anything") for n, topic in enumerate(topics)]
    got = sp.classify(bronze_frame(spark, rows)).select("local_topic", "kind", "device", "point")
    assertDataFrameEqual(
        got,
        [
            Row(
                local_topic="devices/m1/active_power",
                kind="point",
                device="m1",
                point="active_power",
            ),
            Row(local_topic="devices/m1/status", kind="status", device="m1", point=None),
            Row(
                local_topic="devices/m1/diagnostics",
                kind="device_diagnostics",
                device="m1",
                point=None,
            ),
            Row(
                local_topic="$SYS/outpost/uplink",
                kind="uplink_diagnostics",
                device=None,
                point=None,
            ),
            Row(local_topic="devices/m1", kind="unknown", device=None, point=None),
            Row(local_topic="devices/m1/a/b", kind="unknown", device=None, point=None),
            Row(local_topic="devices//p", kind="unknown", device=None, point=None),
            Row(local_topic="devices/m1/", kind="unknown", device=None, point=None),
            Row(local_topic="devices/", kind="unknown", device=None, point=None),
            Row(local_topic="other/m1/p", kind="unknown", device=None, point=None),
            Row(local_topic=None, kind="unknown", device=None, point=None),
        ],
    )


def test_classify_with_a_multi_level_prefix(spark: SparkSession) -> None:
    rows = [bronze_row(1, "site.1/devices/m1/p", "x"), bronze_row(2, "siteX1/devices/m1/p", "x")]
    got = sp.classify(bronze_frame(spark, rows), prefix="site.1/devices")
    assertDataFrameEqual(
        got.select("seq", "kind", "device"),
        [Row(seq=1, kind="point", device="m1"), Row(seq=2, kind="unknown", device=None)],
    )


def test_dedupe_keeps_the_earliest_copy_and_counts_copies(spark: SparkSession) -> None:
    p = point_payload(1.0, T0)
    rows = [
        bronze_row(1, "devices/m/p", p, ingest_ms=T0 + 900, lander="b"),
        bronze_row(1, "devices/m/p", p, ingest_ms=T0 + 500, lander="a"),
        bronze_row(1, "devices/m/p", p, ingest_ms=T0 + 700, lander="c"),
        bronze_row(2, "devices/m/p", p, ingest_ms=T0 + 100),
        bronze_row(2, "devices/m/p", p, epoch="e-2", ingest_ms=T0 + 100),
        bronze_row(3, "devices/m/p", p),
        bronze_row(3, "devices/m/p", point_payload(2.0, T0)),
        bronze_row(None, None, "no id"),
        bronze_row(None, None, "no id"),
    ]
    got = silver.dedupe(silver.with_content_hash(bronze_frame(spark, rows))).select(
        "epoch", "seq", "lander_id", "ingest_ms", "copies", "conflict"
    )
    assertDataFrameEqual(
        got,
        [
            Row(epoch="e-1", seq=1, lander_id="a", ingest_ms=T0 + 500, copies=3, conflict=False),
            Row(
                epoch="e-1",
                seq=2,
                lander_id="lander-a",
                ingest_ms=T0 + 100,
                copies=1,
                conflict=False,
            ),
            Row(
                epoch="e-2",
                seq=2,
                lander_id="lander-a",
                ingest_ms=T0 + 100,
                copies=1,
                conflict=False,
            ),
            Row(
                epoch="e-1",
                seq=3,
                lander_id="lander-a",
                ingest_ms=T0 + 3100,
                copies=2,
                conflict=True,
            ),
            Row(
                epoch=None,
                seq=None,
                lander_id="lander-a",
                ingest_ms=T0 + 100,
                copies=1,
                conflict=False,
            ),
            Row(
                epoch=None,
                seq=None,
                lander_id="lander-a",
                ingest_ms=T0 + 100,
                copies=1,
                conflict=False,
            ),
        ],
    )


def test_points_are_typed_and_late_ones_flagged(spark: SparkSession) -> None:
    rows = [
        bronze_row(1, "devices/m1/power", point_payload(12.5, T0)),
        bronze_row(2, "devices/m1/power", point_payload(12, T0 + 1000, "uncertain")),
        bronze_row(3, "devices/m1/mode", point_payload("RUN", T0 + 2000, unit=None)),
        bronze_row(4, "devices/m1/alarm", point_payload(True, T0 + 3000, unit=None)),
        bronze_row(5, "devices/m1/power", point_payload(None, T0 + 4000, "bad")),
        bronze_row(
            6,
            "devices/m1/power",
            json.dumps({"value": 1, "ts": T0, "quality": "good"}),
            ingest_ms=T0 + 300_001,
        ),
        bronze_row(
            7,
            "devices/m1/power",
            base64.b64encode(point_payload(7.0, T0).encode()).decode(),
            encoding="base64",
        ),
        bronze_row(8, "devices/m1/power", point_payload(1e300, T0 - 1)),
    ]
    parsed = silver.parse(bronze_frame(spark, rows), silver.SilverParams())
    got = silver.points(parsed, late_after_ms=300_000).select(
        "seq",
        "device",
        "point",
        "event_ms",
        "value_num",
        "value_str",
        "value_type",
        "unit",
        "quality",
        "is_late",
        "event_date",
    )

    def r(
        seq: int,
        point: str,
        ms: int,
        num: float | None,
        text: str | None,
        kind: str,
        unit: str | None,
        quality: str = "good",
        late: bool = False,
    ) -> Row:
        return Row(
            seq=seq,
            device="m1",
            point=point,
            event_ms=ms,
            value_num=num,
            value_str=text,
            value_type=kind,
            unit=unit,
            quality=quality,
            is_late=late,
            event_date=DAY,
        )

    assertDataFrameEqual(
        got,
        [
            r(1, "power", T0, 12.5, None, "number", "kW"),
            r(2, "power", T0 + 1000, 12.0, None, "number", "kW", "uncertain"),
            r(3, "mode", T0 + 2000, None, "RUN", "string", None),
            r(4, "alarm", T0 + 3000, 1.0, "true", "bool", None),
            r(5, "power", T0 + 4000, None, None, "null", "kW", "bad"),
            r(6, "power", T0, 1.0, None, "number", None, late=True),
            r(7, "power", T0, 7.0, None, "number", "kW"),
            r(8, "power", T0 - 1, 1e300, None, "number", "kW"),
        ],
    )


def test_status_and_diagnostics_tables(spark: SparkSession) -> None:
    diag = {
        "ts": T0,
        "requests": 10,
        "timeouts": 1,
        "crc_errors": 2,
        "exceptions": 3,
        "stale_frames": 4,
        "latency_ms": 12.5,
    }
    uplink = {
        "ts": T0,
        "connected": False,
        "backlog_messages": 5,
        "backlog_bytes": 500,
        "oldest_age_s": 1.5,
        "dropped": 0,
    }
    rows = [
        bronze_row(1, "devices/m1/status", "offline", received_ms=T0 + 5),
        bronze_row(2, "devices/m1/status", " online\n", received_ms=T0 + 6),
        bronze_row(3, "devices/m1/diagnostics", json.dumps(diag)),
        bronze_row(4, "$SYS/outpost/uplink", json.dumps(uplink)),
    ]
    parsed = silver.parse(bronze_frame(spark, rows), silver.SilverParams())
    assertDataFrameEqual(
        silver.status(parsed).select("seq", "device", "status", "event_ms"),
        [
            Row(seq=1, device="m1", status="offline", event_ms=T0 + 5),
            Row(seq=2, device="m1", status="online", event_ms=T0 + 6),
        ],
    )
    assertDataFrameEqual(
        silver.device_diagnostics(parsed).drop(
            "gateway", "epoch", "event_ts", "received_ms", "ingest_ms", "copies", "event_date"
        ),
        [
            Row(
                seq=3,
                device="m1",
                event_ms=T0,
                requests=10,
                timeouts=1,
                crc_errors=2,
                exceptions=3,
                stale_frames=4,
                latency_ms=12.5,
            )
        ],
    )
    assertDataFrameEqual(
        silver.uplink_diagnostics(parsed).select(
            "seq",
            "event_ms",
            "connected",
            "backlog_messages",
            "backlog_bytes",
            "oldest_age_s",
            "dropped",
        ),
        [
            Row(
                seq=4,
                event_ms=T0,
                connected=False,
                backlog_messages=5,
                backlog_bytes=500,
                oldest_age_s=1.5,
                dropped=0,
            )
        ],
    )


BAD_INPUT = [
    # (topic, payload, encoding, expected reason)
    ("devices/m1/p", '{"value": 1, "ts": 17', "utf8", "invalid_json"),
    ("devices/m1/p", "", "utf8", "invalid_json"),
    ("devices/m1/p", "[1, 2]", "utf8", "not_an_object"),
    ("devices/m1/p", '"just a string"', "utf8", "not_an_object"),
    ("devices/m1/p", '{"value": 1, "quality": "good"}', "utf8", "missing_field:ts"),
    ("devices/m1/p", f'{{"ts": {T0}, "quality": "good"}}', "utf8", "missing_field:value"),
    ("devices/m1/p", f'{{"value": 1, "ts": {T0}}}', "utf8", "missing_field:quality"),
    ("devices/m1/p", f'{{"value": 1, "ts": "{T0}", "quality": "good"}}', "utf8", "wrong_type:ts"),
    ("devices/m1/p", f'{{"value": 1, "ts": {T0}.5, "quality": "good"}}', "utf8", "wrong_type:ts"),
    ("devices/m1/p", '{"value": 1, "ts": null, "quality": "good"}', "utf8", "wrong_type:ts"),
    (
        "devices/m1/p",
        f'{{"value": [1], "ts": {T0}, "quality": "good"}}',
        "utf8",
        "wrong_type:value",
    ),
    (
        "devices/m1/p",
        f'{{"value": {{}}, "ts": {T0}, "quality": "good"}}',
        "utf8",
        "wrong_type:value",
    ),
    ("devices/m1/p", f'{{"value": 1, "ts": {T0}, "quality": 1}}', "utf8", "wrong_type:quality"),
    (
        "devices/m1/p",
        f'{{"value": 1, "ts": {T0}, "quality": "fine"}}',
        "utf8",
        "invalid_value:quality",
    ),
    (
        "devices/m1/p",
        f'{{"value": 1, "ts": {T0}, "quality": "good", "unit": 5}}',
        "utf8",
        "wrong_type:unit",
    ),
    (
        "devices/m1/p",
        '{"value": 1, "ts": 1717430400, "quality": "good"}',
        "utf8",
        "invalid_value:ts",
    ),
    ("devices/m1/p", "!!!", "base64", "invalid_payload_encoding"),
    ("devices/m1/p", base64.b64encode(b"\xff\xfe").decode(), "base64", "invalid_payload_encoding"),
    ("devices/m1/p", "x", "rot13", "invalid_payload_encoding"),
    ("devices/m1/status", "maybe", "utf8", "invalid_value:status"),
    ("devices/m1/diagnostics", f'{{"ts": {T0}, "requests": 1}}', "utf8", "missing_field:timeouts"),
    (
        "devices/m1/diagnostics",
        f'{{"ts": {T0}, "requests": 1.5, "timeouts": 0, "crc_errors": 0, '
        '"exceptions": 0, "stale_frames": 0, "latency_ms": 1}',
        "utf8",
        "wrong_type:requests",
    ),
    (
        "$SYS/outpost/uplink",
        f'{{"ts": {T0}, "connected": "yes", "backlog_messages": 0, '
        '"backlog_bytes": 0, "oldest_age_s": null, "dropped": 0}',
        "utf8",
        "wrong_type:connected",
    ),
    ("plant/m1/p", point_payload(1, T0), "utf8", "unknown_topic"),
    (None, point_payload(1, T0), "utf8", "missing_topic"),
]


def test_bad_input_goes_to_quarantine_with_its_reason(spark: SparkSession) -> None:
    rows = [
        bronze_row(n, topic, payload, encoding=encoding)
        for n, (topic, payload, encoding, _) in enumerate(BAD_INPUT, start=1)
    ]
    rows.append(bronze_row(None, None, "no id at all"))
    rows.append(bronze_row(100, "devices/m1/p", point_payload(1, T0), gateway=None))
    frame = bronze_frame(spark, rows)
    parsed = silver.parse(frame, silver.SilverParams())
    got = silver.quarantine(parsed).select("seq", "payload", "reason", "copies", "ingest_date")
    expected = [
        Row(seq=n, payload=payload, reason=reason, copies=1, ingest_date=DAY)
        for n, (_, payload, _, reason) in enumerate(BAD_INPUT, start=1)
    ]
    expected.append(
        Row(seq=None, payload="no id at all", reason="missing_id", copies=1, ingest_date=DAY)
    )
    expected.append(
        Row(seq=100, payload=point_payload(1, T0), reason="missing_id", copies=1, ingest_date=DAY)
    )
    assertDataFrameEqual(got, expected)
    # nothing bad leaks into a silver table, and the ledger still knows every id
    tables = silver.silver_tables(frame, silver.SilverParams())
    for name in ("points", "status", "device_diagnostics", "uplink_diagnostics"):
        assert tables[name].count() == 0, name
    ledger = tables["messages"].where(F.col("status") == "quarantined")
    assert ledger.count() == len(BAD_INPUT)


def read_bronze_file(spark: SparkSession, tmp_path: object, lines: list[str]) -> DataFrame:
    """Bronze as silver reads it: ``lines`` in one gzip file of a landing under ``tmp_path``."""
    directory = Path(str(tmp_path)) / "bronze" / "ingest_date=2024-06-03" / "ingest_hour=16"
    directory.mkdir(parents=True)
    with gzip.open(directory / "part-1.json.gz", "wt") as handle:
        handle.write("".join(line + "\n" for line in lines))
    return read_bronze(spark, str(tmp_path))


def test_corrupt_bronze_lines_are_quarantined(spark: SparkSession, tmp_path: object) -> None:
    good = json.dumps(bronze_row(1, "devices/m/p", point_payload(1, T0)))
    bronze = read_bronze_file(spark, tmp_path, [good, "{this is not json"])
    parsed = silver.parse(bronze, silver.SilverParams())
    assertDataFrameEqual(
        silver.quarantine(parsed).select("payload", "reason", "ingest_date"),
        [Row(payload="{this is not json", reason="corrupt_bronze", ingest_date=DAY)],
    )
    assert silver.points(parsed).count() == 1


def test_parse_reads_bronze_once(spark: SparkSession, tmp_path: object) -> None:
    """One scan of the files for parse and dedupe together: rows without an id used to be
    kept apart and unioned back, and the plan read every bronze file a second time."""
    rows = [
        bronze_row(1, "devices/m/p", point_payload(1, T0)),
        bronze_row(None, "devices/m/p", "x"),
    ]
    bronze = read_bronze_file(spark, tmp_path, [json.dumps(row) for row in rows])
    parsed = silver.parse(bronze, silver.SilverParams())
    plan = parsed._jdf.queryExecution().executedPlan().toString()
    assert plan.count("FileScan") == 1, plan
    assert parsed.count() == 2
