"""Changing outpost.toml from the console: propose, review the diff, apply through the reload path.

How this works: every change is a function that edits the file's tomlkit document (so the
comments and layout of everything it does not touch stay as they were). `ConfigFile.propose`
reads the file as it is now, applies the edit, and checks the result exactly as
`outpost check-config` does (`check_text`): TOML, every key of every section, and the files the
listeners name. An invalid result raises `ConfigError` whose lines carry key paths; the pages
show each next to its field (`field_errors`). A valid one becomes a `Proposal`: the new text,
the unified diff the user reviews, and the digest of the text it was made from.

`ConfigFile.apply` writes it only when the file still has that digest: a hand edit made
meanwhile is never overwritten (`StaleFileError` tells the user to review again). The write
goes through the versioned configuration store (outpost/config_store.py: atomic, the
previous versions kept with their source `console:<user>` and result), then the daemon's
reload (the SIGHUP path, outpost/reload.py) applies it and the version is marked "applied"
with the change's summary. A reload that refuses the file rolls back to the version that was
running, so the running configuration and the file agree again.
"""

from __future__ import annotations

import difflib
import secrets
import tomllib
from collections.abc import Callable, Container, Mapping
from dataclasses import dataclass
from pathlib import Path

import tomlkit
from tomlkit.toml_document import TOMLDocument

from gateway.base.settings import ConfigError
from gateway.broker.net.security_files import listener_file_errors
from outpost.config import Config, config_folder, parse_config
from outpost.config_store import ConfigStore, StaleConfigError, Version, sha256_text

Edit = Callable[[TOMLDocument], None]


class StaleFileError(Exception):
    """The file changed since the change was proposed (a hand edit, another session)."""


@dataclass(frozen=True, slots=True)
class Proposal:
    """A checked change waiting for the user's confirmation."""

    id: str
    summary: str
    old_text: str
    new_text: str
    base_digest: str
    back: str  # the page to return to

    @property
    def diff(self) -> str:
        return unified_diff(self.old_text, self.new_text)


def unified_diff(old: str, new: str, old_name: str = "outpost.toml (running)",
                 new_name: str = "outpost.toml (proposed)") -> str:
    lines = difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                                 old_name, new_name, n=2)
    return "".join(line if line.endswith("\n") else line + "\n" for line in lines)


def field_errors(lines: list[str], prefix: str = "") -> tuple[dict[str, str], list[str]]:
    """Split `key.path: message` lines into {path below `prefix`: message} for the fields of
    a form, and the lines that belong to no field of it (shown at the top)."""
    fields: dict[str, str] = {}
    general: list[str] = []
    for line in lines:
        path, sep, message = line.partition(": ")
        if sep and prefix and path.startswith(prefix + "."):
            key = path[len(prefix) + 1:]
            fields[key] = f"{fields[key]}; {message}" if key in fields else message
        elif sep and not prefix and "." in path:
            fields[path] = message
        else:
            general.append(line)
    return fields, general


def keep_fields(errors: Mapping[str, str], general: list[str], inputs: Container[str]
                ) -> tuple[dict[str, str], list[str]]:
    """The errors of `errors` that belong to an input of the form (`inputs`), and `general`
    with every other one added as `key: message`: an error no input shows is never lost."""
    placed = {key: message for key, message in errors.items() if key in inputs}
    rest = [f"{key}: {message}" for key, message in errors.items() if key not in inputs]
    return placed, [*general, *rest]


class ConfigFile:
    """The configuration file the daemon runs from."""

    def __init__(self, path: Path, store: ConfigStore) -> None:
        self.path = path
        self.store = store

    def read(self) -> str:
        return self.path.read_text(encoding="utf-8")

    def document(self) -> tuple[TOMLDocument, str]:
        """The file as a tomlkit document, and its text."""
        text = self.read()
        return tomlkit.parse(text), text

    def check_text(self, text: str) -> Config:
        """What `outpost check-config` checks, on text not yet written."""
        source = str(self.path)
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(source, [f"not valid TOML: {exc}"]) from None
        config = parse_config(data, source, config_folder(self.path))
        errors = listener_file_errors(list(enumerate(config.listeners)))
        if errors:
            raise ConfigError(source, errors)
        return config

    def propose(self, edit: Edit, summary: str, back: str) -> Proposal:
        """The file with `edit` applied, checked; raises `ConfigError` when invalid."""
        document, old = self.document()
        edit(document)
        new = tomlkit.dumps(document)
        return self.propose_text(old, new if new.endswith("\n") else new + "\n", summary, back)

    def trial(self, edit: Edit) -> Config:
        """The configuration the file would be with `edit` applied (what a probe reads),
        checked like a proposal; raises `ConfigError` when invalid. Nothing is kept."""
        document, _ = self.document()
        edit(document)
        return self.check_text(tomlkit.dumps(document))

    def propose_text(self, old: str, new: str, summary: str, back: str) -> Proposal:
        """Replacing `old` (the file as read) with `new` (a roll back: a whole kept text)."""
        self.check_text(new)
        return Proposal(secrets.token_urlsafe(12), summary, old, new, sha256_text(old),
                        back)

    def apply(self, proposal: Proposal, who: str, reload: Callable[[], bool]) -> Version:
        """Write the proposal (if the file is still what it was made from) and reload; returns
        the version it became.

        Raises `StaleFileError`, or `ConfigError` when the reload refused the file (the
        running version is back in place)."""
        running = self.store.current().version
        try:
            version = self.store.write(proposal.new_text, f"console:{who}",
                                       expected_sha256=proposal.base_digest)
        except StaleConfigError:
            raise StaleFileError(
                f"{self.path} changed since this change was prepared (edited by hand or from "
                f"another session); nothing was written: review the change again") from None
        if reload():
            return self.store.set_result(version.number, "applied", proposal.summary)
        reason = "the reload refused it (see the journal)"
        if running is not None:
            self.store.rollback(running, reason)
        raise ConfigError(str(self.path), [f"{reason}; the previous file is back in place"])
