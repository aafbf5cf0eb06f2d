"""Explicit Spark schemas of every table the jobs read or write.

How this works: the jobs never infer a schema. Bronze is read with :data:`BRONZE` (the JSON
reader drops unknown fields and keeps unparsable lines in ``_corrupt_record``); every table
a job writes is first projected onto its schema here by :func:`cloud_spark.tables.conform`,
so a transform that adds, drops or retypes a column fails loudly instead of silently changing
a table. Times are epoch milliseconds (``*_ms``, long) plus a UTC ``TimestampType`` column
where people will filter on it; partition columns are ``DateType`` named ``*_date``.
"""

from __future__ import annotations

from pyspark.sql.types import (
    BooleanType,
    DataType,
    DateType,
    DoubleType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)


def _schema(*fields: tuple[str, DataType]) -> StructType:
    return StructType([StructField(name, kind, nullable=True) for name, kind in fields])


S, L, D, B = StringType(), LongType(), DoubleType(), BooleanType()
TS, DATE, INT = TimestampType(), DateType(), IntegerType()

#: the message id, as columns
ID_COLUMNS = ("gateway", "epoch", "seq")

#: what the lander writes for each message (bronze, and quarantine keeps it whole)
_LANDED = (
    ("gateway", S),
    ("epoch", S),
    ("seq", L),
    ("local_topic", S),
    ("received_ms", L),
    ("remote_topic", S),
    ("payload", S),
    ("payload_encoding", S),
    ("ingest_ms", L),
    ("lander_id", S),
)

BRONZE = _schema(
    *_LANDED,
    ("_corrupt_record", S),
    ("ingest_date", DATE),
    ("ingest_hour", INT),
)

# --- silver ---------------------------------------------------------------------------------

#: one row per distinct message id (ok or quarantined): the ledger behind missing-seq checks
MESSAGES = _schema(
    ("gateway", S),
    ("epoch", S),
    ("seq", L),
    ("kind", S),
    ("status", S),
    ("reason", S),
    ("copies", L),
    ("conflict", B),
    ("content_hash", L),
    ("local_topic", S),
    ("received_ms", L),
    ("ingest_ms", L),
    ("event_date", DATE),
)

POINTS = _schema(
    ("gateway", S),
    ("epoch", S),
    ("seq", L),
    ("device", S),
    ("point", S),
    ("event_ms", L),
    ("event_ts", TS),
    ("value_num", D),
    ("value_str", S),
    ("value_type", S),
    ("unit", S),
    ("quality", S),
    ("received_ms", L),
    ("ingest_ms", L),
    ("is_late", B),
    ("copies", L),
    ("event_date", DATE),
)

#: windowed aggregates computed on the gateway (cloud_spark/jobs/silver_aggregates.py)
AGGREGATES = _schema(
    ("gateway", S),
    ("epoch", S),
    ("seq", L),
    ("device", S),
    ("point", S),
    ("window", S),
    ("window_ms", L),
    ("start_ms", L),
    ("end_ms", L),
    ("window_start", TS),
    ("window_end", TS),
    ("mean", D),
    ("min", D),
    ("max", D),
    ("first", D),
    ("last", D),
    ("count", L),
    ("covered_ms", L),
    ("unit", S),
    ("partial", B),
    ("received_ms", L),
    ("ingest_ms", L),
    ("copies", L),
    ("event_date", DATE),
)

#: every alarm transition made on a gateway (cloud_spark/jobs/alarms.py)
ALARM_EVENTS = _schema(
    ("gateway", S),
    ("epoch", S),
    ("seq", L),
    ("alarm", S),
    ("transition", L),
    ("from_state", S),
    ("to_state", S),
    ("cause", S),
    ("value_num", D),
    ("value_str", S),
    ("event_ts", TS),
    ("ts_ms", L),
    ("severity", S),
    ("alarm_kind", S),
    ("point", S),
    ("user", S),
    ("received_ms", L),
    ("ingest_ms", L),
    ("copies", L),
    ("event_date", DATE),
)

#: one row per occurrence of an alarm: raised, acknowledged, cleared (cloud_spark/jobs/alarms.py)
ALARMS = _schema(
    ("gateway", S),
    ("alarm", S),
    ("occurrence", L),
    ("severity", S),
    ("alarm_kind", S),
    ("point", S),
    ("raised_transition", L),
    ("raised_at", TS),
    ("raised_value", D),
    ("acknowledged_at", TS),
    ("acknowledged_by", S),
    ("cleared_at", TS),
    ("cleared_value", D),
    ("normal_at", TS),
    ("time_to_acknowledge_s", D),
    ("active_s", D),
    ("open", B),
    ("event_date", DATE),
)

STATUS = _schema(
    ("gateway", S),
    ("epoch", S),
    ("seq", L),
    ("device", S),
    ("status", S),
    ("event_ms", L),
    ("event_ts", TS),
    ("ingest_ms", L),
    ("copies", L),
    ("event_date", DATE),
)

DEVICE_DIAGNOSTICS = _schema(
    ("gateway", S),
    ("epoch", S),
    ("seq", L),
    ("device", S),
    ("event_ms", L),
    ("event_ts", TS),
    ("requests", L),
    ("timeouts", L),
    ("crc_errors", L),
    ("exceptions", L),
    ("stale_frames", L),
    ("latency_ms", D),
    ("received_ms", L),
    ("ingest_ms", L),
    ("copies", L),
    ("event_date", DATE),
)

UPLINK_DIAGNOSTICS = _schema(
    ("gateway", S),
    ("epoch", S),
    ("seq", L),
    ("event_ms", L),
    ("event_ts", TS),
    ("connected", B),
    ("backlog_messages", L),
    ("backlog_bytes", L),
    ("oldest_age_s", D),
    ("dropped", L),
    ("received_ms", L),
    ("ingest_ms", L),
    ("copies", L),
    ("event_date", DATE),
)

QUARANTINE = _schema(
    *_LANDED,
    ("reason", S),
    ("copies", L),
    ("ingest_date", DATE),
)

# --- gold -----------------------------------------------------------------------------------

ROLLUPS = _schema(
    ("gateway", S),
    ("device", S),
    ("point", S),
    ("window_start", TS),
    ("window_end", TS),
    ("count", L),
    ("min", D),
    ("max", D),
    ("avg", D),
    ("stddev", D),
    ("sum", D),
    ("first", D),
    ("last", D),
    ("twa", D),
    ("covered_s", D),
    ("grain", S),
    ("window_date", DATE),
)

OUTAGES = _schema(
    ("gateway", S),
    ("device", S),
    ("start_ms", L),
    ("end_ms", L),
    ("start_ts", TS),
    ("duration_s", D),
    ("cause", S),
    ("open", B),
    ("event_date", DATE),
)

GATEWAY_OUTAGES = _schema(
    ("gateway", S),
    ("start_ms", L),
    ("end_ms", L),
    ("start_ts", TS),
    ("duration_s", D),
    ("open", B),
    ("event_date", DATE),
)

AVAILABILITY = _schema(
    ("gateway", S),
    ("device", S),
    ("observed_s", D),
    ("down_s", D),
    ("uptime_pct", D),
    ("outages", L),
    ("event_date", DATE),
)

LINK_OUTAGES = _schema(
    ("gateway", S),
    ("source", S),
    ("start_ms", L),
    ("end_ms", L),
    ("start_ts", TS),
    ("duration_s", D),
    ("open", B),
    ("event_date", DATE),
)

SEQ_RANGES = _schema(
    ("gateway", S),
    ("epoch", S),
    ("first_seq", L),
    ("last_seq", L),
    ("duplicates", L),
    ("conflicts", L),
    ("event_date", DATE),
)

SEQ_SUMMARY = _schema(
    ("gateway", S),
    ("epoch", S),
    ("first_seq", L),
    ("last_seq", L),
    ("received", L),
    ("missing", L),
    ("duplicates", L),
    ("conflicts", L),
)

SEQ_GAPS = _schema(
    ("gateway", S),
    ("epoch", S),
    ("missing_from", L),
    ("missing_to", L),
    ("missing", L),
)

QUALITY_FLAGS = _schema(
    ("gateway", S),
    ("device", S),
    ("point", S),
    ("check", S),
    ("start_ms", L),
    ("end_ms", L),
    ("samples", L),
    ("value", D),
    ("detail", S),
    ("event_date", DATE),
)

CLOCK_SKEW = _schema(
    ("gateway", S),
    ("device", S),
    ("samples", L),
    ("skewed", L),
    ("min_skew_s", D),
    ("max_skew_s", D),
    ("median_skew_s", D),
    ("gateway_ahead", L),
    ("median_ingest_lag_s", D),
    ("max_ingest_lag_s", D),
    ("event_date", DATE),
)

DEVICE_HEALTH = _schema(
    ("gateway", S),
    ("device", S),
    ("window_start", TS),
    ("samples", L),
    ("requests", L),
    ("timeouts", L),
    ("crc_errors", L),
    ("exceptions", L),
    ("stale_frames", L),
    ("error_rate", D),
    ("latency_avg_ms", D),
    ("latency_max_ms", D),
    ("counter_resets", L),
    ("event_date", DATE),
)

LINK_HEALTH = _schema(
    ("gateway", S),
    ("window_start", TS),
    ("samples", L),
    ("connected_pct", D),
    ("backlog_max_messages", L),
    ("backlog_max_bytes", L),
    ("oldest_age_max_s", D),
    ("dropped", L),
    ("event_date", DATE),
)

REPORT = _schema(
    ("bronze_rows", L),
    ("messages", L),
    ("duplicates_removed", L),
    ("id_conflicts", L),
    ("points", L),
    ("status_rows", L),
    ("device_diagnostics_rows", L),
    ("uplink_diagnostics_rows", L),
    ("late", L),
    ("quarantined", L),
    ("epochs", L),
    ("missing_seq", L),
    ("device_outages", L),
    ("downtime_s", D),
    ("gateway_outages", L),
    ("gateway_down_s", D),
    ("link_outages", L),
    ("link_down_s", D),
    ("quality_flags", L),
)

#: one row per gateway: the latest of each kind of fact it sent (cloud_spark/jobs/fleet.py)
FLEET = _schema(
    ("gateway", S),
    ("status", S),
    ("status_ms", L),
    ("connected", B),
    ("backlog_messages", L),
    ("backlog_bytes", L),
    ("backlog_ms", L),
    ("image_version", S),
    ("slot", S),
    ("update_ms", L),
    ("config_version", L),
    ("config_state", S),
    ("config_reason", S),
    ("config_running_version", L),
    ("config_ms", L),
    ("cert_not_after", S),
    ("cert_state", S),
    ("cert_ms", L),
    ("last_seen_ms", L),
    ("last_seen_ts", TS),
    ("ingest_watermark_ms", L),
)
