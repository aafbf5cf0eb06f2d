"""The aggregates' state file: the open windows, written so that a power cut leaves the old
file or the new one, never half of either.

How this works: `save_windows` writes the whole state to `<path>.tmp`, fsyncs it, renames it
over `<path>` and fsyncs the directory (the rename itself must reach the card). The file is
small (one entry per aggregating point: ~150 bytes) and written every few seconds at most,
only when a window changed. `load_windows` reads it back; a file that does not parse (it
never should) is moved aside as `<path>.corrupt` with a log line, and the windows it held
are reported lost: nothing is dropped silently.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any, Final

log = logging.getLogger("outpost.bridge.aggregate")

VERSION: Final = 1


def save_windows(path: Path, saved_ms: int, windows: dict[str, dict[str, Any]]) -> None:
    """Replace the state file with `windows` (key -> `WindowAccumulator.snapshot()`)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    body = json.dumps({"version": VERSION, "saved_ms": saved_ms, "windows": windows},
                      separators=(",", ":"), sort_keys=True).encode()
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, body)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def load_windows(path: Path) -> dict[str, dict[str, Any]]:
    """The saved windows (empty when there is no file; a corrupt one is moved aside)."""
    try:
        text = path.read_bytes()
    except FileNotFoundError:
        return {}
    try:
        data = json.loads(text)
        if not isinstance(data, dict) or data.get("version") != VERSION:
            raise ValueError(f"version {data.get('version') if isinstance(data, dict) else '?'}"
                             f", expected {VERSION}")
        windows = data["windows"]
        if not isinstance(windows, dict) or not all(isinstance(v, dict)
                                                    for v in windows.values()):
            raise ValueError("'windows' is not an object of objects")
    except (ValueError, KeyError) as exc:
        aside = path.with_name(path.name + ".corrupt")
        os.replace(path, aside)
        log.error("aggregates: %s is unreadable (%s): moved to %s; the windows open at the "
                  "last stop are lost", path, exc, aside.name)
        return {}
    return windows
