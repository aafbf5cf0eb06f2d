"""The rows just before a cut: what an incremental job needs from the days it does not redo.

How this works: ``quality`` and ``health`` recompute from a *cut* on (the first day that new
silver data touched), but a series' result after the cut depends on its rows before it: a
cumulative counter's previous value, the start of a flat or out-of-range run that goes on
past the cut. :func:`latest_before` finds the latest row per series before the cut
(optionally among the rows matching a condition): first in the day before the cut (one
partition, where nearly every series has a row), then, only for the series not found there,
in everything older (a series that was quiet for a day, or a new one). The older read is
skipped when every series was found, so a run's cost follows the new data.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import date, timedelta

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F  # noqa: N812

DAY_MS = 86_400_000
#: the order of the rows of a series (event time, then the id: ties are broken as everywhere)
ORDER = ("event_ms", "epoch", "seq")


def day_start_ms(day: date) -> int:
    """Epoch milliseconds of a UTC day's midnight."""
    return (day - date(1970, 1, 1)).days * DAY_MS


def _latest(frame: DataFrame, keys: list[str]) -> DataFrame:
    order = Window.partitionBy(*keys).orderBy(*[F.col(name).desc() for name in ORDER])
    return frame.withColumn("_rank", F.row_number().over(order)).where("_rank = 1").drop("_rank")


def latest_before(
    frame: DataFrame,
    wanted: DataFrame,
    keys: list[str],
    cut: date,
    where: Column | None = None,
) -> DataFrame:
    """Per key of ``wanted``, the latest row of ``frame`` (by :data:`ORDER`) with
    ``event_date < cut`` and ``where``; keys that have none are absent.

    ``frame`` is a silver table partitioned by ``event_date``: the day before ``cut`` is read
    first, older days only for the keys missing there (one small Spark job decides).
    """
    before = frame.where(F.col("event_date") < F.lit(cut))
    if where is not None:
        before = before.where(where)
    near_from = F.lit(cut - timedelta(days=1))
    near = _latest(
        before.where(F.col("event_date") >= near_from).join(wanted, keys, "left_semi"), keys
    )
    missing = wanted.join(near, keys, "left_anti")
    if missing.isEmpty():
        return near
    far = before.where(F.col("event_date") < near_from).join(missing, keys, "left_semi")
    return near.unionByName(_latest(far, keys))


def dates_of(frame: DataFrame) -> list[date]:
    """The distinct ``event_date`` values of a frame, sorted (a small collect)."""
    return sorted(row[0] for row in frame.select("event_date").distinct().collect())


def in_days(days: Iterable[date]) -> Column:
    """``event_date`` is one of ``days``."""
    return F.col("event_date").isin(list(days))
