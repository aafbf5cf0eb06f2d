"""``report``: a short human summary of the tables, printed and written as JSON.

How this works: :func:`summarize` reduces every table to a handful of numbers in one row
(pure: frames in, one-row frame out), :func:`quarantine_reasons` counts quarantined rows by
reason. Nothing is taken from job logs: the report is recomputed from the tables, so it
describes what is actually stored. ``bronze_rows`` is rebuilt from the ledger's ``copies``
plus the quarantined rows without an id, so ``bronze_rows - duplicates_removed`` is the
number of distinct messages landed. Bronze files that silver skipped or read only in part
come from its manifest (:mod:`cloud_spark.jobs.manifest`). Tables not produced yet count as
empty.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F  # noqa: N812

from cloud_spark import tables
from cloud_spark.jobs import manifest as mf
from cloud_spark.jobs.fleet import fleet_rows

INPUTS = (
    "messages",
    "points",
    "status",
    "device_diagnostics",
    "uplink_diagnostics",
    "quarantine",
    "seq_summary",
    "outages",
    "gateway_outages",
    "link_outages",
    "quality_flags",
)


@dataclass(frozen=True)
class ReportParams:
    """Parameters of the report job: where to write the JSON (default ``<out>/report.json``)."""

    json_path: str | None = None


def _scalar(df: DataFrame, **aggs: Any) -> DataFrame:
    return df.agg(*[expr.alias(name) for name, expr in aggs.items()])


def summarize(frames: dict[str, DataFrame]) -> DataFrame:
    """One row with the run's headline numbers (see ``schemas.REPORT``)."""
    zero = F.lit(0).cast("long")
    count = F.count(F.lit(1))
    no_id = F.col("gateway").isNull() | F.col("epoch").isNull() | F.col("seq").isNull()
    parts = [
        _scalar(
            frames["messages"],
            messages=count,
            _copies=F.coalesce(F.sum("copies"), zero),
            duplicates_removed=F.coalesce(F.sum(F.col("copies") - 1), zero),
            id_conflicts=F.count_if("conflict"),
        ),
        _scalar(frames["points"], points=count, late=F.count_if("is_late")),
        _scalar(frames["status"], status_rows=count),
        _scalar(frames["device_diagnostics"], device_diagnostics_rows=count),
        _scalar(frames["uplink_diagnostics"], uplink_diagnostics_rows=count),
        _scalar(frames["quarantine"], quarantined=count, _loose=F.count_if(no_id)),
        _scalar(
            frames["seq_summary"],
            epochs=count,
            missing_seq=F.coalesce(F.sum("missing"), zero),
        ),
        _scalar(
            frames["outages"],
            device_outages=count,
            downtime_s=F.coalesce(F.sum("duration_s"), F.lit(0.0)),
        ),
        _scalar(
            frames["gateway_outages"],
            gateway_outages=count,
            gateway_down_s=F.coalesce(F.sum("duration_s"), F.lit(0.0)),
        ),
        _scalar(
            frames["link_outages"],
            link_outages=count,
            link_down_s=F.coalesce(F.sum("duration_s"), F.lit(0.0)),
        ),
        _scalar(frames["quality_flags"], quality_flags=count),
    ]
    row = parts[0]
    for part in parts[1:]:
        row = row.crossJoin(part)
    return row.withColumn("bronze_rows", F.col("_copies") + F.col("_loose")).drop(
        "_copies", "_loose"
    )


def quarantine_reasons(quarantine: DataFrame) -> DataFrame:
    """``reason, rows`` sorted by rows (descending) then reason."""
    return (
        quarantine.groupBy("reason")
        .agg(F.count(F.lit(1)).alias("rows"))
        .orderBy(F.desc("rows"), "reason")
    )


def render(
    summary: dict[str, Any], reasons: dict[str, int], skipped: dict[str, int] | None = None
) -> str:
    """The human summary printed by ``python -m cloud_spark report``.

    ``skipped``: bronze files skipped or cut short, by reason (the silver manifest).
    """
    lines = [
        f"bronze rows        {summary['bronze_rows']:>12,}",
        f"messages (unique)  {summary['messages']:>12,}   duplicates removed "
        f"{summary['duplicates_removed']:,}   id conflicts {summary['id_conflicts']:,}",
        f"points             {summary['points']:>12,}   late {summary['late']:,}",
        f"status/diag/uplink {summary['status_rows']:>12,} / "
        f"{summary['device_diagnostics_rows']:,} / {summary['uplink_diagnostics_rows']:,}",
        f"quarantined        {summary['quarantined']:>12,}",
    ]
    lines += [f"  {reason:<28} {rows:>10,}" for reason, rows in reasons.items()]
    if skipped:
        lines.append(f"bronze files skipped {sum(skipped.values()):>10,}")
        lines += [f"  {reason:<28} {files:>10,}" for reason, files in sorted(skipped.items())]
    lines += [
        f"missing seq        {summary['missing_seq']:>12,}   over {summary['epochs']:,} "
        "gateway epochs",
        f"device outages     {summary['device_outages']:>12,}   downtime "
        f"{summary['downtime_s']:,.0f} s",
        f"gateway outages    {summary['gateway_outages']:>12,}   downtime "
        f"{summary['gateway_down_s']:,.0f} s",
        f"link outages       {summary['link_outages']:>12,}   downtime "
        f"{summary['link_down_s']:,.0f} s",
        f"quality flags      {summary['quality_flags']:>12,}",
    ]
    verdict = "OK: nothing lost" if summary["missing_seq"] == 0 else "MISSING MESSAGES"
    return "\n".join([*lines, verdict])


def _utc(ms: int) -> str:
    # From the milliseconds, not `last_seen_ts`: the rows may come from report.json, whose
    # timestamps are strings.
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def render_fleet(rows: list[dict[str, Any]]) -> str:
    """The report's fleet section: one line per gateway (gold/fleet)."""
    lines = [f"fleet              {len(rows):>12,} gateway(s)"]
    for r in rows:
        config = (f"config {r['config_running_version']} ({r['config_state']} "
                  f"{r['config_version']})" if r.get("config_state") else "config -")
        lines.append(
            f"  {r['gateway']:<20} {r.get('status') or '-':<8} image "
            f"{r.get('image_version') or '-'} slot {r.get('slot') or '-'}, {config}, cert "
            f"until {r.get('cert_not_after') or '-'} ({r.get('cert_state') or '-'}), backlog "
            f"{r['backlog_messages'] if r.get('backlog_messages') is not None else '-'}, "
            f"last seen {_utc(r['last_seen_ms'])}"
            if r.get("last_seen_ms") is not None else f"  {r['gateway']}")
    return "\n".join(lines)


def run(spark: SparkSession, root: str, out: str, params: ReportParams) -> dict[str, Any]:
    """Summarize the tables under ``out``, print it, write JSON; return the JSON object."""
    del root
    frames = {name: tables.read_table(spark, out, name) for name in INPUTS}
    row = summarize(frames).first()
    summary: dict[str, Any] = row.asDict() if row is not None else {}
    reasons = {r["reason"]: r["rows"] for r in quarantine_reasons(frames["quarantine"]).collect()}
    skipped = mf.skipped_counts(spark, out)
    fleet = fleet_rows(spark, out)
    report = {**summary, "quarantine_reasons": reasons, "bronze_files_skipped": skipped,
              "fleet": fleet}
    print(render(summary, reasons, skipped))
    if fleet:
        print(render_fleet(fleet))
    path = Path(params.json_path or tables.join_path(out, "report.json"))
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(report, indent=2, sort_keys=True, default=str) + "\n"
    path.write_text(text)
    return dict(json.loads(text))  # the object as written: the fleet's times as strings
