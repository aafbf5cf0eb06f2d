"""The alarms' journal in the state directory: every alarm's state and its recent transitions.

How this works: one small SQLite file, `alarms.sqlite`, in WAL mode with `synchronous = FULL`:
`record(state, transition)` writes the alarm's new state and the transition (unpublished) in
one transaction, and the commit is fsynced before it returns — the runtime calls it *before*
it publishes the transition, so a transition that anybody saw is on the disk. Once the broker
committed the publish (the uplink outbox and the retained store flushed), `published(...)`
marks it. After a restart, `load()` gives every alarm's last state and the transitions not
known to be published; those are published again (the cloud deduplicates on (gateway, alarm,
transition number)). The newest `keep` transitions are kept, older published ones deleted.
Without a state directory the journal is `MemoryJournal`: nothing survives the process.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from bridge.alarms.machine import AlarmState, Transition

FILE_NAME = "alarms.sqlite"
SCHEMA = """
CREATE TABLE IF NOT EXISTS alarm_state (name TEXT PRIMARY KEY, body TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS transition (
    id INTEGER PRIMARY KEY AUTOINCREMENT, alarm TEXT NOT NULL, number INTEGER NOT NULL,
    body TEXT NOT NULL, published INTEGER NOT NULL DEFAULT 0, UNIQUE (alarm, number));
"""


class MemoryJournal:
    """Keeps the recent transitions in memory (no state directory)."""

    def __init__(self, keep: int = 1000) -> None:
        self.keep = keep
        self.states: dict[str, AlarmState] = {}
        self.transitions: list[tuple[Transition, bool]] = []

    def record(self, state: AlarmState, transition: Transition | None) -> None:
        self.states[state.name] = state
        if transition is not None:
            self.transitions.append((transition, False))
            del self.transitions[:-self.keep]

    def published(self, transitions: list[Transition]) -> None:
        done = {(t.alarm, t.number) for t in transitions}
        self.transitions = [(t, p or (t.alarm, t.number) in done) for t, p in self.transitions]

    def load(self) -> tuple[dict[str, AlarmState], list[Transition]]:
        return dict(self.states), [t for t, p in self.transitions if not p]

    def recent(self, limit: int) -> list[Transition]:
        """The newest transitions, newest first."""
        return [t for t, _ in reversed(self.transitions[-limit:])]

    def forget(self, names: set[str]) -> None:
        """Drop the states of alarms no longer configured."""
        for name in names:
            self.states.pop(name, None)

    def close(self) -> None:
        pass


class SqliteJournal(MemoryJournal):
    """The journal on disk, fsynced at every transition."""

    def __init__(self, directory: Path, keep: int = 1000) -> None:
        super().__init__(keep)
        directory.mkdir(parents=True, exist_ok=True)
        self.path = directory / FILE_NAME
        self.db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        self.db.execute("PRAGMA journal_mode = WAL")
        self.db.execute("PRAGMA synchronous = FULL")  # the commit is on disk when it returns
        self.db.executescript(SCHEMA)
        self._recorded = 0

    def record(self, state: AlarmState, transition: Transition | None) -> None:
        with self.db:
            self.db.execute("BEGIN IMMEDIATE")
            self.db.execute("INSERT OR REPLACE INTO alarm_state VALUES (?, ?)",
                            (state.name, json.dumps(state.to_json())))
            if transition is not None:
                self.db.execute(
                    "INSERT OR REPLACE INTO transition (alarm, number, body) VALUES (?, ?, ?)",
                    (transition.alarm, transition.number, json.dumps(transition.to_json())))
                self._recorded += 1
                if self._recorded % 64 == 0:
                    self._trim()

    def _trim(self) -> None:
        self.db.execute("DELETE FROM transition WHERE published = 1 AND id <= "
                        "(SELECT MAX(id) FROM transition) - ?", (self.keep,))

    def published(self, transitions: list[Transition]) -> None:
        with self.db:
            self.db.execute("BEGIN IMMEDIATE")
            self.db.executemany("UPDATE transition SET published = 1 WHERE alarm = ? AND "
                                "number = ?", [(t.alarm, t.number) for t in transitions])

    def load(self) -> tuple[dict[str, AlarmState], list[Transition]]:
        states = {name: AlarmState.from_json(json.loads(body)) for name, body in
                  self.db.execute("SELECT name, body FROM alarm_state")}
        pending = [Transition.from_json(json.loads(body)) for (body,) in self.db.execute(
            "SELECT body FROM transition WHERE published = 0 ORDER BY id")]
        return states, pending

    def recent(self, limit: int) -> list[Transition]:
        return [Transition.from_json(json.loads(body)) for (body,) in self.db.execute(
            "SELECT body FROM transition ORDER BY id DESC LIMIT ?", (limit,))]

    def forget(self, names: set[str]) -> None:
        """Drop the states of alarms no longer configured."""
        with self.db:
            self.db.execute("BEGIN IMMEDIATE")
            self.db.executemany("DELETE FROM alarm_state WHERE name = ?",
                                [(n,) for n in names])

    def close(self) -> None:
        self.db.close()
