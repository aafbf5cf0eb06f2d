"""The Sparkplug B edge node's state: births, deaths, seq, held data, commands.

How this works: `EdgeNode` is fed by the bridge (`point`, `device_status`) and by its MQTT
session (`connected`, `disconnected`, `message`), and publishes through the `send` callback
the session gives it at `connected`. It reads no clock but `wallclock` and does no I/O itself.

- Publishing is allowed while the session is connected and, when `primary_host` is set, the
  primary host's last STATE said `online` (a STATE older than the last one seen is ignored).
  When publishing becomes allowed, the node is born: NBIRTH (bdSeq, `Node Control/Rebirth`),
  then a DBIRTH for every device that is online, each with all its metrics and their last
  values. `seq` is 0 at the NBIRTH and counts every later message of the node modulo 256.
- `bdSeq` goes up by one (0-255) for every MQTT session: the session takes the next number
  from `BdSeqCounter` (bdseq.py: kept in the state directory, so a restart after SIGKILL or a
  power cut goes on counting) before it connects; the session's will is the NDEATH carrying
  it, so a host application can match the death with the birth it ends.
- A STATE `offline` of the primary host (not older than the last STATE seen) while the node is
  born ends the session: NDEATH, DISCONNECT, and the session connects again (next address,
  next bdSeq) and waits for the host's STATE `online` before it births.
- A device that comes (back) online is born when the poll that brought it back has given
  every metric a value, or `dbirth_wait` seconds after it came online (metrics still without
  a value are born null): its DBIRTH carries current values, not nulls followed by DDATA, and
  each metric's `engUnit`: the point's configured unit, else the unit its values carried (a
  device may state its own).
- Values the bridge publishes (already filtered by the point's deadband / report-by-exception)
  are collected per device and sent as one DDATA when the event loop turns, with the alias
  only. A device going offline sends DDEATH, coming back a DBIRTH.
- While publishing is not allowed after the node was born once (primary host offline, or the
  session lost), values are held (hold.py: in the store-and-forward outbox), oldest dropped
  beyond `hold_max`; at the next birth they follow the births as DDATA with `is_historical`
  set, in the order they were read (values of a device that is not online then are dropped).
- Alarms (bridge/alarms) are node metrics `Alarms/<name>/Active`, `.../Acked`, `.../State`:
  in every NBIRTH, and an NDATA when an alarm's state is published (`alarm`).
- NCMD `Node Control/Rebirth` = true births the node again (same bdSeq, seq from 0). Every
  metric of a DCMD is checked against the catalogue and the point's limits (payload.py: name,
  datatype, writable, type range, min / max, enum labels) before any is written; one refusal
  refuses the whole command (logged at WARNING, nothing written). The checked writes go to the
  bridge's write path in order, as one task per command.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable

from google.protobuf.message import DecodeError

from bridge.aggregate.points import aggregate_as_points
from bridge.alarms.sparkplug import AlarmView, add_alarm_metrics
from bridge.config import BridgeConfig
from bridge.modbus.poller import WriteError
from bridge.point import Value
from bridge.serial.reader import CommandError
from bridge.sparkplug import payload as sp
from bridge.sparkplug.bdseq import BdSeqCounter
from bridge.sparkplug.config import SparkplugConfig
from bridge.sparkplug.hold import OutboxHold
from bridge.sparkplug.sparkplug_b_pb2 import Payload

log = logging.getLogger("outpost.sparkplug")
Send = Callable[[str, bytes, int, bool], None]  # topic, payload, qos, retain
Write = Callable[[str, str, Value], Awaitable[object]]  # device, point, value
HOLD_RETRY = 0.1  # seconds before taking held values the outbox had not committed yet


class EdgeNode:
    """One Sparkplug edge node with the bridge's devices as its devices."""

    def __init__(self, config: SparkplugConfig, node_id: str, bridge: BridgeConfig,
                 prefix: str, write: Write, wallclock: Callable[[], float],
                 hold: OutboxHold, bdseq: BdSeqCounter) -> None:
        self.config = config
        self.node_id = node_id
        self.write = write
        self.wallclock = wallclock
        base = f"{sp.NAMESPACE}/{config.group_id}"
        self.topics = {kind: f"{base}/{kind}/{node_id}"
                       for kind in ("NBIRTH", "NDEATH", "NCMD", "NDATA")}
        self.device_topic = f"{base}/{{kind}}/{node_id}/{{device}}"
        self.dcmd_filter = f"{base}/DCMD/{node_id}/+"
        self.state_topic = (f"{sp.NAMESPACE}/STATE/{config.primary_host}"
                            if config.primary_host else None)
        self.counter = bdseq
        self.bdseq = 0
        self.bdseq_used = True  # the next CONNECT takes a new number
        self.seq = 0
        self.send: Send | None = None
        self.host_online = config.primary_host is None
        self.host_ts = -1
        self.ever_born = False
        self.session_over = False  # the primary host went offline: end this session
        self.born: set[str] = set()  # devices whose DBIRTH went out in this birth
        self.online: set[str] = set()  # devices the bridge says are online
        # devices back online whose DBIRTH waits for their first values: metrics seen so far
        self.arriving: dict[str, set[str]] = {}
        self.arrival_timers: dict[str, asyncio.TimerHandle] = {}
        self.values: dict[str, dict[str, tuple[Value, int]]] = {}
        # units the values carried, of points whose configuration names none (a device that
        # states its own units)
        self.units: dict[str, dict[str, str]] = {}
        self.pending: dict[str, dict[int, tuple[sp.MetricSpec, Value, int]]] = {}
        self.hold = hold
        self.tasks: set[asyncio.Task[None]] = set()
        self.alarms: dict[str, AlarmView] = {}  # node metrics Alarms/<name>/... (bridge/alarms)
        self.configure(bridge, prefix)

    # -- configuration ---------------------------------------------------------------------

    def configure(self, bridge: BridgeConfig, prefix: str) -> None:
        """Take the bridge's (new) devices and points; a born node is born again."""
        self.prefix = prefix
        self.metrics = sp.catalogue(bridge)
        self.by_name = {device: {m.name: m for m in metrics}
                        for device, metrics in self.metrics.items()}
        self.awaited = {device: sum(m.point is not None for m in metrics)
                        for device, metrics in self.metrics.items()}
        self.values = {device: self.values.get(device, {}) for device in self.metrics}
        self.units = {device: self.units.get(device, {}) for device in self.metrics}
        self.online &= set(self.metrics)
        for device in set(self.arriving) - self.online:
            self._arrived(device)
        if self.ever_born and self.allowed:
            self.birth()

    @property
    def allowed(self) -> bool:
        """May the node publish right now?"""
        return self.send is not None and self.host_online

    def death_payload(self) -> bytes:
        """The NDEATH for the next session's will."""
        return sp.node_death(self.bdseq, self._now())

    # -- the session -----------------------------------------------------------------------

    def new_session(self) -> None:
        """An MQTT CONNECT is about to be sent: take its bdSeq (for the will and the NBIRTH).
        An attempt that never got a session (server unreachable, CONNECT refused) left no
        birth or death behind, so the next attempt keeps its number."""
        if self.bdseq_used:
            self.bdseq = self.counter.take()
            self.bdseq_used = False
        self.session_over = False

    def connected(self, send: Send) -> None:
        """The session is up (its will carries the current bdSeq): birth when allowed."""
        self.send = send
        self.bdseq_used = True
        if self.allowed:
            self.birth()

    def disconnected(self) -> None:
        """The session ended; unsent values are held."""
        self.send = None
        self.born.clear()
        for device, entries in self.pending.items():
            for spec, value, ts_ms in entries.values():
                self.hold.add(device, spec.name, value, ts_ms)
        self.pending.clear()

    def closing(self) -> None:
        """A clean shutdown: publish the NDEATH ourselves before the DISCONNECT."""
        if self.send is not None:
            self.send(self.topics["NDEATH"], self.death_payload(), 1, False)

    # -- from the bridge -------------------------------------------------------------------

    def point(self, topic: str, payload: bytes) -> None:
        """A point value the bridge published on `<prefix>/<device>/<point>`."""
        device, _, name = topic[len(self.prefix) + 1:].partition("/")
        spec = self.by_name.get(device, {}).get(name)
        if spec is None:  # a window of an aggregating point: its mean, min and max metrics
            for metric, values in aggregate_as_points(name, payload):
                self.point(f"{self.prefix}/{device}/{metric}", values)
            return
        try:
            data = json.loads(payload)
            value = None if data["quality"] == "bad" else data["value"]
            ts_ms = int(data["ts"])
        except (ValueError, KeyError, TypeError):
            return
        self.values[device][name] = (value, ts_ms)
        unit = data.get("unit")
        if spec.unit is None and isinstance(unit, str):
            self.units[device][name] = unit
        arriving = self.arriving.get(device)
        if arriving is not None:
            if spec.point is not None:  # an aggregate's metric is not waited for
                arriving.add(name)
            if len(arriving) >= self.awaited[device]:
                self._arrived(device)
            elif self.ever_born and not self.allowed:
                self.hold.add(device, name, value, ts_ms)
            return
        if device in self.born:
            first = not self.pending
            self.pending.setdefault(device, {})[spec.alias] = (spec, value, ts_ms)
            if first:
                asyncio.get_running_loop().call_soon(self.flush)
        elif self.ever_born and not self.allowed and device in self.online:
            self.hold.add(device, name, value, ts_ms)

    def device_status(self, device: str, online: bool) -> None:
        """The bridge's view of a device changed: DBIRTH / DDEATH."""
        if device not in self.metrics:
            return
        if online:
            if device in self.online or device in self.born:
                return
            self.online.add(device)
            self.arriving[device] = set()
            self.arrival_timers[device] = asyncio.get_running_loop().call_later(
                self.config.dbirth_wait, self._arrived, device)
            if not self.metrics[device]:
                self._arrived(device)
        else:
            self.online.discard(device)
            self._stop_waiting(device)
            if device in self.born:
                self._flush_device(device)
                self.born.discard(device)
                self._publish("DDEATH", device, Payload(timestamp=self._now()))

    def flush(self) -> None:
        """Send the collected values as one DDATA per device."""
        for device in list(self.pending):
            self._flush_device(device)

    # -- from the session ------------------------------------------------------------------

    def message(self, topic: str, data: bytes) -> None:
        """NCMD, DCMD or the primary host's STATE arrived."""
        if topic == self.state_topic:
            self._state(data)
            return
        try:
            payload = Payload.FromString(data)
        except DecodeError as exc:
            log.warning("sparkplug: %s: malformed payload refused (%s)", topic, exc)
            return
        if topic == self.topics["NCMD"]:
            self._node_command(payload)
        elif topic.startswith(self.dcmd_filter[:-1]):
            self._device_command(topic.rsplit("/", 1)[1], payload)

    def _state(self, data: bytes) -> None:
        try:
            state = json.loads(data)
            online, ts = state["online"], int(state["timestamp"])
            if not isinstance(online, bool):
                raise TypeError("online is not a boolean")
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("sparkplug: STATE of %s refused: not {\"online\": bool, "
                        "\"timestamp\": ms} (%s)", self.config.primary_host, exc)
            return
        if ts < self.host_ts:
            return  # an older STATE than one already seen (spec: ignore it)
        self.host_ts = ts
        was = self.allowed
        self.host_online = online
        log.info("sparkplug: primary host %s is %s", self.config.primary_host,
                 "online" if online else "offline")
        if was and not online:
            # tck-id-message-flow-edge-node-birth-publish-phid-offline: NDEATH, disconnect,
            # connect again. What was read before the host went away still goes out first.
            self.flush()
            self.closing()
            self.born.clear()
            self.session_over = True
        elif self.allowed and not was:
            self.birth()

    def _node_command(self, payload: Payload) -> None:
        for metric in payload.metrics:
            if metric.name == sp.REBIRTH:
                if metric.WhichOneof("value") == "boolean_value" and metric.boolean_value:
                    log.info("sparkplug: rebirth requested")
                    if self.allowed:
                        self.birth()
                else:
                    log.warning("sparkplug: NCMD %s refused: needs the Boolean true", sp.REBIRTH)
            else:
                log.warning("sparkplug: NCMD refused: unknown control %r",
                            metric.name or f"alias {metric.alias}")

    def _device_command(self, device: str, payload: Payload) -> None:
        metrics = self.metrics.get(device)
        if metrics is None:
            log.warning("sparkplug: DCMD refused: unknown device %r", device)
            return
        writes: list[tuple[str, Value]] = []
        try:
            if device not in self.online:
                raise sp.CommandRefusedError("the device is offline")
            # Every metric is checked before any is written: a DCMD is all or nothing.
            for metric in payload.metrics:
                writes.append(sp.parse_command(metric, metrics))
        except sp.CommandRefusedError as exc:
            log.warning("sparkplug: DCMD for %s refused: %s; nothing written", device, exc,
                        extra={"device": device})
            return
        task = asyncio.get_running_loop().create_task(self._write(device, writes))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _write(self, device: str, writes: list[tuple[str, Value]]) -> None:
        for name, value in writes:
            try:
                await self.write(device, name, value)
            except (WriteError, CommandError) as exc:
                log.warning("sparkplug: DCMD %s/%s = %r failed: %s", device, name, value, exc,
                            extra={"device": device})
                return
            log.info("sparkplug: DCMD %s/%s = %r written", device, name, value,
                     extra={"device": device})

    # -- births and data -------------------------------------------------------------------

    def birth(self) -> None:
        """NBIRTH, a DBIRTH per online device, then the held values."""
        self.pending.clear()
        self.born.clear()
        self.seq = 0
        assert self.send is not None
        nbirth = sp.node_birth(0, self.bdseq, self._now())
        for alarm in self.alarms.values():
            add_alarm_metrics(nbirth, alarm)
        self.send(self.topics["NBIRTH"], nbirth.SerializeToString(), 0, False)
        self.ever_born = True
        for device in self.metrics:
            if device in self.online and device not in self.arriving:
                self._device_birth(device)
        self._release_held()

    def alarm(self, view: AlarmView) -> None:
        """An alarm's state was published: NDATA of its metrics (a new alarm: a rebirth,
        since a metric must be born before its data)."""
        new = view.name not in self.alarms
        self.alarms[view.name] = view
        if not self.ever_born or not self.allowed:
            return  # the next NBIRTH carries it
        if new:
            self.birth()
            return
        payload = Payload(timestamp=self._now())
        add_alarm_metrics(payload, view)
        self.seq = (self.seq + 1) % 256
        payload.seq = self.seq
        assert self.send is not None
        self.send(self.topics["NDATA"], payload.SerializeToString(), 0, False)

    def _device_birth(self, device: str) -> None:
        payload = Payload(timestamp=self._now())
        values, units = self.values[device], self.units[device]
        for spec in self.metrics[device]:
            value, ts_ms = values.get(spec.name, (None, payload.timestamp))
            sp.birth_metric(payload, spec, value, ts_ms, units.get(spec.name))
        self.born.add(device)
        self._publish("DBIRTH", device, payload)

    def _arrived(self, device: str) -> None:
        """A device back online has its values (or waited `dbirth_wait`): its DBIRTH."""
        self._stop_waiting(device)
        if self.allowed and device in self.online and device not in self.born:
            self._device_birth(device)

    def _stop_waiting(self, device: str) -> None:
        self.arriving.pop(device, None)
        timer = self.arrival_timers.pop(device, None)
        if timer is not None:
            timer.cancel()

    def _flush_device(self, device: str) -> None:
        entries = self.pending.pop(device, None)
        if not entries or device not in self.born or not self.allowed:
            return
        payload = Payload(timestamp=self._now())
        for spec, value, ts_ms in entries.values():
            sp.data_metric(payload, spec, value, ts_ms)
        self._publish("DDATA", device, payload)

    def _release_held(self) -> None:
        if not self.allowed:
            return
        held = self.hold.take()
        if self.hold.waiting:  # the outbox commits in a moment: take the rest then
            asyncio.get_running_loop().call_later(HOLD_RETRY, self._release_held)
        if not held:
            return
        log.info("sparkplug: sending %d held value(s) as historical data", len(held))
        batch: Payload | None = None
        batch_device = ""
        for device, name, value, ts_ms in held:
            spec = self.by_name.get(device, {}).get(name)
            if spec is None or device not in self.born:
                continue
            if batch is not None and device != batch_device:
                self._publish("DDATA", batch_device, batch)
                batch = None
            if batch is None:
                batch, batch_device = Payload(timestamp=self._now()), device
            sp.data_metric(batch, spec, value, ts_ms, historical=True)
        if batch is not None:
            self._publish("DDATA", batch_device, batch)

    def _publish(self, kind: str, device: str, payload: Payload) -> None:
        if self.send is None:
            return
        self.seq = (self.seq + 1) % 256
        payload.seq = self.seq
        topic = self.device_topic.format(kind=kind, device=device)
        self.send(topic, payload.SerializeToString(), 0, False)

    def _now(self) -> int:
        return int(self.wallclock() * 1000)
