"""The driver interface: what a device family (Modbus, serial, OPC UA) contributes to the bridge.

How this works: a family is two things.

- Its **configuration model**: one pydantic model per device, in a list of its own under
  `[bridge]` (`devices`, `serial`, `opcua`). Every device model has a `name`, an `enabled`
  flag (a disabled device is checked like any other, but the bridge never opens it) and
  describes its points with `describe()` -> `DeviceDescription` (neutral `PointInfo`: data
  type, unit, writable, range, enum labels), which is all that Sparkplug (metric datatypes)
  and Home Assistant discovery (entity kinds) need: neither knows a family.
- Its **runtime**, a `Family` object per bridge: it opens the shared resources a family may
  have (Modbus buses, one lock per line) and one `Device` per configured device. A `Device`
  runs as one supervised task of the bridge (bridge/runtime.py), publishes its points through
  `DeviceContext.publish` with the payloads and deadband/report/heartbeat rules of
  bridge/report.py (one `Reporter` per point), says online/offline through
  `DeviceContext.status`, keeps `Counters` for the diagnostics and the status page, and takes
  writes (`write`, raising `WriteError` with the reason for `.../set/result`).

The runtime treats every family alike: start, stop, restart on crash, reload (a device is
kept when its own configuration and its family's `environment` of it are unchanged), writes
from `<prefix>/<device>/<point>/set`, status, diagnostics, observers.

Pure: dataclasses and protocols; no I/O.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol, TypeVar

from bridge.report import Reporter

Publish = Callable[[str, bytes], None]  # (topic, payload) of a point value
StatusChange = Callable[[str, bool], None]  # (device name, online)
SettingsT = TypeVar("SettingsT")  # a family's device configuration model
BridgeT_contra = TypeVar("BridgeT_contra", contravariant=True)  # the `[bridge]` model
# The neutral data types a point may have (what Sparkplug and Home Assistant map from).
DATATYPES = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
             "float32", "float64", "string", "datetime", "json")
NUMBERS = frozenset(DATATYPES[1:11])  # int8 ... float64


class WriteError(Exception):
    """A write was refused or failed; the message goes to `.../set/result`."""


def written_time(value: object) -> datetime:
    """A date and time a write gives as ISO 8601 (`2026-11-27T14:03:00Z`); naive when it names
    no offset (the family decides whose clock that is); WriteError when it is none."""
    if not isinstance(value, str):
        raise WriteError("expected an ISO 8601 date and time")
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise WriteError(f"{value!r} is not an ISO 8601 date and time") from None


@dataclass(slots=True)
class Counters:
    """Cumulative per-device counters (the diagnostics payload and the status page).

    Each family counts what it has: a Modbus transaction is a request, a serial frame is a
    request, an OPC UA read or data change notification is a request; `timeouts` are answers
    that did not come (or lost connections), `crc_errors` answers that did not decode,
    `exceptions` answers that said no.
    """

    requests: int = 0
    timeouts: int = 0
    crc_errors: int = 0
    exceptions: int = 0
    stale_frames: int = 0
    latency_sum: float = 0.0  # since the last `take_latency`
    latency_count: int = 0

    def take_latency(self) -> float | None:
        """Mean latency in ms since the last call (None when nothing succeeded)."""
        if not self.latency_count:
            return None
        mean = self.latency_sum / self.latency_count * 1000.0
        self.latency_sum, self.latency_count = 0.0, 0
        return round(mean, 3)


@dataclass(frozen=True, slots=True)
class PointInfo:
    """What a point is, without its family: for Sparkplug metrics and Home Assistant entities.

    `datatype` is one of DATATYPES (the value as published: a scaled Modbus integer is a float,
    an enum a string with its labels in `options`); `minimum` / `maximum` bound a writable
    number (None: unbounded) and `integral` says it only takes whole numbers; `label` is the
    name a person sees (Home Assistant's entity name), the point's name when None.
    """

    name: str
    datatype: str
    unit: str | None = None
    writable: bool = False
    options: tuple[str, ...] | None = None
    minimum: float | None = None
    maximum: float | None = None
    integral: bool = False
    device_class: str | None = None
    state_class: str | None = None
    label: str | None = None

    def check_write(self, value: object) -> None:
        """Raise ValueError, with the reason, for a value a write to this point would refuse
        whatever its device answers: read-only, not one of its labels, not a number, outside
        [minimum, maximum], or not whole where the point only takes whole numbers.

        Lets a command of several values (a Sparkplug DCMD) be refused whole before any write.
        """
        if not self.writable:
            raise ValueError("read-only")
        if self.options is not None:
            if value not in self.options:
                raise ValueError(f"{value!r} is not one of {list(self.options)}")
            return
        if self.datatype == "bool":
            if not isinstance(value, bool):
                raise ValueError(f"{value!r} is not a bool")
            return
        if self.datatype not in NUMBERS:  # strings, dates, JSON: the device decides
            return
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(f"{value!r} is not a number")
        if (self.minimum is not None and value < self.minimum) or (
                self.maximum is not None and value > self.maximum):
            low = "-inf" if self.minimum is None else f"{self.minimum:g}"
            high = "inf" if self.maximum is None else f"{self.maximum:g}"
            raise ValueError(f"{value:g} is outside [{low}, {high}]")
        if self.integral and value != int(value):
            raise ValueError(f"{value:g} is not a whole number")


@dataclass(frozen=True, slots=True)
class DeviceDescription:
    """A device's model text (for Home Assistant) and its points in configuration order."""

    model: str
    points: tuple[PointInfo, ...] = field(default_factory=tuple)


class DeviceSettings(Protocol):
    """The configuration model of one device, of any family."""

    @property
    def name(self) -> str:
        """The device name (one topic level)."""

    @property
    def enabled(self) -> bool:
        """False: kept in the configuration (and checked) but never opened."""

    def describe(self) -> DeviceDescription:
        """The device's points, family-neutral."""


@dataclass(frozen=True, slots=True)
class DeviceContext:
    """What the bridge gives every device it opens."""

    prefix: str
    publish: Publish
    status: StatusChange
    wallclock: Callable[[], float] = time.time

    def topic(self, device: str, point: str) -> str:
        """`<prefix>/<device>/<point>`."""
        return f"{self.prefix}/{device}/{point}"


class Device(Protocol):
    """One running device of any family."""

    online: bool | None  # None: not known yet (nothing published since start)
    counters: Counters

    def reporters(self) -> Iterable[Reporter]:
        """The reporters of its points (their last values feed the status page)."""

    async def run(self) -> None:
        """Read and publish until cancelled; an exception is a crash (restarted)."""

    async def write(self, point: str, value: object) -> tuple[object, list[int] | None]:
        """Write a point: what was written, and the registers it took (None when the family
        has none); WriteError with the reason."""

    def adopt(self, previous: Device) -> None:
        """Take over what a restarted device (reload) should remember from its predecessor."""

    def close(self) -> None:
        """Release what the device holds once its task has ended (no I/O that may block)."""


class Family(Protocol[SettingsT, BridgeT_contra]):
    """A device family's runtime side: its devices and the resources they share."""

    kind: str  # "modbus", "serial", "opcua": log lines and the status page

    def configs(self, bridge: BridgeT_contra) -> Sequence[SettingsT]:
        """This family's devices in a bridge configuration."""

    def environment(self, device: SettingsT, bridge: BridgeT_contra) -> object:
        """What else a device depends on (a Modbus device: its bus): a reload that changes it
        restarts the device even when its own configuration is unchanged."""

    def configure(self, bridge: BridgeT_contra) -> None:
        """Open, keep or close the shared resources for a (new) configuration."""

    def open(self, device: SettingsT, context: DeviceContext) -> Device:
        """A device ready to `run`."""

    def close(self) -> None:
        """Close every shared resource (the bridge stops or starts from scratch)."""


# -- the optional side a tool (the web console) uses: probe, browse, discover -------------------


@dataclass(frozen=True, slots=True)
class Found:
    """One row of an `Exploration`: a configured point read once, or something the device has
    (a node browsed, an object discovered) with the point table that would read it (`point`,
    the keys of the family's point model: the console turns it into a point row)."""

    name: str  # the point's name (found: a name suggested for it)
    where: str  # its address as the family writes it: a register, a NodeId, `DB1.DBD14`
    value: object = None
    unit: str | None = None
    quality: str | None = None
    error: str | None = None  # why it did not answer
    detail: str = ""  # e.g. the data type the device reports
    point: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class Exploration:
    """What a family's `explore` learnt of one device, nothing written."""

    lines: tuple[str, ...] = ()  # what the device says of itself: endpoints, PDU size, plan
    points: tuple[Found, ...] = ()  # every configured point, read once
    found: tuple[Found, ...] = ()  # what browsing or discovery found besides


DeviceT_contra = TypeVar("DeviceT_contra", contravariant=True)


class Explorer(Protocol[DeviceT_contra, BridgeT_contra]):
    """A family that can probe, browse or discover a device before it is saved (optional:
    a family without `explore` still runs; the console then offers no probe for it)."""

    async def explore(self, device: DeviceT_contra, bridge: BridgeT_contra) -> Exploration:
        """Read every point of `device` once (no retries, nothing written) and list what else
        the device offers where the family can tell; `bridge` is the configuration the device
        is part of (a Modbus device's bus is there). An exception is the device's answer."""


def explorer(family: object) -> Explorer[Any, Any] | None:
    """`family` as an `Explorer`, or None when it has no `explore`."""
    return family if callable(getattr(family, "explore", None)) else None  # type: ignore[return-value]
