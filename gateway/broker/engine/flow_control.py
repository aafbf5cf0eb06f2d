"""Backpressure: a publisher stops being read while the queues its messages go into are full.

How this works: when a delivery has to wait in an online session's queue (its in-flight window
or socket buffer is full) and that queue passes the high-water mark, the session is *congested*.
Every client whose PUBLISH is routed into a congested session is paused: the core calls
`Sink.pause_reading` and the I/O layer stops reading that socket, so TCP pushes back on the
publisher instead of the broker buffering (and, at the queue limit, dropping) its messages. When
the session's queue drains below the low-water mark, every publisher paused for it is resumed.

Only a consumer that keeps up may slow publishers down. A session that keeps a publisher paused
longer than `STALL_SECONDS` and delivered less than the gap between the two marks per
`STALL_SECONDS` meanwhile (its subscriber is stalled, or drains slower than the pause bets on)
is marked *slow*: its publishers are resumed and it pauses nobody; meanwhile its own queue limit
and overflow policy apply to it alone. It stops being slow when its queue drains below the
low-water mark, or as soon as it delivers at that rate again: a subscriber marked slow while the
broker itself was starved of CPU would otherwise stay slow for good, because publishers that are
never paused outrun it and its queue never drains. Progress, not the publisher's waiting time,
is what counts: a pause also lasts while the broker does not run at all. Offline sessions and
in-process links never pause anyone. A session whose own client is paused cannot drain (its
acknowledgements are not being read), so it never pauses a publisher, and pausing a client
resumes the publishers waiting for it: two clients publishing to each other cannot deadlock.

Pure and synchronous: `now` comes from the caller.
"""

from __future__ import annotations

import logging

from gateway.broker.contracts.config import LimitsConfig
from gateway.broker.core.log_sampling import worth_logging
from gateway.broker.core.session import Connection, Session

log = logging.getLogger("outpost.broker")

# Queued messages (and bytes) of one online session above which its publishers are paused;
# half the queue limit when that is lower, so a burst that arrives in one read still fits.
# The low-water mark, where they are resumed, is a quarter of it: enough queued to keep the
# subscriber busy while the publishers' next packets arrive.
HIGH_WATER_MESSAGES = 128
HIGH_WATER_BYTES = 1024 * 1024
# A session that keeps a publisher paused for longer than this is slow: it stops pausing.
STALL_SECONDS = 1.0


class FlowControl:
    """Which publishers are paused for which sessions."""

    def __init__(self, limits: LimitsConfig) -> None:
        self.high_messages = max(1, min(HIGH_WATER_MESSAGES, limits.max_queued_messages // 2))
        self.high_bytes = max(1, min(HIGH_WATER_BYTES, limits.max_queued_bytes // 2))
        self.low_messages = self.high_messages // 4
        self.low_bytes = self.high_bytes // 4
        self.congested: list[Session] = []  # congested sessions the current route() fed
        # Kept here, not on every connection and session: only the paused few pay for it.
        self.waits_for: dict[Connection, set[Session]] = {}  # paused publisher -> sessions
        self.paused_for: dict[Session, set[Connection]] = {}  # session -> paused publishers
        self.slow_sessions = 0  # times a session was found too slow to pause for
        self.recovered_sessions = 0  # times a slow session was found to keep up again
        # a session keeps up while it delivers the gap between the marks per STALL_SECONDS
        self.gap_messages = self.high_messages - self.low_messages
        # congested and slow sessions: messages delivered since the last `check_stalls`
        self.delivered: dict[Session, int] = {}
        self.checked_at: float | None = None

    def queued(self, session: Session) -> None:
        """A delivery for an online `session` went to its queue: is it congested now?"""
        if session.slow:
            return
        outbound = session.outbound
        if not session.congested and (
            len(outbound) >= self.high_messages
            or outbound.queued_bytes + outbound.spilled_bytes >= self.high_bytes
        ):
            session.congested = True
        if session.congested:
            self.congested.append(session)

    def pause(self, publisher: Connection, now: float) -> None:
        """`publisher` just fed the sessions in `congested`: pause it for those that drain."""
        sessions, self.congested = self.congested, []
        for session in sessions:
            subscriber = session.connection
            if subscriber is None or subscriber is publisher or subscriber.paused:
                continue  # cannot drain while its own client is unread
            self.paused_for.setdefault(session, set()).add(publisher)
            self.waits_for.setdefault(publisher, set()).add(session)
        if publisher.paused or publisher not in self.waits_for:
            return
        publisher.paused = True
        publisher.paused_since = now
        publisher.sink.pause_reading()
        own = publisher.session
        if own is not None and own in self.paused_for:
            # Those publishers wait for this client's acknowledgements, which are unread now:
            # let them go rather than wait for each other.
            self.release(own)

    def drained(self, session: Session, delivered: int = 0) -> None:
        """The session's queue shrank (`delivered` messages went out): below the low-water
        mark its publishers resume."""
        if delivered:
            self.delivered[session] = self.delivered.get(session, 0) + delivered
        outbound = session.outbound
        if len(outbound) > self.low_messages or (
            outbound.queued_bytes + outbound.spilled_bytes > self.low_bytes
        ):
            return
        session.congested = session.slow = False
        self.release(session)

    def release(self, session: Session) -> None:
        """Resume every publisher paused for `session` (unless others still hold it)."""
        for publisher in self.paused_for.pop(session, ()):
            waiting = self.waits_for.get(publisher)
            if waiting is not None:
                waiting.discard(session)
                if waiting:
                    continue
                del self.waits_for[publisher]
            publisher.paused = False
            if not publisher.closed:
                publisher.sink.resume_reading()

    def forget(self, conn: Connection) -> None:
        """`conn` is gone: it waits for nothing, and sessions stop counting on it."""
        for session in self.waits_for.pop(conn, ()):
            publishers = self.paused_for.get(session)
            if publishers is not None:
                publishers.discard(conn)
                if not publishers:
                    del self.paused_for[session]
        conn.paused = False
        own = conn.session
        if own is not None and own.connection is conn:
            own.congested = own.slow = False
            self.release(own)

    def check_stalls(self, now: float) -> None:
        """Every half second or so: mark sessions slow that kept a publisher paused for longer
        than STALL_SECONDS without delivering at the rate the pause bets on, and unmark slow
        sessions that deliver at that rate again."""
        interval = STALL_SECONDS if self.checked_at is None else now - self.checked_at
        self.checked_at = now
        needed = max(1.0, self.gap_messages * min(interval, STALL_SECONDS) / STALL_SECONDS)
        delivered, self.delivered = self.delivered, {}
        for session, count in delivered.items():
            if session.slow and count >= needed and session.online:
                # it keeps up again: pausing its publishers is worth it once more (the next
                # delivery it has to queue makes it congested)
                session.slow = False
                self.recovered_sessions += 1
                if worth_logging(self.recovered_sessions, every=1000, first=10):
                    log.info(
                        "client %s drains its queue again (%d queued): publishers are paused "
                        "for it again", session.client_id, len(session.outbound),
                    )
        stalled = {
            session
            for publisher, sessions in self.waits_for.items()
            if now - publisher.paused_since >= STALL_SECONDS
            for session in sessions
            if delivered.get(session, 0) < needed
        }
        for session in stalled:
            session.slow = True
            session.congested = False
            self.slow_sessions += 1
            if worth_logging(self.slow_sessions, every=1000, first=10):
                log.warning(
                    "client %s drains its queue too slowly (%d queued): publishers are no "
                    "longer paused for it; its queue limit applies (%d slow so far)",
                    session.client_id, len(session.outbound), self.slow_sessions,
                )
            self.release(session)
