"""``fleet``: ``gold/fleet``, one row per gateway: what it runs and how it is doing.

How this works: per gateway, the latest of each kind of fact the gateways send: its own
status (``online``/``offline``, silver ``status`` rows without a device), its uplink backlog
(silver ``uplink_diagnostics``), and the retained reports under its status topic, which carry
no message id and so reach silver as quarantined rows that keep their remote topic and
payload (``<prefix>/<gateway>/update``: the image version and slot; ``/config``: the remote
configuration's version, its state ``applied``/``refused``/``rolled back`` and why, and the
version running; ``/certificate``: the device certificate's expiry and state). Each group of
columns carries the time of its fact (``status_ms``, ``backlog_ms``, ``update_ms``,
``config_ms``, ``cert_ms``); ``last_seen_ms`` is the latest of them.

**Incremental** (:func:`run`): every row carries the ingest time up to which the silver
tables were read (``ingest_watermark_ms``); a run reads only silver rows ingested after it
(the quarantine by its ``ingest_date`` partitions from that day on), reduces them to the
latest facts per gateway, and merges them into the previous table group by group, the newer
fact winning. ``--full`` reads everything again.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F  # noqa: N812

from cloud_spark import tables

DEFAULT_STATUS_PREFIX = "outpost-status"

#: (group time column, [(column, JSON path in the report or None, Spark type)])
REPORTS: dict[str, tuple[str, list[tuple[str, str, str]]]] = {
    "update": ("update_ms", [("image_version", "$.running.version", "string"),
                             ("slot", "$.running.slot", "string")]),
    "config": ("config_ms", [("config_version", "$.version", "long"),
                             ("config_state", "$.state", "string"),
                             ("config_reason", "$.reason", "string"),
                             ("config_running_version", "$.running.version", "long")]),
    "certificate": ("cert_ms", [("cert_not_after", "$.not_after", "string"),
                                ("cert_state", "$.state", "string")]),
}
GROUPS: dict[str, list[str]] = {
    "status_ms": ["status"],
    "backlog_ms": ["connected", "backlog_messages", "backlog_bytes"],
    **{ms: [name for name, _, _ in columns] for ms, columns in REPORTS.values()},
}


@dataclass(frozen=True)
class FleetParams:
    """Parameters of the fleet job (CLI flags)."""

    status_prefix: str = DEFAULT_STATUS_PREFIX
    full: bool = False


def _latest(df: DataFrame, order: str, *then: Column) -> DataFrame:
    """The row with the largest `order` per gateway (ties: the largest of `then`)."""
    window = Window.partitionBy("gateway").orderBy(
        F.col(order).desc_nulls_last(), *[c.desc_nulls_last() for c in then])
    return df.withColumn("_n", F.row_number().over(window)).where("_n = 1").drop("_n")


def reports(quarantine: DataFrame, prefix: str) -> dict[str, DataFrame]:
    """Per subtopic, the latest report of each gateway as its fleet columns."""
    pattern = f"^{re.escape(prefix)}/([^/]+)/({'|'.join(REPORTS)})$"
    rows = quarantine.where(F.col("remote_topic").rlike(pattern)).select(
        F.regexp_extract("remote_topic", pattern, 1).alias("gateway"),
        F.regexp_extract("remote_topic", pattern, 2).alias("subtopic"),
        "payload", "ingest_ms")
    out = {}
    for subtopic, (ms, columns) in REPORTS.items():
        # Two reports landed in the same millisecond: the one with the later time stamp,
        # then a final one ("finished": applied, refused...) over a progress one (applying).
        latest = _latest(rows.where(F.col("subtopic") == subtopic), "ingest_ms",
                         F.get_json_object("payload", "$.ts"),
                         F.get_json_object("payload", "$.finished").isNotNull())
        out[subtopic] = latest.select(
            "gateway", F.col("ingest_ms").alias(ms),
            *[F.get_json_object("payload", path).cast(kind).alias(name)
              for name, path, kind in columns])
    return out


def facts(status: DataFrame, uplink: DataFrame, quarantine: DataFrame, prefix: str
          ) -> DataFrame:
    """The latest facts per gateway in these silver rows (null where there are none)."""
    own = _latest(status.where(F.col("device").isNull()), "event_ms").select(
        "gateway", "status", F.col("event_ms").alias("status_ms"))
    backlog = _latest(uplink, "event_ms").select(
        "gateway", "connected", "backlog_messages", "backlog_bytes",
        F.col("event_ms").alias("backlog_ms"))
    joined = own.join(backlog, "gateway", "full")
    for frame in reports(quarantine, prefix).values():
        joined = joined.join(frame, "gateway", "full")
    return joined.where(F.col("gateway").isNotNull())


def merge(previous: DataFrame, new: DataFrame, watermark_ms: int) -> DataFrame:
    """Group by group, the newer fact wins; `last_seen_ms` is the latest fact of any kind."""
    p, n = previous.alias("p"), new.alias("n")
    columns: list[Column] = [F.coalesce(F.col("n.gateway"), F.col("p.gateway")).alias("gateway")]
    for ms, names in GROUPS.items():
        newer = F.col(f"n.{ms}").isNotNull() & (
            F.col(f"p.{ms}").isNull() | (F.col(f"n.{ms}") >= F.col(f"p.{ms}")))
        for name in [*names, ms]:
            columns.append(F.when(newer, F.col(f"n.{name}")).otherwise(F.col(f"p.{name}"))
                           .alias(name))
    merged = p.join(n, F.col("p.gateway") == F.col("n.gateway"), "full").select(*columns)
    last = F.greatest(*[F.col(ms) for ms in GROUPS])
    return merged.select(
        *merged.columns, last.alias("last_seen_ms"),
        F.timestamp_millis(last).alias("last_seen_ts"),
        F.lit(watermark_ms).cast("long").alias("ingest_watermark_ms"))


def run(spark: SparkSession, root: str, out: str, params: FleetParams) -> dict[str, Any]:
    """Bring ``gold/fleet`` up to date with the silver rows ingested since the last run."""
    del root
    previous = tables.read_table(spark, out, "fleet")
    since = -1
    if not params.full:
        row = previous.agg(F.max("ingest_watermark_ms")).first()
        since = int(row[0]) if row is not None and row[0] is not None else -1
    else:
        previous = previous.limit(0)
    status = tables.read_table(spark, out, "status").where(F.col("ingest_ms") > since)
    uplink = tables.read_table(spark, out, "uplink_diagnostics").where(
        F.col("ingest_ms") > since)
    quarantine = tables.read_table(spark, out, "quarantine")
    if since >= 0:
        quarantine = quarantine.where(
            F.col("ingest_date") >= F.to_date(F.timestamp_millis(F.lit(since))))
    quarantine = quarantine.where(F.col("ingest_ms") > since)
    marks = [df.agg(F.max("ingest_ms")).first() for df in (status, uplink, quarantine)]
    watermark = max([since, *[int(m[0]) for m in marks if m is not None and m[0] is not None]])
    new = facts(status, uplink, quarantine, params.status_prefix)
    fleet = tables.conform(merge(previous.drop("last_seen_ms", "last_seen_ts",
                                               "ingest_watermark_ms"), new, watermark),
                           tables.TABLES["fleet"].schema)
    fleet = tables.held_in_driver(spark, fleet)  # the previous table is read above
    tables.write_table(fleet, out, "fleet", replace_whole=True)
    return {"gateways": fleet.count(), "since_ms": since, "watermark_ms": watermark}


def fleet_rows(spark: SparkSession, out: str) -> list[dict[str, Any]]:
    """The table as dictionaries, by gateway (the report's fleet section)."""
    return [row.asDict() for row in tables.read_table(spark, out, "fleet")
            .orderBy("gateway").collect()]
