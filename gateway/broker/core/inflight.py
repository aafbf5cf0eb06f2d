"""Outgoing messages of one session: the in-flight window and the bounded queue behind it.

How this works: a `Delivery` is one message on its way to one session. QoS 1/2 deliveries get a
packet identifier when they enter the in-flight window (at most `window` of them, the smaller of
the client's receive maximum and ours) and stay there until PUBACK or PUBCOMP. Everything else
waits in the queue: QoS 1/2 beyond the window, messages for an offline session, and QoS 0
messages while the connection's socket buffer is full. The queue is bounded in messages and
bytes; on overflow the policy drops the oldest queued message or the new one, and the caller is
told which so it can count and log the drop.

Spilling: with a durable store, at most `page` queued deliveries of a persistent session are
kept in memory. Further ones (already stored by the store, so they carry a `store_seq`) are only
counted in `spilled`; when the in-memory queue runs dry, `refill` pulls the next page from the
store in `store_seq` order. Everything spilled is newer than everything in memory, so order
holds; a QoS 0 message (never stored) arriving while deliveries are spilled is dropped and counted.

Bytes are `Message.queued_cost`: topic + payload + the objects around them, so the byte cap is
close to the memory a full queue really takes (spilled deliveries are counted the same way).
Every queue of the broker also shares one `QueueBudget` (bytes in memory, all sessions): past
it, a stored delivery of a persistent session is spilled even within its page, and otherwise
the session's overflow policy applies (its oldest queued messages go, or the new one).

Memory: an idle client's session is mostly an empty `Outbound`, so the queue (a deque costs
about 760 bytes even when empty) is only allocated when the first delivery is queued; until then
`queue` reads as an empty tuple. The in-flight dict is shared until the first delivery, and the
bounds are one `QueueLimits` shared by every session created under the same configuration.

Pure and synchronous.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from gateway.broker.core.message import Message


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
    store_seq: int = 0  # set by a durable store: order and identity on disk


# Loads up to `limit` stored deliveries with store_seq > after (the store's load_deliveries).
PageLoader = Callable[[int, int], list[Delivery]]


class QueueBudget:
    """Bytes queued in memory by every session together, and the process-wide limit."""

    __slots__ = ("limit", "used")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0

    def full(self, more: int = 0) -> bool:
        """Would `more` bytes take the queues past the limit?"""
        return self.used + more > self.limit


#: the in-flight window of every session with nothing in flight: shared and never written (an
#: empty dict costs 64 bytes per idle client); `Outbound.start` gives a session its own
_NOTHING_IN_FLIGHT: dict[int, Delivery] = {}


@dataclass(frozen=True, slots=True)
class QueueLimits:
    """The bounds of a session's queue (shared by the sessions of one configuration)."""

    max_messages: int
    max_bytes: int
    drop_oldest: bool
    page: int = 1000  # queued deliveries kept in memory while the rest is spilled
    budget: QueueBudget | None = None  # bytes in memory, all sessions

    def grown_to(self, max_messages: int, max_bytes: int, drop_oldest: bool) -> QueueLimits:
        """The bounds after a reload: a queue only grows (nothing queued is dropped)."""
        return QueueLimits(
            max(self.max_messages, max_messages), max(self.max_bytes, max_bytes), drop_oldest,
            self.page, self.budget,
        )


class Outbound:
    """In-flight window and queue of one session."""

    __slots__ = ("_next_id", "_queue", "_queued_bytes", "inflight", "last_seq", "limits",
                 "spilled", "spilled_bytes")

    def __init__(self, limits: QueueLimits) -> None:
        # read freely; add only through `start` (the empty one is shared)
        self.inflight: dict[int, Delivery] = _NOTHING_IN_FLIGHT
        self._queue: deque[Delivery] | None = None  # allocated by the first queued delivery
        self.limits = limits
        self._queued_bytes = 0
        self.spilled = 0
        self.spilled_bytes = 0
        self.last_seq = 0  # highest store_seq that has been in memory
        self._next_id = 1

    @property
    def queue(self) -> Sequence[Delivery]:
        """The queued deliveries in memory, oldest first (read only: use the methods)."""
        return self._queue if self._queue is not None else ()

    def _allocated(self) -> deque[Delivery]:
        if self._queue is None:
            self._queue = deque()
        return self._queue

    def __len__(self) -> int:
        """Queued deliveries, in memory and spilled."""
        queue = self._queue  # not through `queue`: flow control asks once per message
        return (len(queue) if queue is not None else 0) + self.spilled

    @property
    def queued_bytes(self) -> int:
        """`queued_cost` of the deliveries in memory (also counted in the shared budget)."""
        return self._queued_bytes

    @queued_bytes.setter
    def queued_bytes(self, value: int) -> None:
        budget = self.limits.budget
        if budget is not None:
            budget.used += value - self._queued_bytes
        self._queued_bytes = value

    def enqueue(
        self, delivery: Delivery, loader: PageLoader | None = None
    ) -> list[Delivery]:
        """Queue a delivery. Returns what the overflow policy dropped (maybe the new one).

        With a `loader` (durable store, persistent session) a stored delivery beyond the
        in-memory page is spilled instead of kept.
        """
        size = delivery.message.queued_cost
        queue = self._queue
        limits = self.limits
        budget = limits.budget
        if (queue is not None and loader is None and not self.spilled
                and len(queue) < limits.max_messages
                and self._queued_bytes + self.spilled_bytes + size <= limits.max_bytes
                and (budget is None or not budget.full(size))):
            # the common case (a queue in memory, within every limit), once per message
            queue.append(delivery)
            self._queued_bytes += size
            if budget is not None:
                budget.used += size
            self.last_seq = max(self.last_seq, delivery.store_seq)
            return []
        if size > limits.max_bytes or (self.spilled and not delivery.store_seq):
            return [delivery]
        dropped: list[Delivery] = []
        while (
            len(self.queue) + self.spilled >= limits.max_messages
            or self.queued_bytes + self.spilled_bytes + size > limits.max_bytes
        ):
            if not limits.drop_oldest:
                return [delivery]
            if not self.queue and loader is not None:
                self.refill(loader)
            if not self.queue:
                return [delivery]
            oldest = self._allocated().popleft()
            self.queued_bytes -= oldest.message.queued_cost
            dropped.append(oldest)
        if loader is not None and delivery.store_seq and (
            self.spilled or len(self.queue) >= limits.page
            or (budget is not None and budget.full(size))
        ):
            self.spilled += 1
            self.spilled_bytes += size
            return dropped
        if budget is not None and budget.full(size):
            # the process-wide budget: this session's overflow policy, on its own queue
            while limits.drop_oldest and self.queue and budget.full(size):
                oldest = self._allocated().popleft()
                self.queued_bytes -= oldest.message.queued_cost
                dropped.append(oldest)
            if budget.full(size):
                return [*dropped, delivery]
        self._allocated().append(delivery)
        self.queued_bytes += size
        self.last_seq = max(self.last_seq, delivery.store_seq)
        return dropped

    def refill(self, loader: PageLoader) -> None:
        """Pull the next page of spilled deliveries into memory (queue must be empty)."""
        if self.queue or not self.spilled:
            return
        page = loader(self.last_seq, self.limits.page)
        if not page:
            self.spilled = self.spilled_bytes = 0  # the store has nothing more
            return
        for delivery in page:
            self._allocated().append(delivery)
            self.queued_bytes += delivery.message.queued_cost
            self.spilled_bytes -= delivery.message.queued_cost
        self.spilled = max(0, self.spilled - len(page))
        self.spilled_bytes = max(0, self.spilled_bytes) if self.spilled else 0
        self.last_seq = page[-1].store_seq

    def restore_queued(self, delivery: Delivery) -> None:
        """Append a delivery read back from a store (no limits: it was accepted before)."""
        self._allocated().append(delivery)
        self.queued_bytes += delivery.message.queued_cost

    def requeue_front(self, delivery: Delivery) -> None:
        """Put a delivery back at the head (a QoS 0 that could not be written)."""
        self._allocated().appendleft(delivery)
        self.queued_bytes += delivery.message.queued_cost

    def pop(self) -> Delivery | None:
        """Take the oldest queued delivery."""
        queue = self._queue
        if not queue:
            return None
        delivery = queue.popleft()
        # the `queued_bytes` setter, inline: once per queued message
        size = delivery.message.queued_cost
        self._queued_bytes -= size
        budget = self.limits.budget
        if budget is not None:
            budget.used -= size
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
        """Move a QoS 1/2 delivery into the window (under its packet identifier if it has
        one, else a new one); returns the packet identifier."""
        if not delivery.packet_id:
            delivery.packet_id = self.allocate_id()
        if self.inflight is _NOTHING_IN_FLIGHT:
            self.inflight = {}
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
        self._queue = None
        self.queued_bytes = 0
        self.spilled = self.spilled_bytes = 0
