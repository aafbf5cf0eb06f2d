"""Routing a message to sessions and moving it through each session's window and queue.

How this works: `Dispatcher.route` asks the subscription table which subscriptions match,
folds overlapping subscriptions of one client into a single delivery (highest QoS, every
subscription identifier, noLocal honoured per subscription), picks one member per shared group
(online members first, round robin), checks read access, and hands each delivery to `deliver`.
`deliver` writes at once when the session is online and its window and socket buffer allow,
and queues otherwise, applying the overflow policy; a queued delivery for an online client
tells `FlowControl` (gateway/broker/engine/flow_control.py), which decides whether the publisher
is paused. `pump` refills the window and the socket from the queue when an acknowledgement
arrives or the socket drains, and tells `FlowControl` when the queue has drained.

Every write of a PUBLISH goes through `send`, which picks the shared encoding for the shape,
honours the client's maximum packet size and topic aliases, and counts the message.

Pure and synchronous: `now` comes from the caller.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from gateway.broker.codec import encode
from gateway.broker.codec.packets import Publish, PubRel
from gateway.broker.contracts.auth import needs_read_check
from gateway.broker.contracts.config import LimitsConfig
from gateway.broker.contracts.hooks import Access, BrokerHooks
from gateway.broker.core.inflight import Delivery, PageLoader
from gateway.broker.core.log_sampling import clip, worth_logging
from gateway.broker.core.message import Message
from gateway.broker.core.router import SharedGroup, SubOptions, SubscriptionTable
from gateway.broker.core.session import Connection, Session, TopicAliases
from gateway.broker.engine.flow_control import FlowControl

log = logging.getLogger("outpost.broker")

# A QoS 0 message goes to the session queue instead of the socket once this many bytes are
# waiting in the socket buffer: a slow consumer fills its own bounded queue, nobody else's.
HIGH_WATER = 256 * 1024


@dataclass(slots=True)
class Counters:
    """Message counters for `$SYS` and status."""

    received: int = 0
    sent: int = 0
    dropped: int = 0
    expired: int = 0
    too_large: int = 0
    denied: int = 0
    store_full: int = 0
    retained_refused: int = 0  # retained messages over max_retained_messages / _bytes
    # access control and abuse limits (gateway/broker/contracts/auth.py,
    # gateway/broker/net/admission.py)
    auth_failed: int = 0  # CONNECTs refused for bad credentials or anonymity
    auth_delayed: int = 0  # CONNECTs held back by the login throttle
    refused_rate: int = 0  # sockets closed: the address connects too fast
    refused_source: int = 0  # sockets closed: too many connections from the address
    refused_pending: int = 0  # sockets closed: too many connections before CONNECT
    evicted_pending: int = 0  # sockets closed before CONNECT to make room for a newcomer
    refused_busy: int = 0  # CONNECTs refused with 0x89: max_connections clients connected
    refused_timeout: int = 0  # sockets closed: no CONNECT within connect_timeout
    tls_failed: int = 0  # TLS handshakes that failed
    ws_refused: int = 0  # WebSocket upgrade requests refused
    topic_limited: int = 0  # PUBLISH / SUBSCRIBE / will topics over the length or level limit
    subscriptions_limited: int = 0  # SUBSCRIBE filters over max_subscriptions_per_client
    packets_limited: int = 0  # incoming packets over max_packet_size (0x95, closed)


class Dispatcher:
    """Routes messages to sessions; owns the delivery path."""

    def __init__(
        self,
        sessions: dict[str, Session],
        table: SubscriptionTable,
        hooks: BrokerHooks,
        limits: LimitsConfig,
    ) -> None:
        self.sessions = sessions
        self.table = table
        self.hooks = hooks
        self.limits = limits
        self.counters = Counters()
        self.rejected = 0  # deliveries the last route() could not queue
        # READ access is checked per delivery only when some hook restricts reading;
        # a reload of the hooks decides again (access_rules_changed).
        self.check_read = needs_read_check(hooks)
        self.flow = FlowControl(limits)

    def access_rules_changed(self) -> None:
        """Decide again whether READ access is checked per delivery (after a hook reload)."""
        self.check_read = needs_read_check(self.hooks)

    # -- routing -----------------------------------------------------------------------

    def route(self, message: Message, now: float) -> int:
        """Deliver `message` to every matching subscription; returns how many sessions."""
        targets, groups = self.table.match(message.topic)
        if self.flow.congested:
            self.flow.congested.clear()
        if not targets and not groups:
            self.rejected = 0
            return 0
        publisher = message.origin
        sessions = self.sessions
        qos_in = message.qos
        count = 0
        self.rejected = 0
        for matched in targets:
            target = matched.own if matched.no_local and matched.client_id == publisher else matched
            if target is None:
                continue
            session = sessions.get(target.client_id)
            if session is not None and self._may_read(session, message.topic):
                if not self.deliver(
                    session, message, target.qos if target.qos < qos_in else qos_in,
                    message.retain and target.retain_as_published, target.subscription_ids, now,
                ):
                    self.rejected += 1
                count += 1
        for group in groups:
            picked = self._pick_member(group, publisher)
            if picked is not None:
                session, options = picked
                if not self.deliver(
                    session, message, min(options.qos, message.qos),
                    message.retain and options.retain_as_published,
                    (options.subscription_id,) if options.subscription_id else (), now,
                ):
                    self.rejected += 1
                count += 1
        return count

    def _may_read(self, session: Session, topic: str) -> bool:
        if not self.check_read:
            return True
        conn = session.connection
        if conn is None:
            return True  # offline: checked again when the queued message is sent
        if self.hooks.check_acl(conn, topic, Access.READ):
            return True
        self.counters.denied += 1
        return False

    def _pick_member(
        self, group: SharedGroup, publisher: str | None
    ) -> tuple[Session, SubOptions] | None:
        members = list(group.members.items())
        if not members:
            return None
        fallback: tuple[Session, SubOptions] | None = None
        for step in range(len(members)):
            client_id, options = members[(group.cursor + step) % len(members)]
            session = self.sessions.get(client_id)
            if session is None or (options.no_local and client_id == publisher):
                continue
            if session.online:
                group.cursor = (group.cursor + step + 1) % len(members)
                return session, options
            if fallback is None:
                fallback = (session, options)
        group.cursor = (group.cursor + 1) % len(members)
        return fallback

    # -- delivery ----------------------------------------------------------------------

    def deliver(
        self,
        session: Session,
        message: Message,
        qos: int,
        retain: bool,
        subscription_ids: tuple[int, ...],
        now: float,
    ) -> bool:
        """Send or queue one message for one session; False if the queue refused it."""
        delivery = Delivery(message, qos, retain, subscription_ids)
        outbound = session.outbound
        conn = session.connection
        if conn is not None and not conn.closed and not outbound.queue and not outbound.spilled:
            if qos == 0:
                if conn.sink.backlog() < HIGH_WATER:
                    self.send(conn, delivery, now)
                    return True
            elif len(outbound.inflight) < min(conn.client_receive_maximum,
                                              self.limits.max_inflight):  # window(), inline
                if session.persistent:
                    self.hooks.qos_stored(session.client_id, delivery)
                self.send(conn, delivery, now)
                return True
        elif conn is None and qos == 0 and not self.limits.queue_qos0:
            return True  # QoS 0 is not queued for offline sessions unless configured
        spills = qos > 0 and session.persistent and self.hooks.durable
        if qos > 0 and session.persistent:
            self.hooks.qos_stored(session.client_id, delivery)
        accepted = True
        loader = self._loader(session) if spills else None
        for dropped in outbound.enqueue(delivery, loader):
            accepted = accepted and dropped is not delivery
            self._dropped(session, dropped)
        if conn is not None and not conn.closed and conn.receiver is None:
            self.flow.queued(session)
        return accepted

    def _loader(self, session: Session) -> PageLoader:
        client_id = session.client_id
        return lambda after, limit: self.hooks.load_deliveries(client_id, after, limit)

    def _dropped(self, session: Session, delivery: Delivery) -> None:
        session.dropped += 1
        self.counters.dropped += 1
        if delivery.qos > 0 and session.persistent:
            self.hooks.qos_completed(session.client_id, delivery)
        if worth_logging(session.dropped, every=1000, first=1):
            log.warning(
                "queue full for client %s: dropped %d message(s) so far (policy %s)",
                clip(session.client_id), session.dropped, self.limits.queue_overflow,
            )

    def window(self, conn: Connection) -> int:
        """How many QoS 1/2 messages may be in flight towards this connection."""
        return min(conn.client_receive_maximum, self.limits.max_inflight)

    def pump(self, session: Session, now: float) -> None:
        """Move queued deliveries to the connection while the window and socket allow."""
        if session.congested or session.slow:
            # flow control judges such a session by how many messages it takes (`sent` counts
            # only this session's while `_pump` runs)
            sent = self.counters.sent
            self._pump(session, now)
            self.flow.drained(session, self.counters.sent - sent)
        else:
            self._pump(session, now)

    def _pump(self, session: Session, now: float) -> None:
        conn = session.connection
        if conn is None or conn.closed:
            return
        outbound = session.outbound
        window = self.window(conn)
        backlog = conn.sink.backlog
        reader = conn if self.check_read else None  # READ access checked per message
        while True:
            queue = outbound.queue
            if not queue:
                if not outbound.spilled:
                    return
                outbound.refill(self._loader(session))
                if not outbound.queue:
                    return
                continue
            head = queue[0]
            expires_at = head.message.expires_at  # Message.expired(), inline: once per message
            if expires_at is not None and now >= expires_at and not head.packet_id:
                # expired while queued (not once its delivery started)
                outbound.pop()
                self.counters.expired += 1
                if head.qos > 0 and session.persistent:
                    self.hooks.qos_completed(session.client_id, head)
                continue
            if head.qos > 0 and len(outbound.inflight) >= window:
                return
            if backlog() >= HIGH_WATER:
                return
            outbound.pop()
            if reader is not None and not self.hooks.check_acl(
                reader, head.message.topic, Access.READ
            ):
                self.counters.denied += 1
                if head.qos > 0 and session.persistent:
                    self.hooks.qos_completed(session.client_id, head)
                continue
            self.send(conn, head, now)

    def resend_inflight(self, session: Session, now: float) -> None:
        """After a reconnect: resend unacknowledged PUBLISH (DUP) and PUBREL, in order."""
        conn = session.connection
        assert conn is not None
        outbound = session.outbound
        window = self.window(conn)
        in_window = 0
        held: list[Delivery] = []
        for delivery in list(outbound.inflight.values()):
            if delivery.released:
                conn.sink.write(encode(PubRel(delivery.packet_id), conn.version))
                in_window += 1
            elif in_window < window:
                self.send(conn, delivery, now)
                in_window += 1
            else:
                # [MQTT-3.3.4-9] the new connection may allow fewer in flight: the rest wait
                # at the head of the queue, keeping their packet identifiers (resent with DUP).
                del outbound.inflight[delivery.packet_id]
                held.append(delivery)
        for delivery in reversed(held):
            outbound.requeue_front(delivery)

    def send(self, conn: Connection, delivery: Delivery, now: float) -> None:
        """Write one PUBLISH to a connection."""
        message = delivery.message
        session = conn.session
        if conn.receiver is not None:
            # In-process link: hand over the message itself; taking it is acknowledging it.
            self.counters.sent += 1
            conn.receiver.receive(message, delivery.qos, delivery.retain)
            if delivery.qos > 0 and session is not None and session.persistent:
                self.hooks.qos_completed(session.client_id, delivery)
            return
        gated = False
        if delivery.qos > 0 and not delivery.packet_id:
            assert session is not None
            session.outbound.start(delivery)
            if session.persistent:
                self.hooks.qos_updated(session.client_id, delivery)
                # QoS 2: the subscriber will hold this packet id until PUBREL; a restarted
                # broker must resend under the same id, so the id is stored before it is sent.
                gated = delivery.qos == 2 and self.hooks.durable
        elif delivery.qos > 0 and session is not None:
            session.outbound.start(delivery)  # keeps its packet identifier
        new_alias = False
        aliases = conn.aliases
        if aliases is not None and aliases.maximum and conn.is_v5:
            new_alias = message.topic not in aliases.outgoing
            data = self._encode_with_alias(conn, aliases, delivery, now)
        else:
            data = message.encode_for(
                conn.version, delivery.qos, delivery.retain, delivery.packet_id or None, now,
                delivery.subscription_ids, dup=delivery.sent,
            )
        if len(data) > conn.client_max_packet_size:
            # MQTT-3.1.2-25: discard as if it had been delivered.
            self.counters.too_large += 1
            if new_alias and aliases is not None:
                # The client never sees this packet, so it must not learn the alias from it.
                aliases.outgoing.pop(message.topic, None)
            if delivery.qos > 0 and session is not None:
                session.outbound.inflight.pop(delivery.packet_id, None)
                if session.persistent:
                    self.hooks.qos_completed(session.client_id, delivery)
            return
        delivery.sent = True
        self.counters.sent += 1
        conn.sink.write(data, gated)

    def _encode_with_alias(
        self, conn: Connection, aliases: TopicAliases, delivery: Delivery, now: float
    ) -> bytes:
        message = delivery.message
        outgoing = aliases.outgoing
        alias = outgoing.get(message.topic)
        topic = message.topic
        if alias is not None:
            topic = ""
        elif len(outgoing) < aliases.maximum:
            alias = len(outgoing) + 1
            outgoing[message.topic] = alias
        props = message.v5_properties(delivery.subscription_ids, message.remaining_expiry(now),
                                      alias)
        packet = Publish(
            topic, message.payload, delivery.qos, delivery.retain, delivery.sent,
            delivery.packet_id or None, props,
        )
        return encode(packet, conn.version)
