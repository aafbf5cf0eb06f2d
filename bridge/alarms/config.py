"""The `[alarms]` section: alarm definitions per point (pydantic v2, pure).

How this works: `AlarmsConfig.rules` lists one `AlarmDefinition` per alarm. Each names its
point as `device/point` (a device alone for `kind = "offline"`), its kind and the settings that
kind needs; a setting another kind needs is refused rather than ignored, so a typo'd kind
does not silently make a limit useless. Whether the point exists is checked where the bridge's
devices are known too (outpost/config.py, `unknown_points`).

Kinds: `high` / `high-high` (value above `limit`), `low` / `low-low` (below `limit`), each
returning to normal only past `limit` -/+ `deadband`; `rate` (|change| per second over
`window` s above `limit`); `stale` (no new value for `stale_after` s); `offline` (the device's
status is offline); `fault` (a boolean point that is true, or a number that is not 0).
`on_delay` / `off_delay`: the condition must hold (or be gone) that many seconds first.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from gateway.base.settings import Section

#: local topics: `alarms/<name>/state` (retained), `.../event` (QoS 1), `.../ack`, `.../shelve`
ALARMS_ROOT = "alarms"
LIMIT_KINDS = ("high", "high-high", "low", "low-low")
KINDS = (*LIMIT_KINDS, "rate", "stale", "offline", "fault")
SEVERITIES = ("low", "medium", "high", "critical")

Kind = Literal["high", "high-high", "low", "low-low", "rate", "stale", "offline", "fault"]
Severity = Literal["low", "medium", "high", "critical"]
AlarmName = Annotated[str, Field(pattern=r"^[A-Za-z0-9_.-]{1,64}$",
                                 description="one topic level: letters, digits, '_', '.', '-'")]
Seconds = Annotated[float, Field(ge=0, le=86_400)]


class AlarmDefinition(Section):
    """One alarm on one point (or device)."""

    name: AlarmName
    point: str = Field(description="`device/point` (a device alone for kind = \"offline\")")
    kind: Kind = Field(description="high, high-high, low, low-low, rate, stale, offline, fault")
    limit: float | None = Field(
        default=None, description="the limit (high/low kinds), or the rate per second (rate)")
    deadband: Annotated[float, Field(ge=0)] = Field(
        default=0.0, description="a limit alarm clears only this far back inside the limit")
    on_delay: Seconds = Field(default=0.0, description="seconds the condition holds first")
    off_delay: Seconds = Field(default=0.0, description="seconds it is gone before clearing")
    window: Annotated[float, Field(gt=0, le=86_400)] = Field(
        default=10.0, description="rate: seconds the rate of change is measured over")
    stale_after: Annotated[float, Field(gt=0, le=86_400 * 7)] | None = Field(
        default=None, description="stale: seconds without a new value")
    severity: Severity = "medium"
    description: str = Field(default="", max_length=200)

    @field_validator("point")
    @classmethod
    def _point_shape(cls, value: str) -> str:
        parts = value.split("/")
        if not 1 <= len(parts) <= 2 or not all(parts) or any(c in value for c in "+#"):
            raise ValueError(f"{value!r}: expected 'device/point' (or 'device' for offline)")
        return value

    @model_validator(mode="after")
    def _settings_fit_kind(self) -> AlarmDefinition:
        kind = self.kind
        if self.device_only and kind != "offline":
            raise ValueError(f"point: {self.point!r} names a device: kind {kind!r} watches a "
                             "point ('device/point')")
        if kind in (*LIMIT_KINDS, "rate") and self.limit is None:
            what = "the rate per second" if kind == "rate" else "the limit"
            raise ValueError(f"limit: required for kind {kind!r} ({what})")
        if kind not in (*LIMIT_KINDS, "rate") and self.limit is not None:
            raise ValueError(f"limit: kind {kind!r} has no limit")
        if kind == "rate" and self.limit is not None and self.limit <= 0:
            raise ValueError("limit: a rate alarm's limit (per second) must be above 0")
        if kind == "stale" and self.stale_after is None:
            raise ValueError("stale_after: required for kind 'stale' (seconds without a value)")
        if kind != "stale" and self.stale_after is not None:
            raise ValueError(f"stale_after: only for kind 'stale' (this one is {kind!r})")
        if self.deadband and kind not in LIMIT_KINDS:
            raise ValueError(f"deadband: only for the limit kinds {', '.join(LIMIT_KINDS)}")
        return self

    @property
    def device_only(self) -> bool:
        return "/" not in self.point

    @property
    def device(self) -> str:
        return self.point.split("/", 1)[0]

    @property
    def point_name(self) -> str | None:
        return None if self.device_only else self.point.split("/", 1)[1]


class AlarmsConfig(Section):
    """The `[alarms]` section: `[[alarms.rules]]` entries."""

    journal: Annotated[int, Field(ge=16, le=100_000)] = Field(
        default=1000, description="transitions kept in the state directory's journal")
    rules: list[AlarmDefinition] = Field(default_factory=list)

    @field_validator("rules")
    @classmethod
    def _unique_names(cls, rules: list[AlarmDefinition]) -> list[AlarmDefinition]:
        seen: dict[str, int] = {}
        for index, rule in enumerate(rules):
            if rule.name in seen:
                raise ValueError(f"{index} {rule.name!r}: the name is already rules."
                                 f"{seen[rule.name]}'s")
            seen[rule.name] = index
        return rules

    def unknown_points(self, points: dict[str, set[str]]) -> list[str]:
        """`rules.<i>.point: ...` for each alarm whose device or point is not configured
        (`points`: device name -> its point names)."""
        problems = []
        for index, rule in enumerate(self.rules):
            known = points.get(rule.device)
            if known is None:
                problems.append(f"rules.{index}.point: {rule.point!r}: no device "
                                f"{rule.device!r} (have {sorted(points)})")
            elif rule.point_name is not None and rule.point_name not in known:
                problems.append(f"rules.{index}.point: {rule.point!r}: device {rule.device!r} "
                                f"has no point {rule.point_name!r} (has {sorted(known)})")
        return problems
