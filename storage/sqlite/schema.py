"""The database schema, created and changed only by named migrations.

Theory of operation: `MIGRATIONS` is a sqlite-utils migration set. Each migration is a named
function; sqlite-utils applies every pending one inside its own transaction together with the
row that records it in `_sqlite_migrations`, so a migration is either fully applied and
recorded or not at all (a crash in the middle leaves the previous version intact). Migrations
are never edited once released: a change is a new migration appended at the end, and a stored
database file of every version lives in `tests/fixtures/db/` to prove the upgrade path.

`meta.schema_version` is the number of migrations applied. A database that records migrations
this code does not know was written by a newer outpost (after an update was rolled back, for
example). Migrations are expand-then-contract (docs/storage.md, "Schema changes across
versions"): an *expand* migration only adds (tables, indexes, columns that are nullable or have a
default), so older code still reads and writes the file; a *contract* migration removes or
changes what older code relies on. `meta.oldest_reader` is the lowest schema version whose code
can use the file: the version of the last contract migration applied (1 while there is none),
written by every outpost that migrates. An older outpost uses a newer file as it is when its own
migrations are all applied and its version is at least `oldest_reader`; otherwise the file is
refused (`NewerSchemaError`, and the store moves it aside intact, see recovery.py).

Layout, chosen for flash (see docs/storage.md):

- `messages` holds each stored message body once (`id` = `Message.store_id`, an increasing
  rowid so inserts append at the right edge of the b-tree), with `refs`, the number of
  deliveries that point at it; the body is deleted when the last one goes.
- `deliveries` is `WITHOUT ROWID`, clustered on `(sid, seq)`: one b-tree, no secondary index,
  a session's queue is one contiguous range (paging is a range scan) and new rows append at
  the end of their session's range. `sid` is a small integer per session, not the client id,
  so every row stays about 20 bytes. `size` (topic + payload, what the broker counts against
  `max_queued_bytes`) is repeated there so queue sizes are summed without touching bodies.
- `retained`, `subscriptions`, `qos2_in` and `meta` are `WITHOUT ROWID` tables keyed by what
  they are looked up by.
- All wall-clock times are integer milliseconds since the epoch (`*_ms`).
- `outbox.seq` is never reused, although acknowledged rows are deleted:
  `meta.outbox_seq_reserved` is the highest seq ever committed (every commit that inserts
  outbox rows raises it to its highest seq), and numbering continues above it and above
  `max(seq)` (see `storage.sqlite.uplink_outbox`).
"""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Callable

from sqlite_utils import Database
from sqlite_utils.migrations import Migrations

_Fn = Callable[[Database], None]

MIGRATION_SET = "outpost"
MIGRATIONS = Migrations(MIGRATION_SET)
KNOWN: list[str] = []  # every migration name, in order
CONTRACTS: set[str] = set()  # the contract migrations (older code cannot use the file after)
OLDEST_READER = "oldest_reader"  # meta key: the lowest schema version that can use the file


def _migration(name: str, contract: bool = False) -> Callable[[_Fn], _Fn]:
    """Register a named migration (sqlite-utils runs it in one transaction with its record).

    `contract=True` marks a migration that older code cannot live with (a dropped or renamed
    column or table, a changed meaning); every other migration must only expand the schema.
    """

    def register(fn: _Fn) -> _Fn:
        KNOWN.append(name)
        if contract:
            CONTRACTS.add(name)
        return MIGRATIONS(name=name)(fn)

    return register


class NewerSchemaError(Exception):
    """The database was written by a newer outpost (it records migrations we do not know)."""


@_migration("0001_core")
def m0001_core(db: Database) -> None:
    """Sessions, subscriptions, queued and in-flight deliveries, incoming QoS 2, retained."""
    for statement in _CORE:
        db.execute(statement)
    _set_meta(db.conn, "schema_version", "1")


@_migration("0002_outbox")
def m0002_outbox(db: Database) -> None:
    """The uplink's store-and-forward outbox."""
    for statement in _OUTBOX:
        db.execute(statement)
    _set_meta(db.conn, "outbox_seq_reserved", "0")
    _set_meta(db.conn, "schema_version", "2")


SCHEMA_VERSION = 2  # == len(KNOWN)

_CORE = (
    """CREATE TABLE meta (
        key TEXT PRIMARY KEY,
        value TEXT NOT NULL
    ) WITHOUT ROWID""",
    """CREATE TABLE sessions (
        sid INTEGER PRIMARY KEY,
        client_id TEXT NOT NULL UNIQUE,
        protocol_level INTEGER NOT NULL,
        expiry_interval INTEGER NOT NULL,
        disconnected_ms INTEGER,
        will_topic TEXT,
        will_payload BLOB,
        will_qos INTEGER,
        will_retain INTEGER,
        will_properties BLOB,
        will_delay INTEGER NOT NULL DEFAULT 0
    )""",
    """CREATE TABLE subscriptions (
        sid INTEGER NOT NULL,
        topic_filter TEXT NOT NULL,
        qos INTEGER NOT NULL,
        no_local INTEGER NOT NULL,
        retain_as_published INTEGER NOT NULL,
        retain_handling INTEGER NOT NULL,
        subscription_id INTEGER,
        PRIMARY KEY (sid, topic_filter)
    ) WITHOUT ROWID""",
    """CREATE TABLE messages (
        id INTEGER PRIMARY KEY,
        topic TEXT NOT NULL,
        payload BLOB NOT NULL,
        qos INTEGER NOT NULL,
        retain INTEGER NOT NULL,
        properties BLOB,
        expires_ms INTEGER,
        stored_ms INTEGER NOT NULL,
        refs INTEGER NOT NULL
    )""",
    "CREATE INDEX messages_expiry ON messages (expires_ms) WHERE expires_ms IS NOT NULL",
    """CREATE TABLE deliveries (
        sid INTEGER NOT NULL,
        seq INTEGER NOT NULL,
        message_id INTEGER NOT NULL,
        qos INTEGER NOT NULL,
        retain INTEGER NOT NULL,
        subscription_ids TEXT,
        packet_id INTEGER NOT NULL,
        released INTEGER NOT NULL,
        size INTEGER NOT NULL,
        PRIMARY KEY (sid, seq)
    ) WITHOUT ROWID""",
    """CREATE TABLE qos2_in (
        sid INTEGER NOT NULL,
        packet_id INTEGER NOT NULL,
        PRIMARY KEY (sid, packet_id)
    ) WITHOUT ROWID""",
    """CREATE TABLE retained (
        topic TEXT PRIMARY KEY,
        payload BLOB NOT NULL,
        qos INTEGER NOT NULL,
        properties BLOB,
        expires_ms INTEGER
    ) WITHOUT ROWID""",
)

_OUTBOX = (
    """CREATE TABLE outbox (
        seq INTEGER PRIMARY KEY,
        topic TEXT NOT NULL,
        payload BLOB NOT NULL,
        qos INTEGER NOT NULL,
        retain INTEGER NOT NULL,
        properties BLOB,
        received_ms INTEGER NOT NULL,
        rule TEXT NOT NULL
    )""",
    # The drain reads per rule in the rule's order (oldest or newest first).
    "CREATE INDEX outbox_rule ON outbox (rule, seq)",
)


# Set by `outpost db backup` in the copy: the store that opens it starts a new epoch.
EPOCH_RENEW = "epoch_renew"


def mark_for_new_epoch(conn: sqlite3.Connection) -> None:
    """Make the first broker that opens this database (a backup copy) start a new epoch."""
    _set_meta(conn, EPOCH_RENEW, "1")


def _set_meta(conn: sqlite3.Connection, key: str, value: str) -> None:
    conn.execute(
        "INSERT INTO meta (key, value) VALUES (?, ?) "
        "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        (key, value),
    )


def applied(conn: sqlite3.Connection) -> list[str]:
    """Names of the migrations recorded in this database, in order."""
    return [m.name for m in MIGRATIONS.applied(Database(conn))]


def migrate(
    conn: sqlite3.Connection, gateway_id: str, stop_before: str | None = None
) -> list[str]:
    """Apply every pending migration; returns the names applied.

    A new database also gets its `epoch` (a UUID that never changes for this file) and
    `gateway_id`. A copy made by `outpost db backup` carries `epoch_renew`: the first broker
    that opens it gives it a new epoch (the old one is kept as `previous_epoch`), because the
    sequence numbers the original handed out after the backup would otherwise be handed out
    again under the same ids. `stop_before` builds older versions (fixtures and tests only).
    """
    db = Database(conn, execute_plugins=False)
    newer = readable_newer_migrations(conn)
    if newer:
        pending = []  # a newer file is used as it is: nothing of it is changed but its rows
    else:
        pending = [m.name for m in MIGRATIONS.pending(db)]
        if stop_before is not None and stop_before in pending:
            pending = pending[: pending.index(stop_before)]
        MIGRATIONS.apply(db, stop_before=stop_before)
    with db.atomic():
        if not newer:
            done = applied(conn)
            oldest = max((KNOWN.index(n) + 1 for n in done if n in CONTRACTS), default=1)
            _set_meta(conn, OLDEST_READER, str(oldest))
        epoch = conn.execute("SELECT value FROM meta WHERE key = 'epoch'").fetchone()
        renew = conn.execute("SELECT 1 FROM meta WHERE key = ?", (EPOCH_RENEW,)).fetchone()
        if epoch is None or renew is not None:
            _set_meta(conn, "epoch", str(uuid.uuid4()))
        if renew is not None:
            if epoch is not None:
                _set_meta(conn, "previous_epoch", str(epoch[0]))
            conn.execute("DELETE FROM meta WHERE key = ?", (EPOCH_RENEW,))
        current = conn.execute("SELECT value FROM meta WHERE key = 'gateway_id'").fetchone()
        if current is None or current[0] != gateway_id:
            _set_meta(conn, "gateway_id", gateway_id)
    return pending


def readable_newer_migrations(conn: sqlite3.Connection) -> list[str]:
    """The migrations of a newer outpost recorded in this file ([] for a file of ours).

    Raises NewerSchemaError unless this outpost can use the file as it is: every migration it
    knows is recorded (in its order, before the newer ones) and the newer outpost wrote an
    `oldest_reader` no higher than this outpost's schema version.
    """
    recorded = applied(conn)
    newer = [name for name in recorded if name not in KNOWN]
    if not newer:
        return []
    row = conn.execute("SELECT value FROM meta WHERE key = ?", (OLDEST_READER,)).fetchone()
    version = len(recorded)
    if recorded[: len(KNOWN)] != KNOWN:
        reason = "its migrations differ from this outpost's"
    elif row is None:
        reason = f"it does not say which versions can read it (no meta.{OLDEST_READER})"
    elif not str(row[0]).isdigit():
        reason = f"meta.{OLDEST_READER} is not a version number: {row[0]!r}"
    elif int(row[0]) > SCHEMA_VERSION:
        reason = f"it needs schema version {int(row[0])} or later to be read"
    else:
        return newer
    raise NewerSchemaError(
        f"database has schema version {version} (migrations this outpost does not know: "
        f"{', '.join(newer)}), this outpost has {SCHEMA_VERSION}: {reason}"
    )


def meta(conn: sqlite3.Connection) -> dict[str, str]:
    """Every `meta` row."""
    return {str(k): str(v) for k, v in conn.execute("SELECT key, value FROM meta")}
