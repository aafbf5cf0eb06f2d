"""Simulated gateways: the uplink's wire formats over raw MQTT connections.

How this works: each gateway is one TCP connection speaking just enough MQTT (CONNECT,
QoS 1 PUBLISH, PUBACK) to publish its points, with up to ``window`` unacknowledged. What a
PUBLISH carries comes from the uplink's own code, so the bytes are the uplink's: per message
:func:`bridge.uplink.envelope.outgoing` (MQTT 5 user properties, or the JSON envelope for
3.1.1); batched (a :class:`BatchConfig` given) :func:`bridge.uplink.batch.plan` and
:func:`bridge.uplink.batch.encode`, a batch published on its first row's remote topic
without properties, as the uplink does. Encoding the packets by hand keeps the publisher
cheap enough not to be what limits a run. Every byte written to and read from a gateway's
socket is counted (PUBACKs included), which gives the bytes on the wire per point. A point's
``received_ms`` is the time it is generated (batched: it then waits for its batch, at most
``max_delay``), so ``ingest`` minus it is the end-to-end latency.
"""

from __future__ import annotations

import asyncio
import json
import struct
import time
import uuid
from dataclasses import dataclass

from bridge.uplink.batch import encode, plan
from bridge.uplink.config import BatchConfig
from bridge.uplink.envelope import outgoing
from gateway.base.outbox import OutboxRecord


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n % 128, n // 128
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _utf8(text: str) -> bytes:
    data = text.encode()
    return struct.pack(">H", len(data)) + data


def connect_packet(client_id: str, protocol: int, keepalive: int = 60) -> bytes:
    """CONNECT with clean start; MQTT 5 (``protocol`` 5) or 3.1.1 (4)."""
    body = _utf8("MQTT") + bytes([protocol, 0x02]) + struct.pack(">H", keepalive)
    if protocol == 5:
        body += _varint(0)
    body += _utf8(client_id)
    return b"\x10" + _varint(len(body)) + body


def publish_packet(
    topic: str, payload: bytes, mid: int, user_properties: tuple[tuple[str, str], ...] | None
) -> bytes:
    """A QoS 1 PUBLISH; ``user_properties`` None means MQTT 3.1.1 (no properties)."""
    head = _utf8(topic) + struct.pack(">H", mid)
    if user_properties is not None:
        props = b"".join(b"\x26" + _utf8(k) + _utf8(v) for k, v in user_properties)
        head += _varint(len(props)) + props
    body = head + payload
    return b"\x32" + _varint(len(body)) + body


def point_payload(seq: int, ts_ms: int) -> bytes:
    return json.dumps(
        {"value": round(seq * 0.1, 1), "unit": "kW", "ts": ts_ms, "quality": "good"},
        separators=(",", ":"),
    ).encode()


@dataclass
class GatewayStats:
    sent_bytes: int = 0
    received_bytes: int = 0
    points: int = 0
    messages: int = 0


class Gateway:
    """One simulated gateway connection; :meth:`publish` sends points ``first..last``."""

    def __init__(
        self, name: str, protocol: int, window: int, batching: BatchConfig | None = None
    ) -> None:
        self.name = name
        self.protocol = protocol
        self.window = window
        self.batching = batching
        self.prefix = f"outpost/{name}/"
        self.epoch = str(uuid.uuid4())
        self.stats = GatewayStats()
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._free: asyncio.Semaphore = asyncio.Semaphore(window)
        self._acks: asyncio.Task[None] | None = None
        self._outstanding = 0
        self._all_acked = asyncio.Event()

    async def connect(self, host: str, port: int) -> None:
        self._reader, self._writer = await asyncio.open_connection(host, port)
        packet = connect_packet(self.name, self.protocol)
        self._writer.write(packet)
        self.stats.sent_bytes += len(packet)
        kind, body = await self._packet()
        if kind != 0x20 or body[1] != 0:
            raise RuntimeError(f"{self.name}: CONNACK refused ({body!r})")
        self._acks = asyncio.create_task(self._read_acks())

    async def _packet(self) -> tuple[int, bytes]:
        assert self._reader is not None
        first = (await self._reader.readexactly(1))[0]
        length, shift, size = 0, 0, 1
        while True:
            byte = (await self._reader.readexactly(1))[0]
            size += 1
            length |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                break
        body = await self._reader.readexactly(length)
        self.stats.received_bytes += size + length
        return first & 0xF0, body

    async def _read_acks(self) -> None:
        while True:
            kind, _ = await self._packet()
            if kind == 0x40:  # PUBACK
                self._free.release()
                self._outstanding -= 1
                if self._outstanding == 0:
                    self._all_acked.set()

    async def publish(
        self, first: int, last: int, *, points_per_s: float | None = None, devices: int = 10
    ) -> None:
        """Send seqs ``first..last`` (paced at ``points_per_s`` when given); returns when the
        broker has acknowledged every one."""
        started = time.monotonic()
        batching = self.batching
        pending: list[OutboxRecord] = []
        for seq in range(first, last + 1):
            if points_per_s:
                due = started + (seq - first) / points_per_s
                if (delay := due - time.monotonic()) > 0:
                    await asyncio.sleep(delay)
            now_ms = time.time_ns() // 1_000_000
            local = f"devices/meter-{seq % devices}/active_power"
            record = OutboxRecord(
                seq=seq, rule="fleet", topic=local, payload=point_payload(seq, now_ms), qos=1,
                retain=False, received_ms=now_ms,
            )  # fmt: skip
            if batching is None:
                out = outgoing(
                    record, self.prefix + local, self.name, self.epoch,
                    protocol=self.protocol, envelope="auto", qos=1,
                )  # fmt: skip
                props = out.user_properties if self.protocol == 5 else None
                await self._send(out.topic, out.payload, seq, props, 1)
                continue
            pending.append(record)
            # the uplink reads max_count rows at a time; a partial batch waits max_delay
            aged = now_ms - pending[0].received_ms >= batching.max_delay * 1000
            if len(pending) >= batching.max_count or (points_per_s and aged):
                await self._send_batches(pending)
                pending = []
        if pending:
            await self._send_batches(pending)
        assert self._writer is not None
        await self._writer.drain()
        if self._outstanding:
            await self._all_acked.wait()

    async def _send_batches(self, records: list[OutboxRecord]) -> None:
        assert self.batching is not None
        for group in plan(records, self.batching.max_count, self.batching.max_bytes):
            payload = encode(self.name, self.epoch, "", self.prefix, group,
                             self.batching.compression)  # fmt: skip
            props = () if self.protocol == 5 else None
            await self._send(self.prefix + group[0].topic, payload, group[0].seq, props,
                             len(group))  # fmt: skip

    async def _send(
        self,
        topic: str,
        payload: bytes,
        seq: int,
        props: tuple[tuple[str, str], ...] | None,
        points: int,
    ) -> None:
        """One QoS 1 PUBLISH once the window has room (its mid derived from ``seq``)."""
        assert self._writer is not None
        await self._free.acquire()
        packet = publish_packet(topic, payload, (seq % 65535) + 1, props)
        self._outstanding += 1
        self._all_acked.clear()
        self._writer.write(packet)
        self.stats.sent_bytes += len(packet)
        self.stats.points += points
        self.stats.messages += 1
        if self._writer.transport.get_write_buffer_size() > 1 << 16:
            await self._writer.drain()

    async def close(self) -> None:
        if self._acks is not None:
            self._acks.cancel()
        if self._writer is not None:
            self._writer.write(b"\xe0\x00")  # DISCONNECT
            self._writer.close()


async def run_gateways(
    host: str,
    port: int,
    count: int,
    points_each: int,
    *,
    protocol: int = 5,
    window: int = 100,
    points_per_s_each: float | None = None,
    first_seq: int = 1,
    names: list[str] | None = None,
    batching: BatchConfig | None = None,
) -> list[Gateway]:
    """Connect ``count`` gateways and publish ``points_each`` points from each (in batches
    when ``batching`` is given); returns them with their byte counts once every point is
    acknowledged by the broker."""
    gateways = [
        Gateway(names[i] if names else f"gw-{i:05d}", protocol, window, batching)
        for i in range(count)
    ]
    await asyncio.gather(*(gw.connect(host, port) for gw in gateways))
    last = first_seq + points_each - 1
    await asyncio.gather(
        *(gw.publish(first_seq, last, points_per_s=points_per_s_each) for gw in gateways)
    )
    await asyncio.gather(*(gw.close() for gw in gateways))
    return gateways
