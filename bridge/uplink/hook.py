"""The uplink's broker hook: every accepted message matching a forward rule enters the outbox.

How this works: the broker calls `published` for every message it accepts, inside the same
synchronous step that precedes the publisher's acknowledgement; appending here puts the record
in the store's current group commit, so a PUBACK implies the record is stored. Rules are matched
with the broker's own subscription table (one "client" per rule), so matching is cached per
topic. Messages that came in from the cloud carry the inbound link's client id as their origin
and are never forwarded back out. The rules are the configured ones plus the built-in rule per
remote that forwards the uplink's own diagnostics (`UplinkConfig.forward_rules`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from bridge.uplink.config import UplinkConfig
from gateway.base.outbox import Outbox, OutboxRecord, RuleLimits
from gateway.broker.codec.topics import parse_shared
from gateway.broker.contracts.hooks import BrokerHooks
from gateway.broker.core.message import Message
from gateway.broker.core.router import SubOptions, SubscriptionTable
from gateway.broker.core.session import ClientInfo

log = logging.getLogger("outpost.uplink")

INBOUND_CLIENT_ID = "$outpost-uplink-inbound"


class UplinkHook(BrokerHooks):
    """Feeds the outbox from the broker's publish path."""

    def __init__(
        self,
        config: UplinkConfig,
        outbox: Outbox,
        wall_ms: Callable[[], int] = lambda: int(time.time() * 1000),
        *,
        gateway_id: str = "",
    ) -> None:
        self.outbox = outbox
        self.gateway_id = gateway_id
        self.wall_ms = wall_ms
        self.appended = 0
        self.on_append: Callable[[], None] | None = None  # wakes the drain loops
        self.apply(config)

    def apply(self, config: UplinkConfig) -> None:
        """(Re)load the forward rules (also used by a configuration reload)."""
        self.config = config
        self.table = SubscriptionTable()
        self.rules = dict(config.forward_rules(self.gateway_id))
        self.limits = {
            name: RuleLimits(rule.max_messages, rule.max_bytes, rule.overflow == "drop-oldest")
            for name, rule in self.rules.items()
        }
        for name, rule in self.rules.items():
            group, actual = parse_shared(rule.filter)
            self.table.subscribe(name, actual, SubOptions(qos=rule.qos), group)

    def published(self, client: ClientInfo | None, message: Message) -> None:
        if message.origin == INBOUND_CLIENT_ID or not self.config.enabled:
            return
        targets, _ = self.table.match(message.topic)
        if not targets:
            return
        received_ms = self.wall_ms()
        props = message.properties
        for target in targets:
            rule = self.rules[target.client_id]
            if message.qos == 0 and not rule.store_qos0:
                continue  # this rule forwards stored messages only
            record = OutboxRecord(
                self.outbox.next_seq(), target.client_id, message.topic, message.payload,
                message.qos, message.retain, received_ms, props.user_properties,
                props.content_type,
            )
            dropped = self.outbox.append(record, self.limits[target.client_id])
            self.appended += 1
            if self.on_append is not None:
                self.on_append()
            if dropped:
                log.warning(
                    "uplink outbox full for rule %s: dropped %d message(s) (%s)",
                    target.client_id, dropped, rule.overflow,
                )
