"""The SQLite store: `SqliteStore` implements the broker's persistence hooks.

Modules, one job each: `schema` (named migrations), `recovery` (open, check, move a bad file
aside), `rows` (objects to rows and back), `writer` (the batch and the writer thread),
`store` (the hooks), `admin` (what `outpost db ...` prints), `outbox` (never-reused sequence
numbers for the uplink's outbox).
"""

from storage.sqlite.store import SqliteStore, StoreError

__all__ = ["SqliteStore", "StoreError"]
