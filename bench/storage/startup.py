"""Start-up with 100,000 retained messages and 1,000 persistent sessions.

    .venv/bin/python -m bench.storage.startup [--retained 100000] [--sessions 1000]
        [--queued-per-session 10]

A store is built (`bench.storage.prefill`) with `--retained` retained 64-byte messages and
`--sessions` offline persistent sessions, each subscribed to its own filter with
`--queued-per-session` queued messages. The figure is the time from spawning
`outpost run --state-dir` until it answers an MQTT CONNECT (file check with
`PRAGMA quick_check`, migrations, restore of every session and retained message, listeners
bound), next to the same for an empty store, and the broker's RSS after start.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

from bench.storage import common, prefill

CONFIG = """\
[status]
enabled = false
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--retained", type=int, default=100_000)
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--queued-per-session", type=int, default=10)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    result: dict[str, object] = vars(args) | {"json": None}
    with tempfile.TemporaryDirectory(prefix="outpost-su-", dir=os.environ.get("BENCH_DIR")) as t:
        tmp = Path(t)
        empty_times = []
        for n in range(args.runs):
            b = common.start_outpost(tmp / f"e{n}", tmp / "empty-state", CONFIG)
            empty_times.append(b.ready - b.started)
            b.stop()
        state = tmp / "state"
        sessions = [(f"bench-su-{n}", f"bench/su/{n}/#") for n in range(args.sessions)]
        result["prefill_s"] = round(prefill.fill(
            state, sessions, args.queued_per_session, args.retained), 1)
        result["db_bytes"] = common.dir_bytes(state)
        times = []
        for n in range(args.runs):
            b = common.start_outpost(tmp / f"r{n}", state, CONFIG)
            times.append(b.ready - b.started)
            result["rss_kib"] = common.rss_kib(b.pid)
            b.stop()
        result["start_to_accepting_s"] = [round(x, 2) for x in times]
        result["empty_store_start_s"] = [round(x, 2) for x in empty_times]
    common.report(result, args.json)


if __name__ == "__main__":
    main()
