"""The `[history]` section: which point values are kept on the gateway, how long, how big.

Defaults fit a 16 GB card for a year of 1,000 points at 1 s (docs/history.md has the sums):
raw samples 7 days, one-minute aggregates 30 days, 15-minute aggregates 400 days, and at most
`max_mb` (6 GiB) of file; a `[[history.points]]` rule changes any of that for the points its glob
pattern matches (the first matching rule wins, unset fields keep the section's value).
"""

from __future__ import annotations

import fnmatch
from typing import Annotated

from pydantic import Field, model_validator

from gateway.base.settings import Section

Days = Annotated[float, Field(gt=0, le=36_500, json_schema_extra={"unit": "d"})]
DAY_MS = 86_400_000


class HistoryRule(Section):
    """The history of the points whose `device/point` name matches `match` (a glob)."""

    match: str = Field(min_length=1, description="glob on device/point, e.g. 'meter*/energy'")
    enabled: bool | None = Field(default=None, description="false: keep no history of them")
    raw_days: Days | None = Field(default=None, description="keep raw samples this long")
    minute_days: Days | None = Field(default=None, description="keep 1-minute aggregates")
    quarter_days: Days | None = Field(default=None, description="keep 15-minute aggregates")


class Retention:
    """How long one point's history is kept at each resolution (milliseconds), or off."""

    __slots__ = ("enabled", "minute_ms", "quarter_ms", "raw_ms")

    def __init__(self, enabled: bool, raw_days: float, minute_days: float,
                 quarter_days: float) -> None:
        self.enabled = enabled
        self.raw_ms = int(raw_days * DAY_MS)
        self.minute_ms = int(minute_days * DAY_MS)
        self.quarter_ms = int(quarter_days * DAY_MS)


class HistoryConfig(Section):
    """Point history in `<state_dir>/history.db` (docs/history.md)."""

    enabled: bool = Field(default=True, description="keep the history of every point value")
    flush_interval: Annotated[float, Field(ge=1, le=600)] = Field(
        default=30.0, description="seconds between commits (a power cut loses at most this "
        "much history; longer: fewer bytes written to flash)")
    compact_interval: Annotated[float, Field(ge=10, le=3600)] = Field(
        default=600.0, description="seconds between folding the recent samples into per-point "
        "blocks and aggregates (and applying retention)")
    raw_days: Days = Field(default=7.0, description="keep raw samples this long")
    minute_days: Days = Field(default=30.0, description="keep 1-minute min/max/mean this long")
    quarter_days: Days = Field(default=400.0, description="keep 15-minute min/max/mean this long")
    max_mb: Annotated[int, Field(ge=1, le=1 << 24)] = Field(
        default=6144, description="the file's live size cap in MiB: over it the oldest raw "
        "blocks, then 1-minute, then 15-minute aggregates go first")
    points: list[HistoryRule] = Field(default_factory=list,
                                      description="per point or pattern: first match wins")

    @model_validator(mode="after")
    def _coarser_lives_longer(self) -> HistoryConfig:
        if not self.raw_days <= self.minute_days <= self.quarter_days:
            raise ValueError("raw_days <= minute_days <= quarter_days: a coarser resolution is "
                             "kept at least as long as a finer one")
        return self

    def retention(self, name: str) -> Retention:
        """The retention of point `name` (`device/point`): its first matching rule over the
        section's values."""
        for rule in self.points:
            if fnmatch.fnmatchcase(name, rule.match):
                return Retention(
                    self.enabled if rule.enabled is None else rule.enabled,
                    rule.raw_days or self.raw_days, rule.minute_days or self.minute_days,
                    rule.quarter_days or self.quarter_days)
        return Retention(self.enabled, self.raw_days, self.minute_days, self.quarter_days)
