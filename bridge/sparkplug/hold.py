"""Where the edge node keeps DATA while the primary host is offline: the outbox.

How this works: `OutboxHold` stores every held value as one record of rule `sparkplug` in the
gateway's store-and-forward outbox (gateway/base/outbox.py: `outpost.db` with a state
directory, else memory), so with a state directory held values survive a restart of the
gateway. The record's topic is `<device>/<point>`, its payload `{"value": ..., "ts": <ms>}`;
the outbox's cap per rule (`hold_max`, drop-oldest) bounds it. `take` hands out the committed
records oldest first and deletes them; records appended in the last group commit window are
not readable yet, so `waiting` tells the node to take again shortly.
"""

from __future__ import annotations

import json
import logging

from bridge.point import Value
from gateway.base.outbox import Outbox, OutboxRecord, RuleLimits

log = logging.getLogger("outpost.sparkplug")
RULE = "sparkplug"
Held = tuple[str, str, Value, int]  # device, point, value, read time (epoch ms)


class OutboxHold:
    """Held values as outbox records of rule `sparkplug`."""

    def __init__(self, outbox: Outbox, limit: int) -> None:
        self.outbox = outbox
        self.limits = RuleLimits(max_messages=max(limit, 1), max_bytes=1 << 40, drop_oldest=True)
        self.limit = limit
        self.dropped = 0
        left = outbox.read(RULE, 1 << 30, False, set())  # from before a restart
        outbox.release(r.seq for r in left)
        self.count = len(left)
        if left:
            log.info("sparkplug: %d value(s) held from before the restart", len(left))

    def add(self, device: str, point: str, value: Value, ts_ms: int) -> None:
        if self.limit == 0:
            return
        payload = json.dumps({"value": value, "ts": ts_ms}, separators=(",", ":")).encode()
        record = OutboxRecord(self.outbox.next_seq(), RULE, f"{device}/{point}", payload, 0,
                              False, ts_ms)
        removed = self.outbox.append(record, self.limits)
        self.count += 1 - removed
        if removed:
            self.dropped += removed
            _dropped(self.dropped, self.limit)

    def take(self) -> list[Held]:
        records = self.outbox.read(RULE, 1 << 30, False, set())
        self.outbox.delete(r.seq for r in records)
        self.count -= len(records)
        taken: list[Held] = []
        for record in records:
            device, _, point = record.topic.partition("/")
            data = json.loads(record.payload)
            taken.append((device, point, data["value"], int(data["ts"])))
        return taken

    @property
    def waiting(self) -> bool:
        return self.count > 0


def _dropped(total: int, limit: int) -> None:
    if total == 1 or total % 1000 == 0:
        log.warning("sparkplug: %d held value(s) dropped (hold_max %d)", total, limit)
