"""Outgoing messages of one session: the in-flight window and the bounded queue behind it.

How this works: a `Delivery` is one message on its way to one session. QoS 1/2 deliveries get a
packet identifier when they enter the in-flight window (at most `window` of them, the smaller of
the client's receive maximum and ours) and stay there until PUBACK or PUBCOMP. Everything else
waits in the queue: QoS 1/2 beyond the window, messages for an offline session, and QoS 0
messages while the connection's socket buffer is full. The queue is bounded in messages and
bytes; on overflow the policy drops the oldest queued message or the new one, and the caller is
told which so it can count and log the drop.

Pure and synchronous.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass

from gateway.message import Message


@dataclass(slots=True)
class Delivery:
    """One message on its way to one session."""

    message: Message
    qos: int
    retain: bool
    subscription_ids: tuple[int, ...] = ()
    packet_id: int = 0
    released: bool = False  # QoS 2: PUBREC received and PUBREL sent; waiting for PUBCOMP
    sent: bool = False  # has been written at least once (DUP on resend)


class Outbound:
    """In-flight window and queue of one session."""

    def __init__(self, max_messages: int, max_bytes: int, drop_oldest: bool) -> None:
        self.inflight: dict[int, Delivery] = {}
        self.queue: deque[Delivery] = deque()
        self.queued_bytes = 0
        self.max_messages = max_messages
        self.max_bytes = max_bytes
        self.drop_oldest = drop_oldest
        self._next_id = 1

    def __len__(self) -> int:
        return len(self.queue)

    def enqueue(self, delivery: Delivery) -> list[Delivery]:
        """Queue a delivery. Returns what the overflow policy dropped (maybe the new one)."""
        size = delivery.message.size
        if size > self.max_bytes:
            return [delivery]
        dropped: list[Delivery] = []
        while len(self.queue) >= self.max_messages or self.queued_bytes + size > self.max_bytes:
            if not self.drop_oldest or not self.queue:
                return [delivery]
            oldest = self.queue.popleft()
            self.queued_bytes -= oldest.message.size
            dropped.append(oldest)
        self.queue.append(delivery)
        self.queued_bytes += size
        return dropped

    def requeue_front(self, delivery: Delivery) -> None:
        """Put a delivery back at the head (a QoS 0 that could not be written)."""
        self.queue.appendleft(delivery)
        self.queued_bytes += delivery.message.size

    def pop(self) -> Delivery | None:
        """Take the oldest queued delivery."""
        if not self.queue:
            return None
        delivery = self.queue.popleft()
        self.queued_bytes -= delivery.message.size
        return delivery

    def allocate_id(self) -> int:
        """A packet identifier not in flight (1..65535, round robin)."""
        if len(self.inflight) >= 65535:
            raise RuntimeError("no free packet identifier")
        candidate = self._next_id
        while candidate in self.inflight:
            candidate = candidate % 65535 + 1
        self._next_id = candidate % 65535 + 1
        return candidate

    def start(self, delivery: Delivery) -> int:
        """Move a QoS 1/2 delivery into the window; returns its packet identifier."""
        if not delivery.packet_id:
            delivery.packet_id = self.allocate_id()
        self.inflight[delivery.packet_id] = delivery
        return delivery.packet_id

    def acknowledge(self, packet_id: int, qos: int) -> Delivery | None:
        """PUBACK (qos 1) or PUBCOMP (qos 2): the delivery is done."""
        delivery = self.inflight.get(packet_id)
        if delivery is None or delivery.qos != qos or (qos == 2 and not delivery.released):
            return None
        del self.inflight[packet_id]
        return delivery

    def received(self, packet_id: int) -> Delivery | None:
        """PUBREC: the QoS 2 delivery moves to the PUBREL stage."""
        delivery = self.inflight.get(packet_id)
        if delivery is None or delivery.qos != 2:
            return None
        delivery.released = True
        return delivery

    def drop_inflight(self, packet_id: int) -> Delivery | None:
        """Forget a delivery the client refused (v5 PUBACK/PUBREC with a failure code)."""
        return self.inflight.pop(packet_id, None)

    def iter_all(self) -> Iterator[Delivery]:
        """In-flight deliveries (oldest first), then the queue."""
        yield from self.inflight.values()
        yield from self.queue

    def clear(self) -> None:
        """Forget everything (clean start)."""
        self.inflight.clear()
        self.queue.clear()
        self.queued_bytes = 0
