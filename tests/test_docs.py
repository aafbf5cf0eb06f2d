"""Every configuration key and every `outpost` command is documented (README.md or docs/)."""

from __future__ import annotations

import re
import typing
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import BaseModel

from gateway.cli import build_parser
from gateway.config import Config

ROOT = Path(__file__).resolve().parents[1]
DOCS = (ROOT / "README.md").read_text(encoding="utf-8") + "".join(
    path.read_text(encoding="utf-8") for path in sorted((ROOT / "docs").glob("*.md"))
)


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


@pytest.mark.parametrize("key", sorted(set(config_keys(Config))))
def test_config_key_is_documented(key: str) -> None:
    leaf = key.rsplit(".", 1)[-1]
    assert re.search(rf"\b{re.escape(leaf)}\b", DOCS), f"{key} is not in README.md or docs/"


def subcommands() -> list[str]:
    parser = build_parser()
    actions = [a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction"]
    return sorted(actions[0].choices)  # type: ignore[attr-defined]


@pytest.mark.parametrize("command", subcommands())
def test_command_is_documented(command: str) -> None:
    assert f"outpost {command}" in DOCS, f"`outpost {command}` is not in README.md or docs/"
