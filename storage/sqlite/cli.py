"""Printing for `outpost db ...`: each command calls one `storage.sqlite.admin` function.

Output is plain text for people; `--json`-style use goes through the admin functions.
Exit codes: 0 done, 1 a problem was found (`check`), the broker is running (`vacuum`) or the
backup was refused or failed (`backup`: the destination exists, the copy fails its check),
2 no database, no such client or no such directory.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
from pathlib import Path

from storage.sqlite import admin
from storage.sqlite.recovery import StoreLockedError


def run(command: str, state_dir: Path, args: argparse.Namespace) -> int:
    """Run one `outpost db` command; returns the exit code."""
    try:
        return _COMMANDS[command](Path(state_dir), args)
    except FileNotFoundError as exc:
        print(f"outpost db {command}: {exc}", file=sys.stderr)
        return 2
    except LookupError as exc:
        print(f"outpost db {command}: {exc.args[0]}", file=sys.stderr)
        return 2
    except StoreLockedError as exc:
        print(f"outpost db {command}: {exc}; stop the broker first", file=sys.stderr)
        return 1
    except (FileExistsError, admin.BackupError) as exc:
        print(f"outpost db {command}: {exc}", file=sys.stderr)
        return 1
    except sqlite3.Error as exc:
        print(f"outpost db {command}: database error: {exc}", file=sys.stderr)
        return 1


def _stats(state_dir: Path, args: argparse.Namespace) -> int:
    s = admin.stats(state_dir)
    for key in ("path", "schema_version", "epoch", "gateway_id", "file_bytes", "wal_bytes",
                "page_size", "pages", "free_pages", "live_bytes", "oldest_stored_age_s"):
        print(f"{key:22} {s[key]}")
    print("rows")
    for table, count in s["rows"].items():
        print(f"  {table:20} {count}")
    print("queues (client_id  queued  bytes  oldest age s)")
    for q in s["queues"]:
        print(f"  {q['client_id']}  {q['queued']}  {q['bytes']}  {q['oldest_age_s']}")
    return 0


def _sessions(state_dir: Path, args: argparse.Namespace) -> int:
    for s in admin.sessions(state_dir):
        state = "online" if s["online"] else f"offline {s['offline_for_s']} s"
        print(f"{s['client_id']}  v{s['protocol_level']}  expiry {s['expiry_interval']}  {state}"
              f"  queued {s['queued']}  inflight {s['inflight']}"
              f"  qos2-in {s['qos2_awaiting_release']}  will {s['will_topic'] or '-'}")
        for topic_filter, qos in s["subscriptions"].items():
            print(f"    {topic_filter}  qos {qos}")
    return 0


def _queue(state_dir: Path, args: argparse.Namespace) -> int:
    print("seq  packet_id  stage  qos  topic  bytes  age_s")
    for r in admin.queue(state_dir, args.client_id, args.limit):
        stage = "pubrel" if r.released else ("inflight" if r.packet_id else "queued")
        print(f"{r.seq}  {r.packet_id}  {stage}  {r.qos}  {r.topic}  {r.payload_bytes}  {r.age_s}")
    return 0


def _retained(state_dir: Path, args: argparse.Namespace) -> int:
    for r in admin.retained(state_dir, args.filter):
        print(json.dumps(r))
    return 0


def _check(state_dir: Path, args: argparse.Namespace) -> int:
    problems = admin.check(state_dir, full=args.full)
    for line in problems:
        print(line)
    if not problems:
        print("ok")
    return 1 if problems else 0


def _vacuum(state_dir: Path, args: argparse.Namespace) -> int:
    before, after = admin.vacuum(state_dir)
    print(f"vacuumed {admin.db_path(state_dir)}: {before} -> {after} bytes")
    return 0


def _backup(state_dir: Path, args: argparse.Namespace) -> int:
    r = admin.backup(state_dir, args.dest, force=args.force, pages_per_step=args.pages_per_step,
                     sleep=args.sleep_ms / 1000)
    print(f"backed up {r.source} to {r.dest}")
    print(f"{'file_bytes':22} {r.file_bytes}")
    print(f"{'pages':22} {r.pages} x {r.page_size} bytes")
    print(f"{'snapshot':22} " + ("one read transaction on the WAL (writers not blocked)"
                                 if r.snapshot else "rollback journal: stepped copy"))
    print(f"{'steps':22} {r.steps} in {r.seconds} s")
    print(f"{'quick_check':22} ok")
    print("rows")
    for table, count in r.rows.items():
        print(f"  {table:20} {count}")
    return 0


_COMMANDS = {
    "stats": _stats, "sessions": _sessions, "queue": _queue, "retained": _retained,
    "check": _check, "vacuum": _vacuum, "backup": _backup,
}
