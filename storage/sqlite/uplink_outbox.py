"""The uplink's outbox in `outpost.db`, written in the store's own group commits.

How this works: `append` puts the row into the store's current batch, so the record commits in
the same transaction as everything else the publish changed — the publisher's PUBACK, which
waits for that commit, therefore implies the record is stored. Sequence numbers come from one
counter that continues above both the highest row and `meta.outbox_seq_reserved`, which every
commit with new rows raises to its highest number: acknowledged rows are deleted, but a number
is never handed out twice, and nothing skips numbers after a crash (a number only reaches the
cloud once its row committed; an uncommitted one is simply reused). `read` serves committed rows
through the store's read connection, hiding deletions still waiting for their commit. Caps per
rule are kept with in-memory counts (loaded at start): drop-oldest trims the rule's oldest rows
in the commit, drop-newest refuses the new row; the byte cap of drop-oldest trims by the rule's
average row size, so it is approximate.
"""

from __future__ import annotations

from collections.abc import Iterable

from bridge.uplink.envelope import OutboxRecord
from bridge.uplink.outbox import OutboxStats, RuleLimits
from gateway.codec.packets import NO_PROPERTIES, Properties
from gateway.codec.properties import decode_properties, encode_properties
from storage.sqlite.store import SqliteStore

_COLUMNS = "seq, topic, payload, qos, retain, properties, received_ms"


class SqliteOutbox:
    """`bridge.uplink.outbox.Outbox` on the `outbox` table."""

    def __init__(self, store: SqliteStore) -> None:
        self.store = store
        self.epoch = store.meta["epoch"]
        conn = store.reader
        reserved = conn.execute(
            "SELECT value FROM meta WHERE key = 'outbox_seq_reserved'"
        ).fetchone()
        top = conn.execute("SELECT max(seq) FROM outbox").fetchone()[0]
        self._next = max(int(reserved[0]) if reserved else 0, int(top or 0)) + 1
        self.counts: dict[str, int] = {}
        self.sizes: dict[str, int] = {}
        for rule, count, size in conn.execute(
            "SELECT rule, count(*), sum(length(topic) + length(payload)) FROM outbox GROUP BY rule"
        ):
            self.counts[str(rule)] = int(count)
            self.sizes[str(rule)] = int(size or 0)
        self.dropped = 0
        self._handed: dict[int, tuple[str, int]] = {}  # seq -> (rule, size) of rows read
        self._deleting: set[int] = set()

    def next_seq(self) -> int:
        seq = self._next
        self._next += 1
        return seq

    def append(self, record: OutboxRecord, limits: RuleLimits) -> int:
        rule, size = record.rule, record.size
        count = self.counts.get(rule, 0)
        total = self.sizes.get(rule, 0)
        over_count = count + 1 - limits.max_messages
        over_bytes = total + size - limits.max_bytes
        if size > limits.max_bytes or (
            (over_count > 0 or over_bytes > 0) and not limits.drop_oldest
        ):
            self.dropped += 1
            return 1
        trim = max(over_count, 0)
        if over_bytes > 0 and count:
            average = max(total // count, 1)
            trim = max(trim, -(-over_bytes // average))
        trim = min(trim, count)
        batch = self.store.outbox_batch()
        if trim:
            batch.outbox_trims.append((rule, trim))
            self.dropped += trim
            count -= trim
            total -= trim * (total // max(count + trim, 1))
        props = NO_PROPERTIES
        if record.user_properties or record.content_type:
            props = Properties(
                user_properties=record.user_properties, content_type=record.content_type
            )
        batch.outbox_inserts.append((
            record.seq, record.topic, record.payload, record.qos, int(record.retain),
            encode_properties(props, "PUBLISH"), record.received_ms, rule,
        ))
        batch.outbox_top = max(batch.outbox_top, record.seq)
        self.counts[rule] = count + 1
        self.sizes[rule] = max(total, 0) + size
        return trim

    def read(
        self, rule: str, limit: int, newest_first: bool, exclude: set[int]
    ) -> list[OutboxRecord]:
        hidden = exclude | self._deleting
        order = "DESC" if newest_first else "ASC"
        rows = self.store.reader.execute(
            f"SELECT {_COLUMNS} FROM outbox WHERE rule = ? ORDER BY seq {order} LIMIT ?",
            (rule, limit + len(hidden)),
        ).fetchall()
        out: list[OutboxRecord] = []
        for seq, topic, payload, qos, retain, blob, received_ms in rows:
            if seq in hidden:
                continue
            props, _ = decode_properties(blob, 0, len(blob), "PUBLISH") if blob else (
                NO_PROPERTIES, 0
            )
            record = OutboxRecord(
                seq, rule, topic, bytes(payload), qos, bool(retain), received_ms,
                props.user_properties, props.content_type,
            )
            self._handed[seq] = (rule, record.size)
            out.append(record)
            if len(out) >= limit:
                break
        return out

    def delete(self, seqs: Iterable[int]) -> None:
        done = [seq for seq in seqs if seq not in self._deleting]
        if not done:
            return
        batch = self.store.outbox_batch()
        batch.outbox_deletes.extend(done)
        self._deleting.update(done)
        batch.on_committed.append(lambda: self._deleting.difference_update(done))
        for seq in done:
            rule, size = self._handed.pop(seq, ("", 0))
            if rule:
                self.counts[rule] = max(self.counts.get(rule, 1) - 1, 0)
                self.sizes[rule] = max(self.sizes.get(rule, size) - size, 0)

    def stats(self) -> OutboxStats:
        # The lowest seq is the oldest arrival (an index lookup, not a scan).
        row = self.store.reader.execute(
            "SELECT received_ms FROM outbox ORDER BY seq LIMIT 1"
        ).fetchone()
        return OutboxStats(
            sum(self.counts.values()), sum(self.sizes.values()),
            None if row is None or row[0] is None else int(row[0]), self.dropped,
        )

