"""Every configuration key and every `outpost` command is documented (README.md or docs/).

A configuration key counts as documented only where the documentation ties it to its section.
For the key path `uplink.remotes.keepalive` (section `uplink.remotes`, key `keepalive`) that is
one of:

* a fenced ```` ```toml ```` block in which the key sits at that path: `keepalive = 60` under
  `[[uplink.remotes]]`, or inside an inline table (`tls = { insecure = false }` under
  `[[uplink.remotes]]` documents `uplink.remotes.tls.insecure`), or as a dotted key. Blocks
  are parsed with `tomllib`, so headers, arrays of tables and inline tables mean what they
  mean to outpost; a key only mentioned in a `#` comment does not count, and every block must
  be valid TOML;
* a Markdown table whose first header cell names the section as a TOML header (`` `[sys]` ``,
  `` `[[uplink.remotes]]` ``), with the key in backticks in the first cell of a row
  (`` `keepalive` ``; several as `` `ca_file`, `cert_file` ``; `` `tls.insecure` `` for a key
  of a nested section).

A key named only in prose, in a comment or in a table without a `[section]` header does not
count. A section (`limits`, `bridge.buses.rs485`) is documented the same way as a key: its header or
inline table in a TOML block, or a row of its parent's table. Every key in a TOML block must
also be a real key path, so examples cannot drift from the models; the contents of free-form
tables (`groups`, `commands`, `enum`) are not checked.
"""

from __future__ import annotations

import contextlib
import re
import tomllib
import typing
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import BaseModel

from gateway.appliance.cli import build_parser
from gateway.appliance.config import Config

ROOT = Path(__file__).resolve().parents[1]
FILES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
TEXTS = {path.relative_to(ROOT).as_posix(): path.read_text(encoding="utf-8") for path in FILES}
DOCS = "".join(TEXTS.values())

TOML_BLOCK = re.compile(r"^[ \t]*```toml[ \t]*\n(.*?)^[ \t]*```[ \t]*$", re.MULTILINE | re.DOTALL)
SECTION_CELL = re.compile(r"^`\[\[?([A-Za-z0-9_.]+)\]\]?`")
KEY_IN_CELL = re.compile(r"`([A-Za-z0-9_.]+)`")


def config_keys(model: type[BaseModel], prefix: str = "") -> Iterator[str]:
    """Every key path of the configuration models."""
    for name, field in model.model_fields.items():
        path = f"{prefix}{name}"
        yield path
        pending = [field.annotation]
        while pending:
            annotation = pending.pop()
            if isinstance(annotation, type) and issubclass(annotation, BaseModel):
                yield from config_keys(annotation, path + ".")
            pending.extend(typing.get_args(annotation))


KEYS = sorted(set(config_keys(Config)))
SECTIONS = {key.rsplit(".", 1)[0] for key in KEYS if "." in key}


def toml_blocks() -> Iterator[tuple[str, int, str]]:
    """(file, line, text) of every fenced ```toml block."""
    for name, text in TEXTS.items():
        for match in TOML_BLOCK.finditer(text):
            yield name, text.count("\n", 0, match.start()) + 1, match.group(1)


def toml_paths(value: object, prefix: str = "") -> Iterator[str]:
    """Key paths in a parsed TOML document; array elements share their array's path.

    Only descends into tables that are configuration sections, so the keys of free-form
    tables (`groups = { energy = 60.0 }`) are not paths.
    """
    if isinstance(value, list):
        for item in value:
            yield from toml_paths(item, prefix)
    elif isinstance(value, dict) and (not prefix or prefix[:-1] in SECTIONS):
        for key, item in value.items():
            yield prefix + key
            yield from toml_paths(item, f"{prefix}{key}.")


def table_paths(text: str) -> Iterator[str]:
    """Key paths named by Markdown tables whose first header cell is `[section]`."""
    section = None
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if not line.startswith("|"):
            section = None
            continue
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        is_header = i + 1 < len(lines) and re.match(r"^\|\s*:?-", lines[i + 1])
        if is_header:
            match = SECTION_CELL.match(cells[0])
            section = match.group(1) if match else None
        elif section is not None and not re.match(r"^:?-", cells[0]):
            for key in KEY_IN_CELL.findall(cells[0]):
                yield f"{section}.{key}"


def documented_paths() -> set[str]:
    paths: set[str] = set()
    for _name, _line, block in toml_blocks():
        with contextlib.suppress(tomllib.TOMLDecodeError):  # reported by the test below
            paths.update(toml_paths(tomllib.loads(block)))
    for text in TEXTS.values():
        paths.update(table_paths(text))
    return paths


DOCUMENTED = documented_paths()


@pytest.mark.parametrize("key", KEYS)
def test_config_key_is_documented(key: str) -> None:
    section, _, leaf = key.rpartition(".")
    where = f"[{section}]" if section else "the top level"
    assert key in DOCUMENTED, (
        f"{key} is not documented: write `{leaf} = ...` under {where} in a ```toml block of "
        f"README.md or docs/, or a row `{leaf}` in a table headed `{where}` (see the docstring)"
    )


BLOCKS = list(toml_blocks())


@pytest.mark.parametrize(("name", "line", "block"), BLOCKS,
                         ids=[f"{name}:{line}" for name, line, _ in BLOCKS])
def test_toml_block_is_valid_and_uses_real_keys(name: str, line: int, block: str) -> None:
    try:
        data = tomllib.loads(block)
    except tomllib.TOMLDecodeError as exc:
        pytest.fail(f"{name}:{line}: the ```toml block is not valid TOML: {exc}")
    unknown = sorted(set(toml_paths(data)) - set(KEYS))
    assert not unknown, f"{name}:{line}: keys that are not configuration keys: {unknown}"


def test_table_rows_use_real_keys() -> None:
    unknown = sorted({path for text in TEXTS.values() for path in table_paths(text)} - set(KEYS))
    assert not unknown, f"tables headed `[section]` name keys that do not exist: {unknown}"


def test_rules_catch_keys_out_of_their_section() -> None:
    """A key under the wrong header, or only in a comment, or only in prose, does not count."""
    block = '[sys]\nkeepalive = 60\n# batch = 256\n[[uplink.remotes]]\nname = "cloud"\n'
    paths = set(toml_paths(tomllib.loads(block)))
    assert "uplink.remotes.name" in paths
    assert "uplink.remotes.keepalive" not in paths
    assert "uplink.remotes.batch" not in paths
    table = "| `[[uplink.remotes]]` key | meaning |\n|---|---|\n| `tls.insecure`, `batch` | x |\n"
    assert set(table_paths(table)) == {"uplink.remotes.tls.insecure", "uplink.remotes.batch"}
    assert not set(table_paths("| key | meaning |\n|---|---|\n| `batch` | x |\n"))


def subcommands() -> list[str]:
    parser = build_parser()
    actions = [a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction"]
    return sorted(actions[0].choices)  # type: ignore[attr-defined]


@pytest.mark.parametrize("command", subcommands())
def test_command_is_documented(command: str) -> None:
    assert f"outpost {command}" in DOCS, f"`outpost {command}` is not in README.md or docs/"
