"""The configuration versions the console keeps: every text it replaced, with who and why.

How this works: before the console writes outpost.toml it copies the text being replaced into
`<folder of the real file>/outpost.toml.versions/NNNNNN.toml` (the first line a TOML comment
with the time, the user and the change), keeping the newest `keep`. The new text is written
next to the file, fsynced and renamed over it (the real file's folder, through a symbolic link
such as the image's /etc/outpost/outpost.toml), so a power cut leaves the old file or the new
one, never half of either; the file keeps its mode. `list` / `text` serve the history page,
and a roll back is one more write of an old text.
"""

from __future__ import annotations

import os
import stat
import time
from dataclasses import dataclass
from pathlib import Path

KEEP = 20
_HEADER = "# outpost console: "


@dataclass(frozen=True, slots=True)
class Version:
    """One kept text: what the file was before change `number`."""

    number: int
    path: Path
    note: str  # "2026-11-27T14:05:01Z admin: add device meter-1"


def atomic_write(path: Path, text: str) -> None:
    """Replace `path` with `text`: temporary file beside it, fsync, rename, fsync the folder."""
    real = path.resolve()
    try:
        mode = stat.S_IMODE(real.stat().st_mode)
    except FileNotFoundError:
        mode = 0o644
    temporary = real.with_name(f".{real.name}.tmp{os.getpid()}")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, real)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    folder = os.open(real.parent, os.O_RDONLY)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)


class VersionStore:
    """Earlier texts of one configuration file."""

    def __init__(self, config_path: Path, keep: int = KEEP) -> None:
        real = config_path.resolve()
        self.folder = real.with_name(real.name + ".versions")
        self.keep = keep

    def list(self) -> list[Version]:
        """Newest first."""
        found: list[Version] = []
        if not self.folder.is_dir():
            return found
        for path in self.folder.glob("*.toml"):
            if not path.stem.isdigit():
                continue
            with path.open(encoding="utf-8") as handle:
                first = handle.readline()
            note = first[len(_HEADER):].strip() if first.startswith(_HEADER) else ""
            found.append(Version(int(path.stem), path, note))
        return sorted(found, key=lambda v: v.number, reverse=True)

    def text(self, number: int) -> str:
        """The configuration text kept as version `number` (without its note line)."""
        text = (self.folder / f"{number:06d}.toml").read_text(encoding="utf-8")
        return text.split("\n", 1)[1] if text.startswith(_HEADER) else text

    def write(self, path: Path, new_text: str, who: str, what: str) -> int:
        """Keep the current text of `path`, then replace it with `new_text`; returns the number
        of the kept version."""
        current = path.read_text(encoding="utf-8")
        self.folder.mkdir(mode=0o700, exist_ok=True)
        versions = self.list()
        number = versions[0].number + 1 if versions else 1
        when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        note = " ".join(f"{when} {who}: {what}".split())
        atomic_write(self.folder / f"{number:06d}.toml", f"{_HEADER}{note}\n{current}")
        atomic_write(path, new_text)
        for old in versions[self.keep - 1:]:
            old.path.unlink(missing_ok=True)
        return number
