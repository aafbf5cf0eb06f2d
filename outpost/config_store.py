"""The versioned configuration store: outpost.toml written atomically, its previous versions kept.

How this works: every write goes through `ConfigStore.write`, which (under an exclusive lock
on the history folder, so the console, a remote configuration and `outpost config rollback`
never interleave) refuses when the file on disk is not the one the caller loaded (its
sha256), records the new version in the history as "writing", writes the file, and then
records it as "written". The caller (the remote configuration, the console) applies it and
records the outcome with `set_result` ("applied", "refused", "rolled back", with a reason).

The file itself is replaced by a fresh temporary file in the same folder, written, fsync'd,
renamed over the old one, and the folder fsync'd: a power cut leaves the old file or the new
one, never a torn one. The image's /etc/outpost/outpost.toml is a symbolic link into the data
partition: the real file it points to is replaced, the link stays. Its mode is kept.

The history lives in the state directory (`config-history/`): one file per version's text
(`<number>.toml`) and `history.json`, the list of versions (number, sha256, time, source,
result, reason), itself replaced atomically. Only the newest `keep` versions are kept (the
running one always). A write cut short is recognised when the store is next opened: its entry
still says "writing", and the file on disk tells whether the rename happened ("written") or
not ("interrupted"). A file edited by hand since the last recorded version is recorded as a
version of its own (source "hand") before anything else, so that a rollback can come back
to it.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Literal

HISTORY_DIR = "config-history"
DEFAULT_KEEP = 20
MAX_CONFIG_BYTES = 1 << 20  # an outpost.toml larger than this is refused

Result = Literal["writing", "written", "applied", "refused", "rolled back", "interrupted"]
RESULTS: tuple[Result, ...] = ("writing", "written", "applied", "refused", "rolled back",
                               "interrupted")
# The results of a version that became the file on disk; "refused" is one that never did.
REACHED_FILE: tuple[Result, ...] = ("written", "applied", "rolled back")


class ConfigStoreError(Exception):
    """A write or a rollback refused; the text says why. The file on disk is untouched."""


class StaleConfigError(ConfigStoreError):
    """The file on disk changed since the caller loaded it (someone else wrote it)."""


@dataclass(frozen=True)
class Version:
    """One recorded version of the configuration file."""

    number: int
    sha256: str
    time: str  # UTC, ISO 8601 to the second
    source: str  # "hand", "console:alice", "remote:<version>", "rollback:<number>", ...
    result: Result
    reason: str = ""
    size: int = 0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Current:
    """The configuration file as it is on disk now."""

    text: str
    sha256: str
    version: int | None  # the recorded version it is, None when it is not recorded


def sha256_text(text: str) -> str:
    """The sha256 (hex) of a configuration text, as the history and the callers use it."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def atomic_write(path: Path, data: bytes, mode: int | None = None) -> None:
    """Replace `path` with `data`: a temporary file beside it, fsync'd, renamed over it, and
    the folder fsync'd (after a power cut: the old content or the new, never a mix)."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def fsync_dir(folder: Path) -> None:
    """Make a rename in `folder` durable."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


class ConfigStore:
    """outpost.toml (`path`) and its recorded versions (under `state_dir`)."""

    def __init__(self, path: Path, state_dir: Path, keep: int = DEFAULT_KEEP) -> None:
        if keep < 2:
            raise ValueError("keep at least 2 versions (the running one and one to go back to)")
        self.path = path
        self.folder = state_dir / HISTORY_DIR
        self.keep = keep

    # -- reading ---------------------------------------------------------------------------

    def current(self) -> Current:
        """The file on disk, its sha256 (pass it to `write` as `expected_sha256`) and the
        recorded version it is."""
        with self._locked() as versions:
            text = self._read_file()
            digest = sha256_text(text)
            return Current(text, digest, _latest_with(versions, digest))

    def history(self) -> list[Version]:
        """Every kept version, oldest first."""
        with self._locked() as versions:
            return list(versions)

    def get(self, number: int) -> Version:
        """One version's record; ConfigStoreError when it is unknown or no longer kept."""
        for version in self.history():
            if version.number == number:
                return version
        raise ConfigStoreError(f"configuration version {number} is not in the history "
                               f"(kept: {self._kept_text()})")

    def show(self, number: int) -> str:
        """The text of a kept version."""
        self.get(number)
        try:
            return self._version_file(number).read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigStoreError(f"configuration version {number}: cannot read "
                                   f"{self._version_file(number)}: {exc.strerror}") from None

    # -- writing ---------------------------------------------------------------------------

    def write(self, text: str, source: str, expected_sha256: str | None = None) -> Version:
        """Record `text` as a new version and make it the file on disk (result "written").

        `expected_sha256`: the sha256 of the file as the caller loaded it (`current()`); when
        the file on disk is no longer that one the write is refused (StaleConfigError) and
        nothing changes. None: write whatever is there now."""
        data = text.encode("utf-8")
        if len(data) > MAX_CONFIG_BYTES:
            raise ConfigStoreError(f"the configuration is {len(data)} bytes, at most "
                                   f"{MAX_CONFIG_BYTES}")
        with self._locked() as versions:
            on_disk = sha256_text(self._read_file())
            if expected_sha256 is not None and on_disk != expected_sha256.lower():
                raise StaleConfigError(
                    f"{self.path} changed since it was loaded (sha256 {on_disk[:12]}, expected "
                    f"{expected_sha256[:12]}): load it again and redo the change")
            return self._write_locked(versions, text, source)

    def record_refused(self, text: str, source: str, reason: str) -> Version:
        """Keep a configuration that was refused before it reached the file (invalid, not
        signed...), so the history shows it; the file on disk is not touched."""
        with self._locked() as versions:
            version = self._new_version(versions, text, source, "refused", reason)
            versions.append(version)
            self._save(versions)
            return version

    def set_result(self, number: int, result: Result, reason: str = "") -> Version:
        """Record what became of a version (applied, refused, rolled back, and why)."""
        if result not in RESULTS:
            raise ValueError(f"unknown result {result!r}")
        with self._locked() as versions:
            for index, version in enumerate(versions):
                if version.number == number:
                    if (version.result in REACHED_FILE) != (result in REACHED_FILE):
                        raise ConfigStoreError(
                            f"configuration version {number} is {version.result}: it cannot "
                            f"become {result} (a written version is undone by a rollback)")
                    versions[index] = replace(version, result=result, reason=reason)
                    self._save(versions)
                    return versions[index]
        raise ConfigStoreError(f"configuration version {number} is not in the history")

    def rollback(self, to: int | None = None, reason: str = "") -> Version:
        """Write an earlier version's text again, as a new version with source
        "rollback:<number>", and mark the version on disk "rolled back" (with `reason`).

        `to` None: the newest version before the one on disk that was applied (or written by
        hand). ConfigStoreError when there is none or `to` is not kept."""
        with self._locked() as versions:
            on_disk = sha256_text(self._read_file())
            running = _latest_with(versions, on_disk)
            target = self._rollback_target(versions, running, on_disk, to)
            try:
                text = self._version_file(target.number).read_text(encoding="utf-8")
            except OSError as exc:
                raise ConfigStoreError(f"configuration version {target.number}: cannot read "
                                       f"its text: {exc.strerror}") from None
            if sha256_text(text) != target.sha256:
                raise ConfigStoreError(f"configuration version {target.number}: its kept text "
                                       "does not match its sha256; not restored")
            if running is not None:
                for index, version in enumerate(versions):
                    if version.number == running:
                        versions[index] = replace(
                            version, result="rolled back",
                            reason=reason or f"rolled back to version {target.number}")
            return self._write_locked(versions, text, f"rollback:{target.number}")

    # -- the parts -------------------------------------------------------------------------

    def _rollback_target(self, versions: list[Version], running: int | None, on_disk: str,
                         to: int | None) -> Version:
        if to is not None:
            for version in versions:
                if version.number == to:
                    if version.result in ("refused", "writing", "interrupted"):
                        raise ConfigStoreError(f"configuration version {to} was never "
                                               f"running ({version.result}); not restored")
                    return version
            raise ConfigStoreError(f"configuration version {to} is not in the history "
                                   f"(kept: {self._kept_text(versions)})")
        for version in reversed(versions):
            if running is not None and version.number >= running:
                continue
            if version.result == "applied" and version.sha256 != on_disk:
                return version
        raise ConfigStoreError("no earlier applied configuration to roll back to")

    def _write_locked(self, versions: list[Version], text: str, source: str) -> Version:
        version = self._new_version(versions, text, source, "writing")
        versions.append(version)
        self._save(versions)
        mode = None
        with contextlib.suppress(OSError):
            mode = self.path.resolve().stat().st_mode & 0o7777
        atomic_write(self.path.resolve(), text.encode("utf-8"), mode)
        version = replace(version, result="written")
        versions[-1] = version
        self._save(versions)
        return version

    def _new_version(self, versions: list[Version], text: str, source: str, result: Result,
                     reason: str = "") -> Version:
        number = (versions[-1].number if versions else 0) + 1
        data = text.encode("utf-8")
        atomic_write(self._version_file(number), data, 0o600)
        return Version(number, sha256_text(text), _now(), source, result, reason, len(data))

    def _read_file(self) -> str:
        try:
            with self.path.open("rb") as f:
                data = f.read(MAX_CONFIG_BYTES + 1)
        except FileNotFoundError:
            return ""
        except OSError as exc:
            raise ConfigStoreError(f"cannot read {self.path}: {exc.strerror}") from None
        if len(data) > MAX_CONFIG_BYTES:
            raise ConfigStoreError(f"{self.path} is larger than {MAX_CONFIG_BYTES} bytes")
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ConfigStoreError(f"{self.path}: not UTF-8 text (byte {exc.start})") from None

    def _version_file(self, number: int) -> Path:
        return self.folder / f"{number:06d}.toml"

    @property
    def _index(self) -> Path:
        return self.folder / "history.json"

    @contextlib.contextmanager
    def _locked(self) -> Iterator[list[Version]]:
        """The versions, under the exclusive lock, after recovering an interrupted write and
        recording a file changed by hand."""
        self.folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        with (self.folder / ".lock").open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            versions = self._load()
            self._recover(versions)
            yield versions

    def _recover(self, versions: list[Version]) -> None:
        for leftover in self.path.resolve().parent.glob(f".{self.path.resolve().name}.*.tmp"):
            leftover.unlink(missing_ok=True)  # a write cut short before its rename
        for leftover in self.folder.glob(".*.tmp"):
            leftover.unlink(missing_ok=True)
        changed = False
        on_disk_text = self._read_file()
        on_disk = sha256_text(on_disk_text)
        for index, version in enumerate(versions):
            if version.result == "writing":
                done = version.sha256 == on_disk
                versions[index] = replace(
                    version, result="written" if done else "interrupted",
                    reason="" if done else "the write was cut short; the file was not replaced")
                changed = True
        if self.path.exists() and _latest_sha(versions) != on_disk:
            versions.append(self._new_version(versions, on_disk_text, "hand", "applied",
                                              "found on disk"))
            changed = True
        if changed:
            self._save(versions)

    def _load(self) -> list[Version]:
        try:
            data = json.loads(self._index.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return []
        except (OSError, ValueError) as exc:
            raise ConfigStoreError(f"{self._index}: unreadable history ({exc}); move it aside "
                                   "to start a new one") from None
        return [Version(**entry) for entry in data.get("versions", [])]

    def _save(self, versions: list[Version]) -> None:
        running = _latest_with(versions, sha256_text(self._read_file()))
        while len(versions) > self.keep:
            index = 0 if versions[0].number != running else 1
            dropped = versions.pop(index)
            self._version_file(dropped.number).unlink(missing_ok=True)
        atomic_write(self._index, (json.dumps(
            {"versions": [v.as_dict() for v in versions]}, indent=1) + "\n").encode(), 0o600)

    def _kept_text(self, versions: list[Version] | None = None) -> str:
        numbers = [v.number for v in (versions if versions is not None else self.history())]
        return f"{numbers[0]}..{numbers[-1]}" if numbers else "none"


def _latest_with(versions: list[Version], sha256: str) -> int | None:
    """The newest version whose text has `sha256` and that reached the file."""
    for version in reversed(versions):
        if version.sha256 == sha256 and version.result in REACHED_FILE:
            return version.number
    return None


def _latest_sha(versions: list[Version]) -> str | None:
    """The sha256 of the newest version that reached the file (what should be on disk)."""
    for version in reversed(versions):
        if version.result in REACHED_FILE:
            return version.sha256
    return None
