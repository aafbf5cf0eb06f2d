"""``gold/fleet``: per gateway the latest status, image version and slot, configuration
version and outcome, certificate expiry, backlog and last seen, from silver rows (the status
subtopics arrive as quarantined rows that keep their topic and payload); incremental: a second
run reads only what was ingested since and merges it, the newer fact winning; the report
shows the table."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from cloud_spark import tables
from cloud_spark.jobs import fleet, report
from tests.cloud_spark.conftest import T0
from tests.cloud_spark.frames import _date, table


def quarantined(gateway: str, subtopic: str, body: dict[str, Any], ms: int) -> dict[str, Any]:
    return {"gateway": None, "epoch": None, "seq": None,
            "remote_topic": f"outpost-status/{gateway}/{subtopic}",
            "payload": json.dumps(body), "payload_encoding": "utf8", "ingest_ms": ms,
            "reason": "missing_id", "ingest_date": _date(ms)}


def write(spark: SparkSession, out: str, status: list[dict[str, Any]],
          uplink: list[dict[str, Any]], quarantine: list[dict[str, Any]]) -> None:
    for name, schema, rows in (("status", "STATUS", status),
                               ("uplink_diagnostics", "UPLINK_DIAGNOSTICS", uplink),
                               ("quarantine", "QUARANTINE", quarantine)):
        tables.write_table(table(spark, schema, rows), out, name)


def rows(spark: SparkSession, out: str) -> dict[str, dict[str, Any]]:
    return {r["gateway"]: r for r in fleet.fleet_rows(spark, out)}


def test_the_fleet_table_is_built_and_kept_up_to_date(spark: SparkSession,
                                                      tmp_path: Path) -> None:
    out = str(tmp_path / "tables")
    t1, t2 = T0 + 1000, T0 + 60_000
    write(spark, out,
          status=[{"gateway": "gw-1", "device": None, "status": "online", "event_ms": t1,
                   "ingest_ms": t1},
                  {"gateway": "gw-2", "device": None, "status": "online", "event_ms": t1,
                   "ingest_ms": t1},
                  {"gateway": "gw-1", "device": "meter", "status": "offline",
                   "event_ms": t1 + 5, "ingest_ms": t1 + 5}],  # a device's, not the gateway's
          uplink=[{"gateway": "gw-1", "connected": True, "backlog_messages": 12,
                   "backlog_bytes": 1200, "event_ms": t1, "ingest_ms": t1}],
          quarantine=[
              quarantined("gw-1", "update", {"running": {"version": "0.3.0+1", "slot": "A"}},
                          t1),
              quarantined("gw-1", "config", {"state": "applied", "version": 7,
                                             "running": {"version": 7}}, t1),
              quarantined("gw-2", "config", {"state": "rolled back", "version": 8,
                                             "reason": "not healthy within 60 s: uplink",
                                             "running": {"version": 7}}, t1),
              quarantined("gw-1", "certificate", {"not_after": "2027-01-01T00:00:00Z",
                                                  "state": "valid"}, t1),
              {**quarantined("gw-9", "config", {}, t1), "remote_topic": "elsewhere/gw-9/x"},
          ])
    first = fleet.run(spark, "", out, fleet.FleetParams())
    assert first["gateways"] == 2 and first["since_ms"] == -1
    got = rows(spark, out)
    one, two = got["gw-1"], got["gw-2"]
    assert (one["status"], one["image_version"], one["slot"]) == ("online", "0.3.0+1", "A")
    assert (one["config_state"], one["config_version"], one["config_running_version"]) == (
        "applied", 7, 7)
    assert (one["cert_not_after"], one["cert_state"]) == ("2027-01-01T00:00:00Z", "valid")
    assert (one["backlog_messages"], one["connected"], one["last_seen_ms"]) == (12, True, t1)
    assert (two["config_state"], two["config_version"], two["config_running_version"]) == (
        "rolled back", 8, 7)
    assert two["config_reason"].startswith("not healthy") and two["backlog_messages"] is None

    # Later: gw-1 goes offline and applies version 9; silver is appended to.
    for name, schema, new in (
            ("status", "STATUS", [{"gateway": "gw-1", "device": None, "status": "offline",
                                   "event_ms": t2, "ingest_ms": t2}]),
            ("quarantine", "QUARANTINE", [quarantined(
                "gw-1", "config", {"state": "applied", "version": 9,
                                   "running": {"version": 9}}, t2)])):
        tables.append_table(table(spark, schema, new), out, name)
    second = fleet.run(spark, "", out, fleet.FleetParams())
    assert second["since_ms"] == first["watermark_ms"] == t1 + 5
    got = rows(spark, out)
    one = got["gw-1"]
    assert (one["status"], one["config_version"], one["last_seen_ms"]) == ("offline", 9, t2)
    assert one["image_version"] == "0.3.0+1" and one["backlog_messages"] == 12  # kept
    assert got["gw-2"]["config_state"] == "rolled back"
    # --full gives the same table.
    fleet.run(spark, "", out, fleet.FleetParams(full=True))
    assert rows(spark, out)["gw-1"]["config_version"] == 9

    summary = report.run(spark, "", out, report.ReportParams(str(tmp_path / "r.json")))
    assert [r["gateway"] for r in summary["fleet"]] == ["gw-1", "gw-2"]
    text = report.render_fleet(summary["fleet"])
    assert "gw-2" in text and "config 7 (rolled back 8)" in text
    assert json.loads((tmp_path / "r.json").read_text())["fleet"][0]["gateway"] == "gw-1"
