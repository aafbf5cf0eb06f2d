"""`outpost history POINT...`: a point's history, read from the history file.

It reads `<state_dir>/history.db` read-only, beside the running daemon (SQLite's WAL lets a
reader go on while the daemon writes) or after it stopped; it needs no status listener and no
credentials, only read access to the state directory. What it prints is
outpost/history_api.py's answer: `--json` as is, else one line per sample or bucket.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from outpost.history_api import DEFAULT_MAX_POINTS, HistoryRequestError, history_answer
from storage.history.reader import HistoryReader
from storage.history.schema import FILE_NAME, HistoryFileError


def add_parser(sub: Any, default_config: Path) -> None:
    """`outpost history` and its options."""
    history = sub.add_parser("history", help="a point's history on this gateway (raw samples "
                             "or min/max/mean buckets)")
    history.add_argument("point", nargs="+", metavar="POINT", help="device/point (several: "
                         "one series each)")
    history.add_argument("--since", help="ISO 8601, epoch ms, or relative: -1h, -24h, -7d "
                         "(default: an hour before --until)")
    history.add_argument("--until", help="same forms (default: now)")
    history.add_argument("--step", help="bucket length (10s, 1m, 15m, 1h; default: raw "
                         "samples when they fit in --max-points, else a round step)")
    history.add_argument("--max-points", type=int, default=DEFAULT_MAX_POINTS,
                         help=f"most samples or buckets per point (default {DEFAULT_MAX_POINTS})")
    history.add_argument("--json", action="store_true", help="the answer of /history.json")
    history.add_argument("--state-dir", type=Path, help="default: [storage] state_dir of the "
                         "configuration, else /var/lib/outpost")
    history.add_argument("--config", type=Path,
                         help=f"TOML configuration file (default: {default_config} if present)")


def run(args: argparse.Namespace, state_dir: Path) -> int:
    """Prints the answer; 0 done, 1 an unknown point, 2 a bad option or no history file."""
    params: dict[str, str | list[str]] = {"point": list(args.point),
                                          "max_points": str(args.max_points)}
    for key in ("since", "until", "step"):
        value = getattr(args, key)
        if value is not None:
            params[key] = value
    reader = HistoryReader(Path(state_dir) / FILE_NAME)
    try:
        answer = history_answer(reader, params, int(time.time() * 1000))
    except (HistoryRequestError, HistoryFileError) as exc:
        print(f"outpost history: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(answer, separators=(",", ":")))
    else:
        for series in answer["series"]:
            _print_series(series)
    unknown = [s["point"] for s in answer["series"] if s.get("error")]
    for name in unknown:
        print(f"outpost history: {name}: unknown point (no value of it was recorded)",
              file=sys.stderr)
    return 1 if unknown else 0


def _print_series(series: dict[str, Any]) -> None:
    unit = f" {series['unit']}" if series["unit"] else ""
    step = series["step_ms"]
    shown = "raw samples" if step == 0 else f"{step / 1000:g} s buckets: mean min max"
    print(f"# {series['point']} ({len(series['t'])} {shown}{',' + unit if unit else ''})")
    texts = series.get("text")
    for i, t in enumerate(series["t"]):
        when = datetime.fromtimestamp(t / 1000, UTC).isoformat(timespec="milliseconds")
        value = series["value"][i]
        shown_value = texts[i] if texts and texts[i] is not None else _number(value)
        if series["min"] is not None:
            print(f"{when}  {shown_value}  {_number(series['min'][i])}  "
                  f"{_number(series['max'][i])}")
        else:
            quality = series.get("quality")
            flag = f"  ({quality[i]})" if quality and quality[i] != "good" else ""
            print(f"{when}  {shown_value}{flag}")


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.6g}"
