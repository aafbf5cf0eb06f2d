"""Fetching an update bundle over HTTPS so that a flaky link costs time, not the download.

How this works: the bundle goes to `<name>.part` in the download folder, with a small
`<name>.part.json` beside it naming the URL, the expected sha256 and the server's validator
(ETag or Last-Modified). When the connection breaks, the next attempt asks only for the rest
(`Range: bytes=<size of the part>-`, with `If-Range` so that a bundle changed on the server is
sent whole again) and appends it; a server that ignores the range (200 instead of 206) starts
the part over. Attempts wait 1, 2, 4... seconds apart (`retry_delay` doubling, at most 60).
When the attempts run out, the part stays, and the next fetch of the same URL and sha256
(the next update command) resumes from it; a part of another URL or sha256 is discarded.
The whole file is checked against the sha256 at the end; a mismatch deletes it.
Refusals that no retry can mend (not https, HTTP errors, no space) leave nothing behind.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import shutil
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

Progress = Callable[[str], None]

CHUNK = 1 << 16
SPACE_MARGIN = 16 << 20  # left free on the data partition after a download
MAX_RETRY_DELAY = 60.0


class UpdateError(Exception):
    """An update was refused or failed; the booted slot is untouched. The text says why."""


class _BrokenError(Exception):
    """The connection broke mid-transfer: worth another attempt."""


@dataclass
class FetchStats:
    """What a fetch cost: bytes received over the network and connections made."""

    received: int = 0
    connections: int = 0


def fetch(url: str, dest_dir: Path, ca_file: Path | None, sha256: str | None,
          progress: Progress, timeout: float = 30.0, attempts: int = 5,
          retry_delay: float = 1.0, stats: FetchStats | None = None) -> Path:
    """Download `url` (https://) into `dest_dir`, resuming a part left by an earlier attempt.

    Raises UpdateError when it cannot fit, the server refuses, the attempts run out (the part
    is kept to resume), or the file does not match `sha256` (deleted)."""
    if not url.startswith("https://"):
        raise UpdateError(f"{url}: only https:// URLs are fetched (or give a file)")
    context = ssl.create_default_context(cafile=str(ca_file) if ca_file else None)
    dest_dir.mkdir(parents=True, exist_ok=True)
    name = Path(urllib.parse.urlsplit(url).path).name or "bundle.raucb"
    part = dest_dir / f"{name}.part"
    meta_file = dest_dir / f"{name}.part.json"
    stats = stats if stats is not None else FetchStats()
    meta = _read_meta(meta_file)
    if meta.get("url") != url or meta.get("sha256") != (sha256 or "").lower():
        _discard(part, meta_file)
        meta = {"url": url, "sha256": (sha256 or "").lower(), "validator": None}
    total: int | None = None
    for attempt in range(1, attempts + 1):
        try:
            total = _attempt(url, context, part, meta, meta_file, timeout, progress, stats)
            break
        except _BrokenError as exc:
            have = part.stat().st_size if part.exists() else 0
            if attempt == attempts:
                raise UpdateError(f"{url}: the download stopped after {have} bytes"
                                  + (f" of {exc.args[1]}" if exc.args[1] else "")
                                  + f" ({attempts} attempts; the {have} bytes are kept and the "
                                  "next update command for this bundle resumes from them)"
                                  ) from None
            delay = min(retry_delay * 2 ** (attempt - 1), MAX_RETRY_DELAY)
            progress(f"download interrupted at {have >> 20} MiB ({exc.args[0]}); resuming in "
                     f"{delay:g} s (attempt {attempt + 1} of {attempts})")
            time.sleep(delay)
        except UpdateError:
            _discard(part, meta_file)
            raise
    digest = file_sha256(part)
    if sha256 is not None and digest != sha256.lower():
        _discard(part, meta_file)
        raise UpdateError(f"{url}: sha256 {digest} is not the expected {sha256}")
    if stats.connections > 1:
        progress(f"downloaded {total} bytes: {stats.received} received over "
                 f"{stats.connections} connections")
    target = dest_dir / name
    part.replace(target)
    meta_file.unlink(missing_ok=True)
    return target


def _attempt(url: str, context: ssl.SSLContext, part: Path, meta: dict[str, Any],
             meta_file: Path, timeout: float, progress: Progress, stats: FetchStats) -> int:
    """One connection: the rest of the file appended to `part`; returns the total size.
    Raises _BrokenError (worth a retry) or UpdateError (not)."""
    offset = part.stat().st_size if part.exists() else 0
    request = urllib.request.Request(url)
    if offset:
        request.add_header("Range", f"bytes={offset}-")
        if meta.get("validator"):
            request.add_header("If-Range", meta["validator"])
    stats.connections += 1
    total: int | None = None
    try:
        with urllib.request.urlopen(request, context=context, timeout=timeout) as response:
            if response.status == 206:
                start, total = _content_range(response.headers.get("Content-Range", ""))
                if start != offset:
                    raise UpdateError(f"{url}: the server sent bytes from {start}, "
                                      f"asked from {offset}")
            else:  # the whole file: a server without ranges, or the bundle changed
                offset = 0
                total = int(response.headers.get("Content-Length") or 0) or None
            if total is not None:
                _check_space(part.parent, total - offset)
            meta["validator"] = response.headers.get("ETag") or response.headers.get(
                "Last-Modified")
            _write_meta(meta_file, meta)
            done = _copy(response, part, offset, total, progress, stats)
    except urllib.error.HTTPError as exc:
        if exc.code == 416 and offset:  # nothing left to send: the part is whole
            return offset
        raise UpdateError(f"{url}: download failed: {exc.reason}") from None
    except http.client.IncompleteRead as exc:
        raise _BrokenError(f"the connection closed early after {len(exc.partial)} more bytes",
                      total) from None
    except (urllib.error.URLError, OSError, ssl.SSLError) as exc:
        reason = getattr(exc, "reason", None) or exc
        if offset == 0 and not part.exists() and isinstance(exc, urllib.error.URLError):
            raise UpdateError(f"{url}: download failed: {reason}") from None
        raise _BrokenError(str(reason), total) from None
    if total is not None and done != total:
        raise _BrokenError(f"{done} of {total} bytes", total)
    return done


def _copy(response: Any, part: Path, offset: int, total: int | None, progress: Progress,
          stats: FetchStats) -> int:
    done = offset
    last = -1
    with part.open("r+b" if offset else "wb") as out:
        out.seek(offset)
        out.truncate()
        try:
            while chunk := response.read(CHUNK):
                out.write(chunk)
                done += len(chunk)
                stats.received += len(chunk)
                percent = done * 100 // total if total else -1
                if percent != last and (percent % 10 == 0 or percent < 0):
                    progress(f"download {done >> 20} MiB" + (f" ({percent}%)" if total else ""))
                    last = percent
        except http.client.IncompleteRead as exc:
            out.write(exc.partial)
            stats.received += len(exc.partial)
            raise
        finally:
            out.flush()
            os.fsync(out.fileno())  # what arrived survives a power cut, to resume from
    return done


def _content_range(text: str) -> tuple[int, int | None]:
    """`bytes 100-199/1000` -> (100, 1000)."""
    try:
        unit, _, spec = text.partition(" ")
        span, _, size = spec.partition("/")
        start = int(span.split("-")[0])
        if unit != "bytes":
            raise ValueError(unit)
    except ValueError:
        raise UpdateError(f"the server answered a range with Content-Range {text!r}") from None
    return start, int(size) if size.isdigit() else None


def _read_meta(path: Path) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def _write_meta(path: Path, meta: dict[str, Any]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(meta, sort_keys=True), encoding="utf-8")
    tmp.replace(path)


def _discard(part: Path, meta_file: Path) -> None:
    part.unlink(missing_ok=True)
    meta_file.unlink(missing_ok=True)


def _check_space(directory: Path, size: int) -> None:
    free = shutil.disk_usage(directory).free
    if size + SPACE_MARGIN > free:
        raise UpdateError(f"not enough space in {directory} for the bundle: it needs "
                          f"{(size + SPACE_MARGIN) >> 20} MiB, {free >> 20} MiB are free")


def file_sha256(path: Path) -> str:
    """The sha256 (hex) of a file."""
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()
