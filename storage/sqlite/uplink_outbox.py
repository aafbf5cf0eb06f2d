"""The uplink's outbox in `outpost.db`, written in the store's own group commits.

How this works: `append` puts the row into the store's current batch, so the record commits in
the same transaction as everything else the publish changed — the publisher's PUBACK, which
waits for that commit, therefore implies the record is stored. `read` serves committed rows
through the store's read connection, hiding rows whose deletion still waits for its commit.

Sequence numbers come from one in-memory counter that starts above both the highest row and
`meta.outbox_seq_reserved`; every commit that inserts rows raises that value to the highest seq
it inserts (writer.py). Acknowledged rows are deleted, yet a number is never handed out twice,
and nothing skips numbers after a crash: a number only reaches the cloud once its row
committed, and one whose row never committed is simply handed out again.

Caps per rule (semantics in `bridge.uplink.outbox`): `counts` and `sizes` hold, per rule,
the rows and bytes (topic + payload) the table will hold once the pending batches commit; they
are loaded at start and kept exact, so after every commit they equal the table. Drop-oldest
picks the exact rows to remove on the event loop, oldest first, and deletes them by seq in the
next commit, so the byte cap is exact too (each row's own size, never an average). Removal is
strictly oldest first, so per rule every row up to `_floor` is removed or acknowledged: `read`
hides the rows up to it whose deletion has not committed yet. The oldest committed rows are
read ahead in small chunks (`_head`); rows appended but not yet committed (`_pending`) are the
newest ones and come after every committed row. A removed row that was in flight (`_handed`)
moves to `_removed_in_flight`: its acknowledgement then changes no count, and it counts as
dropped only if the drain releases it unacknowledged.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable

from gateway.base.outbox import OutboxRecord, OutboxStats, RuleLimits
from gateway.broker.codec.packets import NO_PROPERTIES, Properties
from gateway.broker.codec.properties import decode_properties, encode_properties
from storage.sqlite.store import SqliteStore
from storage.sqlite.writer import Batch

_COLUMNS = "seq, topic, payload, qos, retain, properties, received_ms"
_SIZE = "length(topic) + length(payload)"  # = OutboxRecord.size (characters of a TEXT topic)
HEAD_CHUNK = 64  # oldest rows read ahead per query when drop-oldest needs to remove some


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
            f"SELECT rule, count(*), sum({_SIZE}) FROM outbox GROUP BY rule"
        ):
            self.counts[str(rule)] = int(count)
            self.sizes[str(rule)] = int(size or 0)
        self.dropped = 0
        self._handed: dict[int, tuple[str, int]] = {}  # in flight: seq -> (rule, size)
        self._removed_in_flight: set[int] = set()  # removed by a cap while in flight
        self._deleting: set[int] = set()  # acknowledged, deletion not committed yet
        self._floor: dict[str, int] = {}  # rule -> highest seq removed by the cap
        self._head: dict[str, dict[int, int]] = {}  # rule -> oldest committed rows: seq -> size
        self._pending: dict[str, dict[int, int]] = {}  # rule -> appended, not committed yet
        self._batch: Batch | None = None  # the batch `_appended` belongs to
        self._appended: list[tuple[str, int]] = []

    def next_seq(self) -> int:
        seq = self._next
        self._next += 1
        return seq

    def append(self, record: OutboxRecord, limits: RuleLimits) -> int:
        rule, size = record.rule, record.size
        count = self.counts.get(rule, 0)
        total = self.sizes.get(rule, 0)
        over = count + 1 > limits.max_messages or total + size > limits.max_bytes
        if size > limits.max_bytes or (over and not limits.drop_oldest):
            self.dropped += 1
            return 1
        batch = self.store.outbox_batch()
        removed = 0
        while count + 1 > limits.max_messages or total + size > limits.max_bytes:
            oldest = self._take_oldest(rule)
            if oldest is None:  # cannot happen while the counts are exact
                break
            seq, row_size = oldest
            batch.outbox_deletes.append(seq)
            self._floor[rule] = seq
            count -= 1
            total -= row_size
            removed += 1
            if self._handed.pop(seq, None) is not None:
                self._removed_in_flight.add(seq)  # dropped only if released unacknowledged
            else:
                self.dropped += 1
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
        if batch is not self._batch:
            self._batch, self._appended = batch, []
            batch.on_committed.append(functools.partial(self._committed, self._appended))
        self._appended.append((rule, record.seq))
        self._pending.setdefault(rule, {})[record.seq] = size
        self.counts[rule] = count + 1
        self.sizes[rule] = total + size
        return removed

    def _committed(self, appended: list[tuple[str, int]]) -> None:
        """The batch holding `appended` committed: those rows are no longer pending."""
        for rule, seq in appended:
            self._pending.get(rule, {}).pop(seq, None)
        if appended is self._appended:
            self._batch = None  # do not keep the written batch (and its payloads) alive

    def _take_oldest(self, rule: str) -> tuple[int, int] | None:
        """Remove the oldest row of `rule` from the read-ahead: (seq, size), None if none."""
        head = self._head.setdefault(rule, {})
        if not head:
            self._read_ahead(rule, head)
        if head:
            seq = next(iter(head))
            return seq, head.pop(seq)
        pending = self._pending.get(rule)
        if pending:  # every committed row is gone: the oldest not yet committed (the hook
            # appends records in the order it numbers them, so insertion order is seq order)
            seq = next(iter(pending))
            return seq, pending.pop(seq)
        return None

    def _read_ahead(self, rule: str, head: dict[int, int]) -> None:
        """Fill `head` with the next oldest committed rows of `rule` above its floor."""
        after = self._floor.get(rule, 0)
        pending = self._pending.get(rule, {})
        while not head:
            rows = self.store.reader.execute(
                f"SELECT seq, {_SIZE} FROM outbox WHERE rule = ? AND seq > ? "
                "ORDER BY seq LIMIT ?",
                (rule, after, HEAD_CHUNK),
            ).fetchall()
            if not rows:
                return
            for seq, size in rows:
                # Rows being deleted are gone; a committed row whose commit is not known yet
                # is still served from `_pending` (it is newer than every row known committed).
                if seq not in self._deleting and seq not in pending:
                    head[seq] = int(size)
            after = rows[-1][0]

    def read(
        self, rule: str, limit: int, newest_first: bool, exclude: set[int]
    ) -> list[OutboxRecord]:
        hidden = exclude | self._deleting
        order = "DESC" if newest_first else "ASC"
        floor = self._floor.get(rule, 0)
        # The seqs first, from the (rule, seq) index alone: rows in flight (thousands, when
        # batches of a thousand rows are in flight) are skipped without reading their payloads.
        wanted = [seq for (seq,) in self.store.reader.execute(
            f"SELECT seq FROM outbox WHERE rule = ? AND seq > ? ORDER BY seq {order} LIMIT ?",
            (rule, floor, limit + len(hidden)),
        ) if seq not in hidden][:limit]
        if not wanted:
            return []
        rows = self.store.reader.execute(
            f"SELECT {_COLUMNS} FROM outbox WHERE rule = ? AND seq BETWEEN ? AND ? "
            f"ORDER BY seq {order}",
            (rule, min(wanted), max(wanted)),
        ).fetchall()
        chosen = set(wanted)
        out: list[OutboxRecord] = []
        for seq, topic, payload, qos, retain, blob, received_ms in rows:
            if seq not in chosen:
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
        done: list[int] = []
        for seq in seqs:
            handed = self._handed.pop(seq, None)
            if handed is None:  # removed by the cap meanwhile (delivered after all), or unknown
                self._removed_in_flight.discard(seq)
                continue
            rule, size = handed
            done.append(seq)
            self.counts[rule] = self.counts.get(rule, 0) - 1
            self.sizes[rule] = self.sizes.get(rule, 0) - size
            self._head.get(rule, {}).pop(seq, None)
            self._pending.get(rule, {}).pop(seq, None)
        if not done:
            return
        batch = self.store.outbox_batch()
        batch.outbox_deletes.extend(done)
        self._deleting.update(done)
        batch.on_committed.append(lambda: self._deleting.difference_update(done))

    def release(self, seqs: Iterable[int]) -> None:
        for seq in seqs:
            self._handed.pop(seq, None)
            if seq in self._removed_in_flight:
                self._removed_in_flight.discard(seq)
                self.dropped += 1

    def stats(self) -> OutboxStats:
        # The lowest seq is the oldest arrival (an index lookup, not a scan).
        row = self.store.reader.execute(
            "SELECT received_ms FROM outbox ORDER BY seq LIMIT 1"
        ).fetchone()
        return OutboxStats(
            sum(self.counts.values()), sum(self.sizes.values()),
            None if row is None or row[0] is None else int(row[0]), self.dropped,
        )

