"""`outpost run` with the store's tuning constants overridden (benchmarks only).

    python -m bench.storage.launch --page-size 1024 --wal-autocheckpoint 2000 -- run ...

The store's page size and checkpoint threshold are constants of `storage.sqlite.store`, not
configuration; this launcher patches them before handing the remaining arguments to the
normal `outpost` entry point, so the tuning runs use exactly the production code path.
"""

from __future__ import annotations

import argparse
import sys

from storage.sqlite import store


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--page-size", type=int)
    parser.add_argument("--wal-autocheckpoint", type=int)
    parser.add_argument("--idle-commit", type=float)
    parser.add_argument("rest", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    if args.page_size:
        store.PAGE_SIZE = args.page_size
        defaults = list(store.SqliteStore.__init__.__kwdefaults__ or {})
        assert "page_size" in defaults
        store.SqliteStore.__init__.__kwdefaults__["page_size"] = args.page_size  # type: ignore[index]
    if args.wal_autocheckpoint:
        store.SqliteStore.__init__.__kwdefaults__["wal_autocheckpoint"] = (  # type: ignore[index]
            args.wal_autocheckpoint)
    if args.idle_commit is not None:
        store.IDLE_COMMIT_SECONDS = args.idle_commit
    from outpost.cli import main as outpost_main

    rest = args.rest[1:] if args.rest[:1] == ["--"] else args.rest
    return outpost_main(rest)


if __name__ == "__main__":
    sys.exit(main())
