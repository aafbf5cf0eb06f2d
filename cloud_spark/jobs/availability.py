"""``availability``: device, gateway and link outages and uptime per device and day.

How this works:

* The *horizon* is the latest event time of the device data (points and device statuses);
  nothing is judged beyond it.
* **Gateway outages** come from the gateway's own status (``silver/status`` rows without a
  device: the retained ``online``/``offline`` the uplink keeps on the cloud broker, whose
  ``offline`` the cloud broker publishes as the will when the gateway dies). An outage runs
  from the first ``offline`` to the next ``online`` (or is open until the horizon); repeated
  copies of one status change nothing. The uplink's diagnostics (through the outbox, so
  complete) tell a dead gateway from a lost link: an ``offline`` the gateway outlived (it
  reported between that ``offline`` and the next ``online``, or its last report before said
  ``connected = false``) was about the link (a broken connection, a stopped cloud broker).
* **Gateway runs.** The gateway's ``offline`` events cut each device's status stream into
  runs. The bridge publishes every device ``offline`` when it starts (the device is not
  polled yet) and when it stops: the first status of a device in a run, when ``offline`` and
  before any point of the device in that run, is that start-up status, and an ``offline``
  followed by the gateway's ``offline`` within ``shutdown_window`` is the stop; neither is a
  device outage.
* **Silence**: a device is alive while its points report (any quality but ``bad``). When two
  consecutive reports are more than ``expected_interval x gap_factor`` apart, the device was
  down from ``previous report + expected_interval`` until the next report. A device silent
  until the horizon has an *open* outage.
* **Offline**: any other ``offline`` starts an outage that ends at the device's next status
  or when its gateway goes down, whichever is first.
* Overlapping outages of one device are merged (gaps-and-islands: a new island starts when
  an outage begins after every earlier one ended); ``cause`` lists what was seen, e.g.
  ``offline+silence``. Then the time its gateway was down is cut out: while the gateway is
  down nothing is known about its devices, and that time is the gateway's outage.
* **Uptime** per device and UTC day: ``observed`` is the part of the day between the device's
  first sign of life and the horizon, less the time its gateway was down; ``down`` the part
  of it covered by device outages; ``uptime_pct = 100 x (1 - down / observed)``.
* **Link outages** per gateway: the gateway up, the cloud not reached. From two sources,
  merged where they overlap: ``diagnostics`` (runs of ``connected = false`` in the uplink's
  diagnostics, ending at the next ``connected = true``; the outbox carries the reports made
  during the outage to the cloud afterwards) and ``ingest_delay`` (runs of at least
  ``link_min_messages`` consecutive messages that reached the lander more than
  ``link_delay`` after the gateway received them, from the first such receive time to the
  first such landing; this also shows cloud-side delays such as a stopped lander).
* **Incremental** (:func:`run`): only days from the first day new silver data touched are
  recomputed, reaching back to the start of any outage still open or running into that day.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import date, timedelta
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F  # noqa: N812

from cloud_spark import contract as c
from cloud_spark import tables
from cloud_spark.jobs import manifest as mf
from cloud_spark.jobs.silver_parse import date_of_ms

DAY_MS = 86_400_000
DEVICE = ["gateway", "device"]
#: gold tables of this job, the event tables (rows may disappear) first
EVENT_TABLES = ("outages", "gateway_outages", "link_outages")


@dataclass(frozen=True)
class AvailabilityParams:
    """Parameters of the availability job (CLI flags)."""

    expected_interval_ms: int = 60_000
    gap_factor: float = 2.0
    link_delay_ms: int = 120_000
    link_min_messages: int = 10
    #: a device ``offline`` this close before its gateway's ``offline`` is the bridge stopping
    shutdown_window_ms: int = 5_000
    #: a gateway ``offline`` whose last report in this window before said ``connected =
    #: false`` is about the link, not the gateway
    alive_window_ms: int = 60_000
    #: recompute everything (``--full``), not only the days new silver data touched
    full: bool = False


def device_status(status: DataFrame) -> DataFrame:
    """The device rows of ``silver/status``."""
    return status.where(F.col("device").isNotNull())


def gateway_status(status: DataFrame) -> DataFrame:
    """The gateway's own status rows of ``silver/status`` (no device)."""
    return status.where(F.col("device").isNull() & F.col("gateway").isNotNull())


def horizon(points: DataFrame, status: DataFrame) -> DataFrame:
    """One row, one column ``horizon_ms``: the latest event time of points and device status."""
    times = points.select("event_ms").unionByName(device_status(status).select("event_ms"))
    return times.agg(F.max("event_ms").alias("horizon_ms"))


def _runs_of(events: DataFrame, keys: list[str], up: Column) -> DataFrame:
    """Runs of ``not up`` per ``keys`` in event order: ``keys, start_ms, end_ms, open``.

    A run starts at its first ``not up`` event and ends at the next ``up`` event (open when
    there is none: ``end_ms`` is then its last event).
    """
    order = Window.partitionBy(*keys).orderBy("event_ms", "_tie")
    flagged = events.withColumn("_up", up)
    changed = F.col("_up") != F.lag("_up").over(order)
    runs = flagged.withColumns(
        {
            "next_ms": F.lead("event_ms").over(order),
            "_run": F.sum(F.when(changed, 1).otherwise(0)).over(order),
        }
    )
    last_next = F.max_by("next_ms", F.struct("event_ms", "_tie"))
    return (
        runs.where(~F.col("_up"))
        .groupBy(*keys, "_run")
        .agg(
            F.min("event_ms").alias("start_ms"),
            F.coalesce(last_next, F.max("event_ms")).alias("end_ms"),
            last_next.isNull().alias("open"),
        )
        .drop("_run")
    )


def gateway_outages(
    status: DataFrame,
    horizon_df: DataFrame,
    uplink: DataFrame | None = None,
    alive_window_ms: int = 60_000,
) -> DataFrame:
    """Gateway outages: first ``offline`` to next ``online``, cut at the horizon.

    With the uplink's diagnostics (``uplink``), an ``offline`` the gateway outlived does not
    count: it reported diagnostics before its next ``online``, or its last report (within
    ``alive_window_ms`` before) said ``connected = false`` (the cloud broker published its
    will because the link broke or the broker stopped; that is a link outage).
    """
    events = (
        gateway_status(status)
        .select("gateway", "event_ms", "status")
        .distinct()
        .withColumn("_tie", F.when(F.col("status") == c.STATUS_OFFLINE, 1).otherwise(0))
    )
    if uplink is not None:
        events = events.join(
            _outlived(events, uplink, horizon_df, alive_window_ms),
            ["gateway", "event_ms", "_tie"],
            "left_anti",
        )
    runs = _runs_of(events, ["gateway"], F.col("status") == c.STATUS_ONLINE).crossJoin(horizon_df)
    return runs.where(F.col("start_ms") < F.col("horizon_ms")).select(
        "gateway",
        "start_ms",
        F.when(F.col("open"), F.col("horizon_ms"))
        .otherwise(F.least("end_ms", "horizon_ms"))
        .alias("end_ms"),
        (F.col("open") | (F.col("end_ms") > F.col("horizon_ms"))).alias("open"),
    )


def _outlived(
    events: DataFrame, uplink: DataFrame, horizon_df: DataFrame, alive_window_ms: int
) -> DataFrame:
    """The ``offline`` events (``gateway, event_ms, _tie``) the gateway's reports show it
    outlived (see :func:`gateway_outages`)."""
    # until the next online, not the next event: that may be another copy of the same will
    later = (
        Window.partitionBy("gateway")
        .orderBy("event_ms", "_tie")
        .rowsBetween(1, Window.unboundedFollowing)
    )
    next_online = F.min(F.when(F.col("status") == c.STATUS_ONLINE, F.col("event_ms")))
    offline = (
        events.withColumn("_next", next_online.over(later))
        .where(F.col("status") == c.STATUS_OFFLINE)
        .crossJoin(horizon_df)
        .withColumn("_until", F.coalesce(F.col("_next"), F.col("horizon_ms")))
    )
    reports = uplink.select("gateway", F.col("event_ms").alias("_r_ms"), "connected")
    inside = (F.col("_r_ms") > F.col("event_ms")) & (F.col("_r_ms") < F.col("_until"))
    before = (F.col("_r_ms") <= F.col("event_ms")) & (
        F.col("_r_ms") > F.col("event_ms") - F.lit(alive_window_ms)
    )
    near = offline.join(reports, "gateway").where(inside | before)
    return (
        near.groupBy("gateway", "event_ms", "_tie")
        .agg(
            F.count_if(inside).alias("_inside"),
            F.max_by(F.when(before, F.col("connected")), F.when(before, F.col("_r_ms"))).alias(
                "_last_connected"
            ),
        )
        .where((F.col("_inside") > 0) | ~F.col("_last_connected"))
        .select("gateway", "event_ms", "_tie")
    )


def silence_outages(
    points: DataFrame, horizon_df: DataFrame, params: AvailabilityParams
) -> DataFrame:
    """Outages from missing reports: ``gateway, device, start_ms, end_ms, cause, open``."""
    alive = points.where(F.col("quality") != "bad").select(*DEVICE, "event_ms").distinct()
    order = Window.partitionBy(*DEVICE).orderBy("event_ms")
    nxt = F.lead("event_ms").over(order)
    threshold = F.lit(int(params.expected_interval_ms * params.gap_factor))
    steps = alive.withColumn("next_ms", nxt).crossJoin(horizon_df)
    end = F.coalesce(F.col("next_ms"), F.col("horizon_ms"))
    return steps.where(end - F.col("event_ms") > threshold).select(
        *DEVICE,
        (F.col("event_ms") + F.lit(params.expected_interval_ms)).alias("start_ms"),
        end.alias("end_ms"),
        F.lit("silence").alias("cause"),
        F.col("next_ms").isNull().alias("open"),
    )


def offline_outages(
    status: DataFrame,
    horizon_df: DataFrame,
    shutdown_window_ms: int = AvailabilityParams.shutdown_window_ms,
    points: DataFrame | None = None,
) -> DataFrame:
    """Outages from device ``offline`` events (see the module docstring for which count):
    until the device's next status or its gateway's next ``offline``.

    With ``points``, a run's first status is the start-up one only when the device had not
    reported a point in that run yet (by the gateway's receive time, the clock of the status):
    the bridge publishes it before the first poll.
    """
    devices = device_status(status)
    none = {"status": F.lit(None).cast("string"), "seq": F.lit(None).cast("long")}
    gateway_down = (
        gateway_status(status)
        .where(F.col("status") == c.STATUS_OFFLINE)
        .select("gateway", "event_ms")
        .distinct()
        .join(devices.select(*DEVICE).distinct(), "gateway")
        .withColumns({**none, "_k": F.lit(1)})
    )
    events = (
        devices.select(*DEVICE, "event_ms", "status", "seq")
        .withColumn("_k", F.lit(0))
        .unionByName(gateway_down)
    )
    if points is not None:
        reported = (
            points.where(F.col("received_ms").isNotNull())
            .select(*DEVICE, F.col("received_ms").alias("event_ms"))
            .withColumns({**none, "_k": F.lit(2)})
        )
        events = events.unionByName(reported)
    order = Window.partitionBy(*DEVICE).orderBy("event_ms", "_k", "seq")
    so_far = order.rowsBetween(Window.unboundedPreceding, 0)
    in_run = Window.partitionBy(*DEVICE, "_gwrun").orderBy("event_ms", "_k", "seq")
    ranked = (
        events.withColumn("_gwrun", F.sum((F.col("_k") == 1).cast("int")).over(so_far))
        .withColumns(
            {
                "_nth": F.sum((F.col("_k") == 0).cast("int")).over(
                    in_run.rowsBetween(Window.unboundedPreceding, 0)
                ),
                "_pts": F.sum((F.col("_k") == 2).cast("int")).over(
                    in_run.rowsBetween(Window.unboundedPreceding, 0)
                ),
            }
        )
        .where(F.col("_k") < 2)
    )
    steps = ranked.withColumns(
        {"next_ms": F.lead("event_ms").over(order), "_next_k": F.lead("_k").over(order)}
    ).crossJoin(horizon_df)
    startup = (F.col("_nth") == 1) & (F.col("_pts") == 0)
    shutdown = (F.col("_next_k") == 1) & (
        F.col("next_ms") - F.col("event_ms") <= F.lit(shutdown_window_ms)
    )
    counted = (F.col("_k") == 0) & (F.col("status") == c.STATUS_OFFLINE) & ~startup & ~shutdown
    return steps.where(counted).select(
        *DEVICE,
        F.col("event_ms").alias("start_ms"),
        F.coalesce(F.col("next_ms"), F.greatest(F.col("horizon_ms"), F.col("event_ms"))).alias(
            "end_ms"
        ),
        F.lit("offline").alias("cause"),
        F.col("next_ms").isNull().alias("open"),
    )


def merge_intervals(intervals: DataFrame, keys: list[str]) -> DataFrame:
    """Merge overlapping or touching ``[start_ms, end_ms]`` intervals per ``keys``."""
    order = Window.partitionBy(*keys).orderBy("start_ms", "end_ms")
    earlier = order.rowsBetween(Window.unboundedPreceding, -1)
    prev_end = F.max("end_ms").over(earlier)
    starts = intervals.withColumn(
        "_new", F.when(prev_end.isNull() | (F.col("start_ms") > prev_end), 1).otherwise(0)
    ).withColumn("_island", F.sum("_new").over(order))
    return (
        starts.groupBy(*keys, "_island")
        .agg(
            F.min("start_ms").alias("start_ms"),
            F.max("end_ms").alias("end_ms"),
            F.array_join(F.array_sort(F.collect_set("cause")), "+").alias("cause"),
            F.bool_or("open").alias("open"),
        )
        .drop("_island")
    )


def cut_out(intervals: DataFrame, holes: DataFrame, keys: list[str]) -> DataFrame:
    """``intervals`` (per ``keys``, with ``gateway``) without the parts inside ``holes``
    (``gateway, start_ms, end_ms``, not overlapping each other). A piece that no longer
    reaches the interval's end is not ``open``."""
    hole = holes.select(
        "gateway", F.col("start_ms").alias("_h_start"), F.col("end_ms").alias("_h_end")
    )
    overlap = (F.col("_h_start") < F.col("end_ms")) & (F.col("_h_end") > F.col("start_ms"))
    hit = intervals.join(hole, "gateway").where(overlap)
    ident = [*keys, "start_ms", "end_ms", "cause"]
    order = Window.partitionBy(*ident).orderBy("_h_start")
    rest = [name for name in intervals.columns if name not in ("start_ms", "end_ms", "open")]
    before = hit.select(
        *rest,
        F.greatest("start_ms", F.coalesce(F.lag("_h_end").over(order), F.col("start_ms"))).alias(
            "_s"
        ),
        F.least("end_ms", "_h_start").alias("_e"),
        F.lit(False).alias("open"),
    )
    after = (
        hit.groupBy(*ident, "open")
        .agg(F.max("_h_end").alias("_last"))
        .select(
            *rest,
            F.greatest("start_ms", "_last").alias("_s"),
            F.col("end_ms").alias("_e"),
            "open",
        )
    )
    pieces = before.unionByName(after).where(F.col("_e") > F.col("_s"))
    untouched = intervals.join(hit.select(*ident).distinct(), ident, "left_anti")
    return untouched.unionByName(
        pieces.withColumnsRenamed({"_s": "start_ms", "_e": "end_ms"}).select(*intervals.columns)
    )


def _with_times(df: DataFrame) -> DataFrame:
    return df.withColumns(
        {
            "start_ts": F.timestamp_millis("start_ms"),
            "duration_s": (F.col("end_ms") - F.col("start_ms")) / 1000.0,
            "event_date": date_of_ms(F.col("start_ms")),
        }
    )


def device_outages(
    points: DataFrame,
    status: DataFrame,
    params: AvailabilityParams,
    uplink: DataFrame | None = None,
) -> DataFrame:
    """Merged device outages from silence and offline status, without gateway outages
    (found with the uplink diagnostics ``uplink`` when given, see :func:`gateway_outages`)."""
    edge = horizon(points, status)
    both = silence_outages(points, edge, params).unionByName(
        offline_outages(status, edge, params.shutdown_window_ms, points)
    )
    merged = merge_intervals(both, DEVICE)
    down = gateway_outages(status, edge, uplink, params.alive_window_ms)
    return _with_times(cut_out(merged, down, DEVICE))


def _days(start: Column, end: Column) -> Column:
    return F.explode(F.sequence(F.floor(start / DAY_MS), F.floor((end - F.lit(1)) / DAY_MS)))


def _overlap(start: Column, end: Column, day: Column) -> Column:
    day_start = day * F.lit(DAY_MS)
    return F.least(end, day_start + F.lit(DAY_MS)) - F.greatest(start, day_start)


def _per_day(intervals: DataFrame, seen: DataFrame, name: str) -> DataFrame:
    """Per device and day: the ms of ``intervals`` (joined on ``gateway`` and, if they have
    one, ``device``) inside the device's ``[first_ms, horizon_ms]``, and how many."""
    keys = [k for k in DEVICE if k in intervals.columns]
    clipped = intervals.join(seen, keys).select(
        *DEVICE,
        F.greatest("start_ms", "first_ms").alias("s"),
        F.least("end_ms", "horizon_ms").alias("e"),
    )
    return (
        clipped.where(F.col("e") > F.col("s"))
        .withColumn("day", _days(F.col("s"), F.col("e")))
        .withColumn("_ms", _overlap(F.col("s"), F.col("e"), F.col("day")))
        .groupBy(*DEVICE, "day")
        .agg(F.sum("_ms").alias(name), F.count(F.lit(1)).alias(f"{name}_n"))
    )


def first_signs(points: DataFrame, status: DataFrame) -> DataFrame:
    """``gateway, device, first_ms``: each device's first sign of life."""
    return (
        points.where(F.col("quality") != "bad")
        .select(*DEVICE, "event_ms")
        .unionByName(device_status(status).select(*DEVICE, "event_ms"))
        .groupBy(*DEVICE)
        .agg(F.min("event_ms").alias("first_ms"))
    )


def uptime(
    points: DataFrame,
    status: DataFrame,
    outages: DataFrame,
    gateway_down: DataFrame | None = None,
    first: DataFrame | None = None,
) -> DataFrame:
    """Uptime per device and UTC day between first sign of life and the horizon.

    ``gateway_down``: the gateway outages (computed from ``status`` when None), whose time
    is not observed. ``first``: each device's first sign of life (from ``points`` and
    ``status`` when None; an incremental run passes what it knows from earlier days).
    """
    edge = horizon(points, status)
    if gateway_down is None:
        gateway_down = gateway_outages(status, edge)
    seen = (first_signs(points, status) if first is None else first).crossJoin(edge)
    days = seen.where(F.col("horizon_ms") > F.col("first_ms")).withColumn(
        "day", _days(F.col("first_ms"), F.col("horizon_ms"))
    )
    observed = days.withColumn(
        "observed_ms", _overlap(F.col("first_ms"), F.col("horizon_ms"), F.col("day"))
    )
    down = _per_day(outages, seen, "down_ms")
    unknown = _per_day(gateway_down, seen, "unknown_ms").drop("unknown_ms_n")
    joined = observed.join(down, [*DEVICE, "day"], "left").join(
        unknown, [*DEVICE, "day"], "left"
    )
    down_ms = F.coalesce(F.col("down_ms"), F.lit(0))
    observed_ms = F.col("observed_ms") - F.coalesce(F.col("unknown_ms"), F.lit(0))
    return joined.select(
        *DEVICE,
        (observed_ms / 1000.0).alias("observed_s"),
        (down_ms / 1000.0).alias("down_s"),
        F.when(observed_ms > 0, F.lit(100.0) * (F.lit(1.0) - down_ms / observed_ms)).alias(
            "uptime_pct"
        ),
        F.coalesce(F.col("down_ms_n"), F.lit(0)).alias("outages"),
        F.date_from_unix_date(F.col("day").cast("int")).alias("event_date"),
    )


def link_outages_from_diagnostics(uplink: DataFrame) -> DataFrame:
    """Runs of ``connected = false`` per gateway, ending at the next ``connected = true``."""
    events = uplink.withColumn("_tie", F.struct("epoch", "seq"))
    return _runs_of(events, ["gateway"], F.col("connected")).select(
        "gateway", F.lit("diagnostics").alias("source"), "start_ms", "end_ms", "open"
    )


def link_outages_from_delay(
    messages: DataFrame, link_delay_ms: int, min_messages: int = 1
) -> DataFrame:
    """Runs of at least ``min_messages`` messages landed more than ``link_delay_ms`` after
    the gateway received them (a lone late message is a redelivery, not an outage)."""
    timed = messages.where(F.col("received_ms").isNotNull())
    order = Window.partitionBy("gateway").orderBy("received_ms", "epoch", "seq")
    delayed = (F.col("ingest_ms") - F.col("received_ms")) > F.lit(link_delay_ms)
    flagged = timed.withColumn("_delayed", delayed)
    changed = F.col("_delayed") != F.lag("_delayed").over(order)
    runs = flagged.withColumn("_run", F.sum(F.when(changed, 1).otherwise(0)).over(order))
    return (
        runs.where(F.col("_delayed"))
        .groupBy("gateway", "_run")
        .agg(
            F.min("received_ms").alias("start_ms"),
            F.min("ingest_ms").alias("end_ms"),
            F.count(F.lit(1)).alias("_messages"),
        )
        .where(F.col("_messages") >= min_messages)
        .select(
            "gateway",
            F.lit("ingest_delay").alias("source"),
            "start_ms",
            "end_ms",
            F.lit(False).alias("open"),
        )
    )


def link_outages(uplink: DataFrame, messages: DataFrame, params: AvailabilityParams) -> DataFrame:
    """Link outages from both sources, merged where they overlap (``source`` names both)."""
    both = link_outages_from_diagnostics(uplink).unionByName(
        link_outages_from_delay(messages, params.link_delay_ms, params.link_min_messages)
    )
    merged = merge_intervals(both.withColumnRenamed("source", "cause"), ["gateway"])
    return _with_times(merged.withColumnRenamed("cause", "source"))


# --- the job ----------------------------------------------------------------------------------


def recompute_from(touched: list[date], existing: dict[str, DataFrame]) -> date:
    """The first day to recompute: the first touched day, or the start day of an outage of
    ``existing`` (the event tables) that is open or reaches into it."""
    first = min(touched)
    cut = (first - date(1970, 1, 1)).days * DAY_MS
    starts = [
        frame.where(F.col("open") | (F.col("end_ms") >= F.lit(cut)))
        .agg(F.min("start_ms"))
        .first()
        for frame in existing.values()
    ]
    earliest = min([row[0] for row in starts if row is not None and row[0] is not None] or [cut])
    return min(first, date(1970, 1, 1) + timedelta(days=earliest // DAY_MS))


def _since(frame: DataFrame, day: date) -> DataFrame:
    return frame.where(F.col("event_date") >= F.lit(day))


def _before(frame: DataFrame, day: date) -> DataFrame:
    return frame.where(F.col("event_date") < F.lit(day))


def run(spark: SparkSession, root: str, out: str, params: AvailabilityParams) -> dict[str, Any]:
    """Read silver, write gold outages, gateway outages, availability and link outages.

    Only the days from :func:`recompute_from` on are recomputed, from the points, uplink
    diagnostics and ledger rows of those days and the day before (the status table, small,
    is read whole); everything when the job never ran with these parameters, after
    ``silver --full``, or with ``params.full``.
    """
    del root
    key = repr(replace(params, full=False))
    touched = None if params.full else mf.touched_since(spark, out, "availability", key)
    status = tables.read_table(spark, out, "status")
    points = tables.read_table(spark, out, "points")
    uplink = tables.read_table(spark, out, "uplink_diagnostics")
    messages = tables.read_table(spark, out, "messages")
    since: date | None = None
    if touched is not None and not touched:  # nothing new since the last run
        mf.mark_consumed(spark, out, "availability", key, full=False)
        return {**_counts(spark, out), "recomputed_days": 0}
    if touched is not None:
        existing = {name: tables.read_table(spark, out, name) for name in EVENT_TABLES}
        since = recompute_from(touched, existing)
        read_from = since - timedelta(days=1)
        points, uplink, messages = (_since(f, read_from) for f in (points, uplink, messages))
    points = points.cache()
    try:
        edge = horizon(points, status)
        gw = _with_times(gateway_outages(status, edge, uplink, params.alive_window_ms))
        outages = device_outages(points, status, params, uplink)
        link = link_outages(uplink, messages, params)
        first = None
        if since is not None:
            old = tables.read_table(spark, out, "availability")
            # held in the driver (one row per device): the table is rewritten below
            earlier = spark.createDataFrame(
                _before(old, since)
                .groupBy(*DEVICE)
                .agg(F.min("event_date").alias("_d"))
                .select(*DEVICE, (F.unix_date("_d").cast("long") * DAY_MS).alias("first_ms"))
                .collect(),
                "gateway string, device string, first_ms long",
            )
            first = (
                first_signs(points, status)
                .unionByName(earlier)
                .groupBy(*DEVICE)
                .agg(F.min("first_ms").alias("first_ms"))
            )
            frames = {"outages": outages, "gateway_outages": gw, "link_outages": link}
            for name, frame in frames.items():
                old = _before(tables.read_table(spark, out, name), since)
                kept = tables.held_in_driver(spark, old)
                frames[name] = kept.unionByName(
                    _since(tables.conform(frame, tables.TABLES[name].schema), since)
                )
            outages, gw, link = frames["outages"], frames["gateway_outages"], frames["link_outages"]
        outages = outages.cache()
        gw = gw.cache()
        tables.write_table(outages, out, "outages")
        tables.write_table(gw, out, "gateway_outages")
        tables.write_table(link, out, "link_outages")
        days = uptime(points, status, outages, gw, first)
        if since is None:
            tables.write_table(days, out, "availability", replace_whole=True)
        else:
            tables.write_table(_since(days, since), out, "availability")
        outages.unpersist()
        gw.unpersist()
    finally:
        points.unpersist()
    mf.mark_consumed(spark, out, "availability", key, full=since is None)
    recomputed: Any = "all" if since is None else (max(touched or [since]) - since).days + 1
    return {**_counts(spark, out), "recomputed_days": recomputed}


def _counts(spark: SparkSession, out: str) -> dict[str, int]:
    return {
        "device_outages": tables.read_table(spark, out, "outages").count(),
        "gateway_outages": tables.read_table(spark, out, "gateway_outages").count(),
        "link_outages": tables.read_table(spark, out, "link_outages").count(),
    }
