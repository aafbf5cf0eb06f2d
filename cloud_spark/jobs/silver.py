"""``silver``: bronze → deduplicated, typed tables plus a quarantine (exactly once).

How this works (extract → transform → load):

1. **Extract** the bronze files not processed yet (:mod:`cloud_spark.bronze_files` lists
   them and keeps the manifest; all of them on the first run and with ``--full``) with the
   explicit bronze schema; empty, truncated and vanished files are recorded with a reason.
2. :func:`cloud_spark.jobs.silver_parse.classify` and ``parse_payloads`` type and validate;
   :func:`slim` drops the raw payload of rows that parsed fine (only quarantine needs it).
3. :func:`dedupe` groups rows by message id ``(gateway, epoch, seq)`` and keeps the earliest
   landed copy (smallest ``ingest_ms``, ties broken by the content hash and the other
   columns, so the choice is deterministic), counting ``copies`` and flagging ``conflict``
   when copies of one id carry different payloads or topics (an epoch reused by mistake).
   Rows without an id are kept as they are (``copies = 1``) and end up in quarantine.
4. One pure function per output table selects its rows: :func:`points`, :func:`status`,
   :func:`device_diagnostics`, :func:`uplink_diagnostics`, :func:`quarantine` (every row with a
   reason, never silently dropped) and :func:`messages` (one row per distinct id, good or
   quarantined: the ledger that the ``quality`` job checks for missing sequence numbers).
   A point is *late* when it was landed more than ``late_after_ms`` after its event time.
5. **Load**: the parsed frame is persisted once, on disk (:data:`CACHE_LEVEL`). A full run
   replaces every table (Parquet, partitioned by event date; quarantine: by ingest date).
   An incremental run appends the rows of new ids and merges
   (:mod:`cloud_spark.jobs.silver_merge`) only the partitions holding an id that silver
   already had, with dynamic partition overwrite; late records land in their own event
   date. The manifest is committed last, so a run that dies is redone, and the pending mark
   makes the redo merge instead of append.
"""

from __future__ import annotations

from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import reduce
from typing import Any

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, Row, SparkSession, Window
from pyspark.sql import functions as F  # noqa: N812

from cloud_spark import bronze_files as bf
from cloud_spark import contract as c
from cloud_spark import tables
from cloud_spark.jobs import manifest as mf
from cloud_spark.jobs import silver_aggregates as sa
from cloud_spark.jobs import silver_merge as sm
from cloud_spark.jobs import silver_parse as sp
from cloud_spark.jobs.alarms import alarm_events
from cloud_spark.jobs.silver_parse import date_of_ms

ID = sm.ID

#: How silver keeps the frames it reads more than once (the parsed frame: by six writes and
#: the counts). On disk, not in the heap: PySpark's ``MEMORY_AND_DISK`` is the *serialized*
#: level, and a serialized block that had gone to disk is read back whole into one heap
#: buffer to be cached again, which ran a 1.2 GiB heap out of memory at 2M rows. Blocks on
#: disk are streamed, and the operating system's page cache, outside the JVM, keeps them
#: warm; the heap can stay small (:data:`cloud_spark.spark.LOCAL_JVM_CONF`).
CACHE_LEVEL = StorageLevel.DISK_ONLY


@dataclass(frozen=True)
class SilverParams:
    """Parameters of the silver job (CLI flags of ``python -m cloud_spark silver``)."""

    prefix: str = c.DEFAULT_DEVICE_PREFIX
    uplink_topic: str = c.UPLINK_DIAGNOSTICS_TOPIC
    late_after_ms: int = 5 * 60 * 1000
    #: an incremental run lists bronze from this many days before the latest ingest date it
    #: has processed (``--relist-days``; see :mod:`cloud_spark.bronze_files`)
    relist_days: int = 1
    #: reprocess all of bronze and replace every table (``--full``)
    full: bool = False


def ts_of_ms(ms: Column) -> Column:
    return F.timestamp_millis(ms)


def with_content_hash(df: DataFrame) -> DataFrame:
    """Add ``_hash``: a 64-bit hash of what a message says (topic and payload)."""
    return df.withColumn("_hash", F.xxhash64("local_topic", "payload", "payload_encoding"))


def dedupe(df: DataFrame) -> DataFrame:
    """One row per message id (earliest copy) plus every id-less row; adds copies, conflict.

    ``df`` needs the id columns, ``ingest_ms`` and ``_hash`` (:func:`with_content_hash`);
    copies of one id whose hashes differ are a *conflict*. The kept copy is the first in
    the order ``ingest_ms``, ``_hash``, then every other column: the earliest landed,
    deterministically (the incremental merge, :mod:`cloud_spark.jobs.silver_merge`, uses the
    same order across runs). The kept copy's ``_hash`` stays (the ledger's ``content_hash``).

    One window over the id: a single shuffle and sort. (A ``groupBy`` keeping the smallest
    struct sorted every row twice, once before its partial aggregation, and id-less rows,
    kept apart and unioned back, made the plan scan bronze a second time.)
    """
    rest = [name for name in df.columns if name not in (*ID, "ingest_ms", "_hash")]
    # each id-less row is a group of its own
    alone = F.when(~sm.has_id(), F.monotonically_increasing_id())
    order = Window.partitionBy(*ID, "_alone").orderBy("ingest_ms", "_hash", *rest)
    group = order.rowsBetween(Window.unboundedPreceding, Window.unboundedFollowing)
    ranked = df.withColumn("_alone", alone).withColumns(
        {
            "_rank": F.row_number().over(order),
            "copies": F.count(F.lit(1)).over(group),
            "conflict": F.min("_hash").over(group) != F.max("_hash").over(group),
        }
    )
    return ranked.where(F.col("_rank") == 1).select(*df.columns, "copies", "conflict")


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


def is_late(late_after_ms: int) -> Column:
    """A sample landed more than `late_after_ms` after its event time."""
    return (F.col("ingest_ms") - F.col("ts")) > late_after_ms


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
        is_late(late_after_ms).alias("is_late"),
        "copies",
        date_of_ms(event).alias("event_date"),
    )


def status(parsed: DataFrame) -> DataFrame:
    """Device online/offline events and the gateway's own (``device`` null, ``seq`` null);
    the event time is the gateway's receive time (the landing time for a will, which the
    cloud broker published)."""
    event = F.coalesce(F.col("received_ms"), F.col("ingest_ms"))
    kinds = F.col("kind").isin(sp.KIND_STATUS, sp.KIND_GATEWAY_STATUS)
    return parsed.where(F.col("reason").isNull() & kinds).select(
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
    has_id = sm.has_id()
    event = F.coalesce(F.col("received_ms"), F.col("ingest_ms"))
    return parsed.where(has_id).select(
        *ID,
        "kind",
        F.when(F.col("reason").isNull(), "ok").otherwise("quarantined").alias("status"),
        "reason",
        "copies",
        "conflict",
        F.col("_hash").alias("content_hash"),
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
        "aggregates": sa.aggregates(parsed),
        "alarm_events": alarm_events(parsed),
        "status": status(parsed),
        "device_diagnostics": device_diagnostics(parsed),
        "uplink_diagnostics": uplink_diagnostics(parsed),
        "quarantine": quarantine(parsed),
        "messages": messages(parsed),
    }


def _unreadable(spark: SparkSession, root: str, files: list[bf.BronzeFile]) -> dict[str, str]:
    """Reasons for the files that are empty or already gone (Spark is not given those)."""
    reasons: dict[str, str] = {}
    for file in files:
        if file.size == 0:
            reasons[file.rel] = bf.REASON_EMPTY
        elif not bf.exists(spark, root, file.rel):
            reasons[file.rel] = bf.REASON_VANISHED
    return reasons


def _truncated(root: str, rels: list[str]) -> dict[str, str]:
    """Reasons for the local gzip files that end mid-stream (Spark reads them up to the break)."""
    reasons: dict[str, str] = {}
    for rel in rels:
        local = bf.local_path(root, rel)
        if local is not None and not bf.check_gzip(local):
            reasons[rel] = bf.REASON_TRUNCATED
    return reasons


def _partition_dates(frames: dict[str, DataFrame]) -> dict[str, set[Any]]:
    """Per table: the partitions its new rows fall in. One job for all six tables: in a
    small incremental run the per-table look-ups, not the rows, were what the run spent
    its time on."""
    union = reduce(
        DataFrame.unionByName,
        [
            frame.select(F.lit(name).alias("_table"), F.col(_partition_column(name)).alias("_date"))
            for name, frame in frames.items()
        ],
    )
    rows = union.where(F.col("_date").isNotNull()).distinct().collect()
    found: dict[str, set[Any]] = {name: set() for name in frames}
    for row in rows:
        found[row["_table"]].add(row["_date"])
    return found


def _partition_column(name: str) -> str:
    return tables.TABLES[name].partition_by[0]


def merge_order(names: list[str]) -> list[str]:
    """The order of an incremental run's merges: the ledger last, so that until it is
    merged every other table's merge is decided against the ledger as it was before the run."""
    return [name for name in names if name != "messages"] + ["messages"]


def _load_incremental(
    spark: SparkSession, out: str, frames: dict[str, DataFrame], run_id: str
) -> list[Any]:
    """Merge the new rows into silver, one Delta ``MERGE`` per table; returns the event
    dates touched.

    Each merge is committed once per ``(run_id, table)`` (:func:`cloud_spark.tables.idempotent`):
    redoing a run that died after some of its merges skips those. The ledger is merged
    last, so :func:`~cloud_spark.jobs.silver_merge.resolve` (old ledger against new)
    still sees the ledger without this run's rows whenever a table is left to merge.
    """
    new_ledger = frames["messages"]
    dates = _partition_dates(frames)
    old_ledger = tables.read_table(spark, out, "messages").where(
        F.col("event_date").isin(sorted(dates["messages"]))
    )
    resolution = sm.resolve(old_ledger, new_ledger).persist(CACHE_LEVEL)
    resolution.count()  # materialized now: the ledger it reads is merged below
    try:
        for name in merge_order(list(frames)):
            # quarantine is partitioned by ingest date, which copies of one id need not share
            if not dates[name]:
                continue
            prune = () if name == "quarantine" else tuple(sorted(dates[name]))
            with tables.idempotent(spark, f"silver-{run_id}", 0):
                sm.merge_into(spark, out, name, frames[name], resolution, prune)
    finally:
        resolution.unpersist()
    return sorted(set().union(*(d for n, d in dates.items() if n != "quarantine")))


def run(spark: SparkSession, root: str, out: str, params: SilverParams) -> dict[str, Any]:
    """Process the bronze files not processed yet (all of them with ``params.full``).

    First finishes any run that claimed files and did not commit (:mod:`.manifest`); then
    extracts the new files, transforms, and loads: a full run replaces every silver table,
    an incremental run merges into them. Returns the counts of this run's rows.
    """
    since = (
        None
        if params.full
        else bf.listing_cutoff(mf.manifest_dates(spark, out), params.relist_days)
    )
    return process(spark, root, out, params, bf.list_bronze(spark, root, since))


def finish_pending(spark: SparkSession, root: str, out: str, params: SilverParams) -> int:
    """Redo the runs that claimed files and never committed (killed, or still going: every
    table write of a run is idempotent on its id, so a table is never merged twice);
    returns how many."""
    pending = mf.pending_runs(spark, out)
    for run in pending:
        files = mf.claimed_files(spark, out, run["run_id"])
        _execute(spark, root, out, params, files, run["run_id"], full=run["full"] == "true")
    return len(pending)


def _transform_and_load(
    spark: SparkSession,
    root: str,
    out: str,
    params: SilverParams,
    readable: list[str],
    run_id: str,
    *,
    full: bool,
) -> tuple[list[Any], list[Row]]:
    """Parse the files, write or merge the tables; returns the touched dates and the counts."""
    parsed = parse(tables.read_bronze(spark, root, readable), params)
    parsed = parsed.persist(CACHE_LEVEL)
    try:
        frames = _split(parsed, params)
        if full:
            for name, frame in frames.items():
                tables.write_table(frame, out, name, replace_whole=True)
            touched = []
        else:
            touched = _load_incremental(spark, out, frames, run_id)
        late_point = (F.col("kind") == sp.KIND_POINT) & is_late(params.late_after_ms)
        counts = (
            parsed.groupBy(F.col("reason").isNull().alias("ok"), "kind")
            .agg(
                F.count(F.lit(1)).alias("rows"),
                F.sum("copies").alias("copies"),
                F.count(F.when(late_point, 1)).alias("late"),  # of good rows: points' is_late
            )
            .collect()
        )
    finally:
        parsed.unpersist()
    return touched, counts


def _listed_since(rel: str, since: str) -> bool:
    day = bf.ingest_date_of(rel)
    return day == bf.NO_DATE or day >= since


def process(
    spark: SparkSession,
    root: str,
    out: str,
    params: SilverParams,
    listed: list[bf.BronzeFile],
) -> dict[str, Any]:
    """:func:`run` on a given listing (files may have vanished since it was taken)."""
    finish_pending(spark, root, out, params)
    dates = mf.manifest_dates(spark, out)
    full = params.full or not dates
    since = None if full else bf.listing_cutoff(dates, params.relist_days)
    if since is not None:  # older dates were processed (see cloud_spark.jobs.manifest)
        listed = [f for f in listed if _listed_since(f.rel, since)]
    done = set() if full else mf.processed(spark, out, since)
    todo = listed if full else [f for f in listed if f.rel not in done]
    if not todo and not full:  # nothing new: no run to record
        return _result([], {}, [], full=False)
    run_id = mf.new_run_id()
    claimed = mf.claim(spark, out, run_id, todo, full=full)
    return _execute(spark, root, out, params, claimed, run_id, full=full)


def _execute(
    spark: SparkSession,
    root: str,
    out: str,
    params: SilverParams,
    todo: list[bf.BronzeFile],
    run_id: str,
    *,
    full: bool,
) -> dict[str, Any]:
    """Run ``run_id`` over the files it claimed and commit it."""
    reasons = _unreadable(spark, root, todo)
    readable = [f.rel for f in todo if f.rel not in reasons]
    # checking a gzip file means decompressing all of it in Python (2M rows: 1.45 s): done
    # while Spark works (zlib releases the GIL) instead of before the job starts
    with ThreadPoolExecutor(max_workers=1) as checks:
        truncated = checks.submit(_truncated, root, readable)
        try:
            touched, counts = _transform_and_load(
                spark, root, out, params, readable, run_id, full=full
            )
        except Exception as exc:
            if not mf.is_conflict(exc):
                raise
            raise mf.ConcurrentRunError(
                f"another silver run wrote the tables under {out} at the same time as run "
                f"{run_id}; what this run committed stays, the next run finishes the rest"
            ) from exc
        reasons.update(truncated.result())
    for rel in readable:  # gone while the run read: Spark skipped it (ignoreMissingFiles)
        if not bf.exists(spark, root, rel):
            reasons[rel] = bf.REASON_VANISHED
    mf.commit(spark, out, run_id, reasons, touched)
    return _result(todo, reasons, counts, full=full)


def _result(
    todo: list[bf.BronzeFile], reasons: dict[str, str], counts: list[Row], *, full: bool
) -> dict[str, Any]:
    result: dict[str, Any] = {"rows": 0, "bronze_rows": 0, "quarantined": 0, "late": 0}
    for row in counts:
        result["rows"] += row["rows"]
        result["bronze_rows"] += row["copies"] or 0
        if not row["ok"]:
            result["quarantined"] += row["rows"]
        else:
            result[row["kind"]] = result.get(row["kind"], 0) + row["rows"]
            result["late"] += row["late"]
    result["duplicates_removed"] = result["bronze_rows"] - result["rows"]
    result["mode"] = "full" if full else "incremental"
    result["files"] = len(todo)
    result["files_skipped"] = dict(Counter(reasons.values()))
    return result
