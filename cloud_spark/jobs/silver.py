"""``silver``: bronze → deduplicated, typed tables plus a quarantine (exactly once).

How this works (extract → transform → load):

1. **Extract** every bronze file with the explicit bronze schema.
2. :func:`cloud_spark.jobs.silver_parse.classify` and ``parse_payloads`` type and validate;
   :func:`slim` drops the raw payload of rows that parsed fine (only quarantine needs it).
3. :func:`dedupe` groups rows by message id ``(gateway, epoch, seq)`` and keeps the earliest
   landed copy (smallest ``ingest_ms``, ties broken by the other columns, so the choice is
   deterministic), counting ``copies`` and flagging ``conflict`` when copies of one id carry
   different payloads or topics (an epoch reused by mistake). Rows without an id are kept
   as they are (``copies = 1``) and end up in quarantine.
4. One pure function per output table selects its rows: :func:`points`, :func:`status`,
   :func:`device_diagnostics`, :func:`uplink_diagnostics`, :func:`quarantine` (every row with a
   reason, never silently dropped) and :func:`messages` (one row per distinct id, good or
   quarantined: the ledger that the ``quality`` job checks for missing sequence numbers).
   A point is *late* when it was landed more than ``late_after_ms`` after its event time.
5. **Load**: the parsed frame is persisted once and each table is written as Parquet with
   dynamic partition overwrite, partitioned by event date (quarantine: by ingest date).

Every run recomputes from all of bronze, which is append-only, so a re-run rewrites the same
partitions with the same rows (idempotent) and late records land in their own event date.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F  # noqa: N812

from cloud_spark import contract as c
from cloud_spark import tables
from cloud_spark.jobs import silver_parse as sp

ID = ["gateway", "epoch", "seq"]


@dataclass(frozen=True)
class SilverParams:
    """Parameters of the silver job (CLI flags of ``python -m cloud_spark silver``)."""

    prefix: str = c.DEFAULT_DEVICE_PREFIX
    uplink_topic: str = c.UPLINK_DIAGNOSTICS_TOPIC
    late_after_ms: int = 5 * 60 * 1000


def date_of_ms(ms: Column) -> Column:
    """UTC calendar date of an epoch-millisecond column (independent of the session zone)."""
    return F.date_from_unix_date(F.floor(ms / F.lit(86_400_000)).cast("int"))


def ts_of_ms(ms: Column) -> Column:
    return F.timestamp_millis(ms)


def with_content_hash(df: DataFrame) -> DataFrame:
    """Add ``_hash``: a 64-bit hash of what a message says (topic and payload)."""
    return df.withColumn("_hash", F.xxhash64("local_topic", "payload", "payload_encoding"))


def dedupe(df: DataFrame) -> DataFrame:
    """One row per message id (earliest copy) plus every id-less row; adds copies, conflict.

    ``df`` needs the id columns, ``ingest_ms`` and ``_hash`` (:func:`with_content_hash`);
    copies of one id whose hashes differ are a *conflict*. The kept copy is the smallest
    struct of all columns with ``ingest_ms`` first: the earliest landed, deterministically.
    """
    has_id = F.col("gateway").isNotNull() & F.col("epoch").isNotNull() & F.col("seq").isNotNull()
    rest = [name for name in df.columns if name not in (*ID, "ingest_ms", "_hash")]
    kept = (
        df.where(has_id)
        .groupBy(*ID)
        .agg(
            F.count(F.lit(1)).alias("copies"),
            F.min(F.struct("ingest_ms", *rest)).alias("_first"),
            (F.min("_hash") != F.max("_hash")).alias("conflict"),
        )
        .select(*ID, "_first.*", "copies", "conflict")
    )
    loose = df.where(~has_id).withColumns(
        {"copies": F.lit(1).cast("long"), "conflict": F.lit(False)}
    )
    return kept.unionByName(loose.drop("_hash"))


def parse(bronze: DataFrame, params: SilverParams) -> DataFrame:
    """classify → parse_payloads → slim → dedupe.

    Parsing before deduplication means the shuffle that finds duplicates carries typed
    columns, not raw payloads (those are kept for quarantined rows only); the few
    duplicates are parsed twice, which is cheaper.
    """
    classified = sp.classify(with_content_hash(bronze), params.prefix, params.uplink_topic)
    return dedupe(slim(sp.parse_payloads(classified)))


def _good(parsed: DataFrame, kind: str) -> DataFrame:
    return parsed.where(F.col("reason").isNull() & (F.col("kind") == kind))


def points(parsed: DataFrame, late_after_ms: int = SilverParams.late_after_ms) -> DataFrame:
    """Typed long-format point samples."""
    event = F.col("ts")
    return _good(parsed, sp.KIND_POINT).select(
        *ID,
        "device",
        "point",
        event.alias("event_ms"),
        ts_of_ms(event).alias("event_ts"),
        "value_num",
        "value_str",
        "value_type",
        "unit",
        "quality",
        "received_ms",
        "ingest_ms",
        ((F.col("ingest_ms") - event) > late_after_ms).alias("is_late"),
        "copies",
        date_of_ms(event).alias("event_date"),
    )


def status(parsed: DataFrame) -> DataFrame:
    """Device online/offline events; the event time is the gateway's receive time."""
    event = F.coalesce(F.col("received_ms"), F.col("ingest_ms"))
    return _good(parsed, sp.KIND_STATUS).select(
        *ID,
        "device",
        F.col("status_value").alias("status"),
        event.alias("event_ms"),
        ts_of_ms(event).alias("event_ts"),
        "ingest_ms",
        "copies",
        date_of_ms(event).alias("event_date"),
    )


def device_diagnostics(parsed: DataFrame) -> DataFrame:
    """Cumulative Modbus counters per device."""
    event = F.col("ts")
    return _good(parsed, sp.KIND_DEVICE_DIAGNOSTICS).select(
        *ID,
        "device",
        event.alias("event_ms"),
        ts_of_ms(event).alias("event_ts"),
        "requests",
        "timeouts",
        "crc_errors",
        "exceptions",
        "stale_frames",
        "latency_ms",
        "received_ms",
        "ingest_ms",
        "copies",
        date_of_ms(event).alias("event_date"),
    )


def uplink_diagnostics(parsed: DataFrame) -> DataFrame:
    """The gateway uplink's own state: connection, backlog, drops."""
    event = F.col("ts")
    return _good(parsed, sp.KIND_UPLINK_DIAGNOSTICS).select(
        *ID,
        event.alias("event_ms"),
        ts_of_ms(event).alias("event_ts"),
        "connected",
        "backlog_messages",
        "backlog_bytes",
        "oldest_age_s",
        "dropped",
        "received_ms",
        "ingest_ms",
        "copies",
        date_of_ms(event).alias("event_date"),
    )


def quarantine(parsed: DataFrame) -> DataFrame:
    """Every row with a reason, with its original bytes (corrupt lines: the raw line)."""
    bad = parsed.where(F.col("reason").isNotNull())
    return bad.select(
        *ID,
        "local_topic",
        "received_ms",
        "remote_topic",
        F.coalesce(F.col("payload"), F.col("_corrupt_record")).alias("payload"),
        "payload_encoding",
        "ingest_ms",
        "lander_id",
        "reason",
        "copies",
        F.coalesce(F.col("ingest_date"), date_of_ms(F.col("ingest_ms"))).alias("ingest_date"),
    )


def messages(parsed: DataFrame) -> DataFrame:
    """The ledger: one row per distinct message id, good or quarantined."""
    has_id = F.col("gateway").isNotNull() & F.col("epoch").isNotNull() & F.col("seq").isNotNull()
    event = F.coalesce(F.col("received_ms"), F.col("ingest_ms"))
    return parsed.where(has_id).select(
        *ID,
        "kind",
        F.when(F.col("reason").isNull(), "ok").otherwise("quarantined").alias("status"),
        "reason",
        "copies",
        "conflict",
        "local_topic",
        "received_ms",
        "ingest_ms",
        date_of_ms(event).alias("event_date"),
    )


#: columns only the quarantine needs: kept for bad rows only when the parsed frame is cached
RAW_COLUMNS = ("payload", "payload_encoding", "remote_topic", "lander_id", "_corrupt_record")


def slim(parsed: DataFrame) -> DataFrame:
    """The parsed frame without raw bytes of good rows (what is worth caching)."""
    bad = F.col("reason").isNotNull()
    return parsed.withColumns({name: F.when(bad, F.col(name)) for name in RAW_COLUMNS})


def silver_tables(bronze: DataFrame, params: SilverParams) -> dict[str, DataFrame]:
    """All silver outputs of one bronze frame (pure; nothing is persisted here)."""
    return _split(parse(bronze, params), params)


def _split(parsed: DataFrame, params: SilverParams) -> dict[str, DataFrame]:
    return {
        "points": points(parsed, params.late_after_ms),
        "status": status(parsed),
        "device_diagnostics": device_diagnostics(parsed),
        "uplink_diagnostics": uplink_diagnostics(parsed),
        "quarantine": quarantine(parsed),
        "messages": messages(parsed),
    }


def run(spark: SparkSession, root: str, out: str, params: SilverParams) -> dict[str, int]:
    """Extract bronze, transform, load every silver table; returns row counts written."""
    parsed = parse(tables.read_bronze(spark, root), params)
    parsed = parsed.persist(StorageLevel.MEMORY_AND_DISK)
    try:
        frames = _split(parsed, params)
        for name, frame in frames.items():
            tables.write_table(frame, out, name)
        counts = (
            parsed.groupBy(F.col("reason").isNull().alias("ok"), "kind")
            .agg(F.count(F.lit(1)).alias("rows"), F.sum("copies").alias("copies"))
            .collect()
        )
        late = frames["points"].where(F.col("is_late")).count()
    finally:
        parsed.unpersist()
    result = {"rows": 0, "bronze_rows": 0, "quarantined": 0, "late": late}
    for row in counts:
        result["rows"] += row["rows"]
        result["bronze_rows"] += row["copies"]
        if not row["ok"]:
            result["quarantined"] += row["rows"]
        else:
            result[row["kind"]] = result.get(row["kind"], 0) + row["rows"]
    result["duplicates_removed"] = result["bronze_rows"] - result["rows"]
    return result
