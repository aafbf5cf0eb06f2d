"""What a running gateway is doing: one snapshot behind `outpost status`, `/status`, `/metrics`
and the systemd `STATUS=` line.

How this works: a `StatusBoard` reads the broker (clients, sessions, counters, queues) at the
moment it is asked (`collect`) and adds one section per *provider*. A provider is any object
with a `status()` method returning a JSON-able mapping, or None while it has nothing to say
(see `StatusProvider`); the composition root registers them by section name:

    board.add_provider("store", store)      # size, commit figures
    board.add_provider("devices", bridge)   # see DevicesSection
    board.add_provider("uplink", uplink)    # see UplinkSection (the $SYS/outpost/uplink JSON)

Without a registered "devices" or "uplink" provider the board still fills those sections from
the documented topics (docs/message-format.md) through one in-process link, `TopicWatcher`:
`<prefix>/<device>/status`, `<prefix>/<device>/<point>`, `<prefix>/<device>/diagnostics` and
`$SYS/outpost/uplink`. So the status page works with any bridge or uplink that keeps the
message contract, and a component that knows more registers a provider that replaces it.

`sample()` is called at a fixed interval (`[status] history_interval`): it computes message
rates and appends the numeric values of every device point, the uplink backlog and the message
rate to small ring buffers (`History`, `[status] history` samples each), which the status page
draws as sparklines. Everything is bounded: devices, points per device and series are capped.

No I/O here and no clock reads: the clocks are passed in (the loop's monotonic time for ages
inside the broker, the wall clock for timestamps shown to people).
"""

from __future__ import annotations

import json
import logging
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, TypedDict, runtime_checkable

from gateway.broker.core.message import Message
from gateway.broker.engine.broker import Broker
from gateway.broker.engine.links import Link
from gateway.broker.engine.sys_topics import VERSION

log = logging.getLogger("outpost.status")

WATCHER_CLIENT_ID = "$outpost-status"
UPLINK_TOPIC = "$SYS/outpost/uplink"
MAX_DEVICES = 256
MAX_POINTS = 256  # per device
MAX_SERIES = 2048
MAX_CLIENTS_LISTED = 200
_PROTOCOLS = {3: "3.1", 4: "3.1.1", 5: "5.0"}
_ERROR_COUNTERS = ("timeouts", "crc_errors", "exceptions")


# -- the provider contract ---------------------------------------------------------------------


@runtime_checkable
class StatusProvider(Protocol):
    """A part of the gateway that reports one section of the status.

    `status()` is called on the event loop at every `/status` or `/metrics` request, every
    `outpost status` and every history sample (a few times a minute): it must be cheap and must
    not block (no disk or network I/O beyond a stat). Return a JSON-able mapping, or None while
    the part is absent or idle (the section is then left out). An exception is logged and shown
    as `{"error": "..."}` in that section; it never breaks the status of the rest.
    """

    def status(self) -> Mapping[str, Any] | None: ...


class PointStatus(TypedDict, total=False):
    """One device point: its latest value."""

    value: float | int | str | bool | None
    unit: str | None
    quality: str  # good | uncertain | bad
    ts: int  # device-side epoch ms
    age_s: float | None  # seconds since the gateway got it


class DeviceStatus(TypedDict, total=False):
    """One device of the bridge."""

    name: str  # required
    online: bool | None  # None: not polled yet
    last_value_age_s: float | None
    errors: int  # timeouts + CRC errors + exception responses
    requests: int
    counters: dict[str, Any]  # the raw diagnostics counters
    points: dict[str, PointStatus]


class DevicesSection(TypedDict, total=False):
    """The "devices" section (the bridge's provider returns this)."""

    devices: list[DeviceStatus]  # required
    online: int  # filled in by the board when left out
    offline: int


class UplinkSection(TypedDict, total=False):
    """The "uplink" section: the `$SYS/outpost/uplink` JSON of docs/message-format.md."""

    connected: bool
    backlog_messages: int
    backlog_bytes: int
    oldest_age_s: float | None
    dropped: int
    drain_rate: float  # messages/s being acknowledged by the cloud
    eta_s: float | None  # backlog / drain rate
    remotes: list[dict[str, Any]]


class StoreSection(TypedDict, total=False):
    """The "store" section."""

    path: str
    durability: str
    size_bytes: int  # database + WAL file
    wal_bytes: int
    commits: int
    store_full_events: int


# -- history -----------------------------------------------------------------------------------


class History:
    """Ring buffers of (wall time, value) per series, `size` samples each."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.series: dict[str, deque[tuple[float, float]]] = {}

    def record(self, key: str, t: float, value: float) -> None:
        ring = self.series.get(key)
        if ring is None:
            if len(self.series) >= MAX_SERIES:
                return
            ring = self.series[key] = deque(maxlen=self.size)
        ring.append((round(t, 3), value))

    def export(self) -> dict[str, list[list[float]]]:
        return {key: [[t, v] for t, v in ring] for key, ring in self.series.items()}


# -- the topic watcher -------------------------------------------------------------------------


@dataclass
class _Point:
    value: Any = None
    unit: str | None = None
    quality: str | None = None
    ts: int | None = None
    received: float = 0.0


@dataclass
class _Device:
    name: str
    online: bool | None = None
    points: dict[str, _Point] = field(default_factory=dict)
    counters: dict[str, Any] = field(default_factory=dict)
    last_value: float | None = None


class TopicWatcher:
    """Devices and uplink as the documented topics show them, through one in-process link."""

    def __init__(self, prefix: str, wallclock: Callable[[], float]) -> None:
        self.prefix = prefix
        self.wallclock = wallclock
        self.devices: dict[str, _Device] = {}
        self.uplink: dict[str, Any] | None = None
        self.ignored = 0
        self.link: Link | None = None

    def attach(self, broker: Broker, clock: Callable[[], float]) -> None:
        self.link = Link(broker, WATCHER_CLIENT_ID, clock, self.on_message)
        self.link.subscribe(f"{self.prefix}/+/+", qos=0)
        self.link.subscribe(UPLINK_TOPIC, qos=0)

    def close(self) -> None:
        if self.link is not None:
            self.link.close()
            self.link = None

    def on_message(self, message: Message, qos: int, retain: bool) -> None:
        topic = message.topic
        if topic == UPLINK_TOPIC:
            data = _json_object(message.payload)
            if data is not None:
                self.uplink = data
            return
        if not topic.startswith(self.prefix + "/"):
            return
        parts = topic[len(self.prefix) + 1:].split("/")
        if len(parts) != 2 or not all(parts):
            return
        name, leaf = parts
        device = self.devices.get(name)
        if device is None:
            if len(self.devices) >= MAX_DEVICES:
                self.ignored += 1
                return
            device = self.devices[name] = _Device(name)
        if leaf == "status":
            text = bytes(message.payload).strip().lower()
            device.online = True if text == b"online" else False if text == b"offline" else None
        elif leaf == "diagnostics":
            data = _json_object(message.payload)
            if data is not None:
                device.counters = data
        else:
            self._point(device, leaf, message.payload)

    def _point(self, device: _Device, name: str, payload: bytes) -> None:
        point = device.points.get(name)
        if point is None:
            if len(device.points) >= MAX_POINTS:
                self.ignored += 1
                return
            point = device.points[name] = _Point()
        data = _json_object(payload)
        if data is None:  # not the JSON of the contract: keep the text
            point.value, point.unit, point.quality, point.ts = _text(payload), None, None, None
        else:
            unit = data.get("unit")
            ts = data.get("ts")
            quality = data.get("quality")
            point.value = data.get("value")
            point.unit = unit if isinstance(unit, str) else None
            point.quality = quality if isinstance(quality, str) else None
            point.ts = ts if isinstance(ts, int) else None
        point.received = device.last_value = self.wallclock()

    def devices_section(self) -> DevicesSection | None:
        if not self.devices:
            return None
        wall = self.wallclock()
        devices: list[DeviceStatus] = []
        for device in sorted(self.devices.values(), key=lambda d: d.name):
            counters = device.counters
            errors = sum(int(counters.get(k) or 0) for k in _ERROR_COUNTERS)
            entry: DeviceStatus = {
                "name": device.name,
                "online": device.online,
                "last_value_age_s": None if device.last_value is None
                else round(max(0.0, wall - device.last_value), 1),
                "errors": errors,
                "points": {
                    name: {
                        "value": p.value, "unit": p.unit, "quality": p.quality or "",
                        "ts": p.ts or 0, "age_s": round(max(0.0, wall - p.received), 1),
                    }
                    for name, p in sorted(device.points.items())
                },
            }
            if counters:
                entry["requests"] = int(counters.get("requests") or 0)
                entry["counters"] = dict(counters)
            devices.append(entry)
        return {"devices": devices}

    def uplink_section(self) -> dict[str, Any] | None:
        return self.uplink


def _json_object(payload: bytes) -> dict[str, Any] | None:
    try:
        data = json.loads(payload)
    except (ValueError, UnicodeDecodeError):
        return None
    return data if isinstance(data, dict) else None


def _text(payload: bytes) -> str:
    return bytes(payload[:64]).decode("utf-8", errors="replace")


# -- the board ---------------------------------------------------------------------------------


class StatusBoard:
    """Collects the status of the broker and of every provider."""

    def __init__(
        self,
        broker: Broker,
        clock: Callable[[], float],
        wallclock: Callable[[], float],
        history: int = 120,
        sample_interval: float = 5.0,
        listeners: list[str] | None = None,
    ) -> None:
        self.broker = broker
        self.sample_interval = sample_interval
        self.clock = clock
        self.wallclock = wallclock
        self.started_wall = wallclock() - (clock() - broker.started_at)
        self.listeners = list(listeners or [])
        self.status_url: str | None = None
        self.providers: dict[str, StatusProvider] = {}
        self.watcher: TopicWatcher | None = None
        self.history = History(history)
        self.rates: dict[str, float] = {"received": 0.0, "sent": 0.0}
        self._last_sample: tuple[float, int, int] | None = None

    # -- registration --------------------------------------------------------------------

    def add_provider(self, name: str, provider: StatusProvider) -> None:
        """Report `provider.status()` as section `name` (replaces the watcher's section)."""
        if not callable(getattr(provider, "status", None)):
            raise TypeError(f"status provider {name!r} has no status() method")
        self.providers[name] = provider

    def remove_provider(self, name: str) -> None:
        self.providers.pop(name, None)

    def watch_topics(self, prefix: str) -> None:
        """Fill "devices" and "uplink" from the documented topics (see the module comment)."""
        if self.watcher is None:
            self.watcher = TopicWatcher(prefix, self.wallclock)
            self.watcher.attach(self.broker, self.clock)

    def close(self) -> None:
        if self.watcher is not None:
            self.watcher.close()
            self.watcher = None

    # -- collection ----------------------------------------------------------------------

    def collect(self, history: bool = False) -> dict[str, Any]:
        """The whole status as a JSON-able dict (with the history when asked)."""
        broker = self.broker
        now = self.clock()
        wall = self.wallclock()
        counters = broker.counters
        status: dict[str, Any] = {
            "gateway_id": broker.config.gateway_id,
            "version": VERSION,
            "time": round(wall, 3),
            "started": round(self.started_wall, 3),
            "uptime_s": round(now - broker.started_at, 1),
            "listeners": list(self.listeners),
            "status_url": self.status_url,
            "clients": self._clients(now),
            "messages": {
                "received": counters.received,
                "sent": counters.sent,
                "dropped": counters.dropped,
                "expired": counters.expired,
                "denied": counters.denied,
                "too_large": counters.too_large,
                "store_full": counters.store_full,
                "received_per_s": round(self.rates["received"], 2),
                "sent_per_s": round(self.rates["sent"], 2),
            },
            "bytes": {"received": broker.sys.bytes_received, "sent": broker.sys.bytes_sent},
            "subscriptions": broker.table.count,
            "retained": broker.retained.count,
            "queues": self._queues(),
        }
        sections: dict[str, Any] = {}
        if self.watcher is not None:
            sections["devices"] = self.watcher.devices_section()
            sections["uplink"] = self.watcher.uplink_section()
        for name, provider in self.providers.items():
            try:
                section = provider.status()
            except Exception as exc:  # one broken provider must not hide the rest
                log.exception("status provider %r failed", name)
                section = {"error": f"{type(exc).__name__}: {exc}"}
            if section is not None or name not in sections:
                sections[name] = None if section is None else dict(section)
        devices = sections.get("devices")
        if devices is not None and "devices" in devices:
            listed = devices["devices"]
            devices.setdefault("online", sum(1 for d in listed if d.get("online") is True))
            devices.setdefault("offline", len(listed) - devices["online"])
        for name, section in sections.items():
            if section is not None:
                status[name] = section
        if history:
            status["history"] = self.history.export()
            status["history_interval_s"] = self.sample_interval
        return status

    def sample(self) -> dict[str, Any]:
        """Update the rates and append one sample to every history series; returns the status."""
        now = self.clock()
        wall = self.wallclock()
        counters = self.broker.counters
        last = self._last_sample
        if last is not None and now > last[0]:
            elapsed = now - last[0]
            self.rates = {
                "received": max(0, counters.received - last[1]) / elapsed,
                "sent": max(0, counters.sent - last[2]) / elapsed,
            }
        self._last_sample = (now, counters.received, counters.sent)
        status = self.collect()
        record = self.history.record
        record("messages/received_per_s", wall, round(self.rates["received"], 2))
        record("messages/sent_per_s", wall, round(self.rates["sent"], 2))
        record("clients/connected", wall, status["clients"]["connected"])
        record("queues/queued_messages", wall, status["queues"]["queued_messages"])
        uplink = status.get("uplink")
        if isinstance(uplink, Mapping) and isinstance(uplink.get("backlog_messages"), int):
            record("uplink/backlog_messages", wall, uplink["backlog_messages"])
        devices = status.get("devices")
        if isinstance(devices, Mapping):
            for device in devices.get("devices", []):
                for point, data in (device.get("points") or {}).items():
                    value = data.get("value") if isinstance(data, Mapping) else None
                    if isinstance(value, bool):
                        value = int(value)
                    if isinstance(value, int | float):
                        record(f"points/{device.get('name')}/{point}", wall, float(value))
        return status

    def _clients(self, now: float) -> dict[str, Any]:
        broker = self.broker
        listed: list[dict[str, Any]] = []
        network = links = 0
        for session in broker.online_sessions():
            conn = session.connection
            assert conn is not None
            if conn.listener == "link":
                links += 1
                continue
            network += 1
            if len(listed) < MAX_CLIENTS_LISTED:
                outbound = session.outbound
                listed.append({
                    "client_id": session.client_id,
                    "peer": conn.peer,
                    "listener": conn.listener,
                    "username": conn.username,
                    "protocol": _PROTOCOLS.get(session.protocol_level, "?"),
                    "connected_s": round(now - conn.opened_at, 1),
                    "keep_alive": conn.keep_alive,
                    "subscriptions": len(session.subscriptions),
                    "queued": len(outbound),
                    "inflight": len(outbound.inflight),
                    "dropped": session.dropped,
                })
        listed.sort(key=lambda c: c["client_id"])
        return {
            "connected": network,
            "links": links,
            "maximum": broker.clients_maximum,
            "sessions": len(broker.sessions),
            "offline_sessions": sum(1 for s in broker.sessions.values() if not s.online),
            "list": listed,
        }

    def _queues(self) -> dict[str, Any]:
        queued = queued_bytes = inflight = 0
        deepest: list[tuple[int, str]] = []
        for session in self.broker.sessions.values():
            outbound = session.outbound
            depth = len(outbound)
            queued += depth
            queued_bytes += outbound.queued_bytes + outbound.spilled_bytes
            inflight += len(outbound.inflight)
            if depth:
                deepest.append((depth, session.client_id))
        deepest.sort(reverse=True)
        return {
            "queued_messages": queued,
            "queued_bytes": queued_bytes,
            "inflight": inflight,
            "deepest": [{"client_id": c, "queued": d} for d, c in deepest[:5]],
        }


# -- one-line and text renderings ----------------------------------------------------------------


def summary_line(status: Mapping[str, Any]) -> str:
    """The systemd `STATUS=` text: clients, devices online, uplink backlog."""
    clients = status["clients"]["connected"]
    parts = [f"{clients} client{'s' if clients != 1 else ''}"]
    devices = status.get("devices")
    if isinstance(devices, Mapping) and "devices" in devices:
        parts.append(f"devices {devices.get('online', 0)}/{len(devices['devices'])} online")
    uplink = status.get("uplink")
    if isinstance(uplink, Mapping) and "backlog_messages" in uplink:
        state = "up" if uplink.get("connected") else "down"
        parts.append(f"uplink {state}, backlog {uplink['backlog_messages']}")
    parts.append(f"{status['messages']['received_per_s']:.1f} msg/s in")
    return ", ".join(parts)


def format_duration(seconds: float | None) -> str:
    """`3d 04:05:06`, `1:02:03`, `42s`; `-` for None."""
    if seconds is None:
        return "-"
    total = int(seconds)
    if total < 60:
        return f"{seconds:.0f}s" if seconds >= 1 or seconds == 0 else f"{seconds:.1f}s"
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    text = f"{hours}:{minutes:02d}:{secs:02d}" if hours or days else f"{minutes}:{secs:02d}"
    return f"{days}d {hours:02d}:{minutes:02d}:{secs:02d}" if days else text


def format_bytes(count: float | None) -> str:
    if count is None:
        return "-"
    value = float(count)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GiB"  # pragma: no cover


def _value_text(point: Mapping[str, Any]) -> str:
    value = point.get("value")
    if value is None:
        return "-"
    text = json.dumps(value) if not isinstance(value, str) else value
    unit = point.get("unit")
    return f"{text} {unit}" if unit else text


def render_text(status: Mapping[str, Any]) -> str:
    """The human summary printed by `outpost status` (sections shown when present)."""
    lines: list[str] = []
    add = lines.append
    add(f"outpost {status.get('gateway_id')} ({status.get('version')})")
    add(f"  uptime      {format_duration(status.get('uptime_s'))}")
    listeners = ", ".join(status.get("listeners") or []) or "-"
    add(f"  listeners   {listeners}")
    clients = status["clients"]
    add(f"  clients     {clients['connected']} connected (max {clients['maximum']}), "
        f"{clients['sessions']} sessions ({clients['offline_sessions']} offline), "
        f"{clients['links']} in-process links")
    msgs = status["messages"]
    add(f"  messages    {msgs['received_per_s']:.1f}/s in, {msgs['sent_per_s']:.1f}/s out; "
        f"{msgs['received']} received, {msgs['sent']} sent, {msgs['dropped']} dropped, "
        f"{msgs['denied']} denied")
    queues = status["queues"]
    add(f"  queues      {queues['queued_messages']} queued "
        f"({format_bytes(queues['queued_bytes'])}), {queues['inflight']} in flight; "
        f"{status['retained']} retained, {status['subscriptions']} subscriptions")
    for deep in queues.get("deepest") or []:
        add(f"                {deep['client_id']}: {deep['queued']} queued")
    service = status.get("service")
    if isinstance(service, Mapping) and "pid" in service:
        watchdog = service.get("watchdog_s")
        add(f"  service     pid {service['pid']}, systemd "
            f"{'notified via ' + str(service.get('notify')) if service.get('systemd') else 'no'}"
            f", watchdog {'every ' + format_duration(watchdog) if watchdog else 'off'}, "
            f"{service.get('reloads', 0)} reload(s), {service.get('reload_failures', 0)} refused")
    store = status.get("store")
    if isinstance(store, Mapping):
        if "error" in store:
            add(f"  store       error: {store['error']}")
        else:
            add(f"  store       {store.get('path', '-')} ({store.get('durability', '?')}): "
                f"{format_bytes(store.get('size_bytes'))}, WAL "
                f"{format_bytes(store.get('wal_bytes'))}")
    certificate = status.get("certificate")
    if isinstance(certificate, Mapping) and "not_after" in certificate:
        error = f": {certificate['error']}" if certificate.get("error") else ""
        add(f"  certificate {certificate.get('subject')} until {certificate['not_after']} "
            f"({format_duration(certificate.get('expires_in_s'))} left), "
            f"{certificate.get('state')}{error}")
    devices = status.get("devices")
    if isinstance(devices, Mapping) and "devices" in devices:
        add("")
        add(f"devices: {devices.get('online', 0)} online, {devices.get('offline', 0)} offline")
        for device in devices["devices"]:
            online = device.get("online")
            state = ("disabled" if device.get("disabled") else "online" if online is True
                     else "offline" if online is False else "unknown")
            add(f"  {device.get('name', '?'):<20} {state:<8} last value "
                f"{format_duration(device.get('last_value_age_s'))} ago, "
                f"{device.get('errors', 0)} errors")
            for name, point in (device.get("points") or {}).items():
                quality = point.get("quality") or ""
                suffix = f" ({quality})" if quality and quality != "good" else ""
                add(f"      {name:<24} {_value_text(point)}{suffix}")
    elif isinstance(devices, Mapping) and "error" in devices:
        add(f"devices: error: {devices['error']}")
    uplink = status.get("uplink")
    if isinstance(uplink, Mapping):
        add("")
        if "error" in uplink:
            add(f"uplink: error: {uplink['error']}")
        else:
            state = "connected" if uplink.get("connected") else "disconnected"
            add(f"uplink: {state}")
            add(f"  backlog     {uplink.get('backlog_messages', 0)} messages "
                f"({format_bytes(uplink.get('backlog_bytes'))}), oldest "
                f"{format_duration(uplink.get('oldest_age_s'))}")
            rate = uplink.get("drain_rate")
            if rate is not None:
                add(f"  drain       {rate:.1f} msg/s, ETA {format_duration(uplink.get('eta_s'))}")
            add(f"  dropped     {uplink.get('dropped', 0)}")
            for remote in uplink.get("remotes") or []:
                add(f"  remote {remote.get('name')}: "
                    f"{'connected' if remote.get('connected') else 'disconnected'} "
                    f"{remote.get('address') or ''}")
    known = {"store", "devices", "uplink", "service", "certificate"}
    for name, section in status.items():
        if name in known or not isinstance(section, Mapping) or name in _CORE_KEYS:
            continue
        add("")
        add(f"{name}: {json.dumps(section, sort_keys=True)}")
    if clients.get("list"):
        add("")
        add("clients:")
        for client in clients["list"]:
            add(f"  {client['client_id']:<24} {client['peer']:<22} v{client['protocol']:<6} "
                f"up {format_duration(client['connected_s'])}, {client['queued']} queued")
    return "\n".join(lines) + "\n"


_CORE_KEYS = {"clients", "messages", "bytes", "queues", "history"}
