"""Where the tables of a TOML text start and end, to the character, for edits that keep every
other byte of the file.

A table header (`[a.b]`, `[[a.b]]`) is a line whose first character after blanks is `[`
outside any value: the scanner walks the text once, skipping strings (single-line and
multi-line, basic and literal, with their escapes) and comments and counting the brackets of
arrays and inline tables, so a `[` that opens a value's continuation line or sits inside a
multi-line string is never taken for a header. Each header's key path comes from parsing the
header line alone with tomllib (quoted keys and spacing as TOML reads them).

A table's text runs from its header line to the next header line; its `content_end` is the
end of the last line that holds something of it (the header or a key), so the comment and
blank lines between that and the next header, which people write about the next table, can
be told apart from the table itself. The text must be valid TOML (check with tomllib first).
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Header:
    """One table header of a TOML text and the extent of its table."""

    path: tuple[str, ...]  # ("bridge", "devices") for [[bridge.devices]]
    array: bool  # [[...]]: an entry of an array of tables
    start: int  # where the header line starts
    content_end: int  # the end of the table's last line holding its header or a key
    end: int  # where the next header line starts, or the end of the text


def headers(text: str) -> list[Header]:
    """Every table header of `text` (valid TOML), in the order they are written."""
    found: list[tuple[tuple[str, ...], bool, int, int]] = []  # path, array, start, content
    length = len(text)
    index, depth, line_start, fresh, last = 0, 0, 0, True, 0
    while index < length:
        char = text[index]
        if char == "\n":
            index += 1
            line_start, fresh = index, True
            continue
        if char in " \t\r":
            index += 1
            continue
        if char == "#":
            index = _newline(text, index)
            continue
        if fresh and depth == 0 and char == "[":
            if found:
                path, array, start, _ = found[-1]
                found[-1] = (path, array, start, _line_end(text, last))
            last = index = _newline(text, index)
            path, array = _header_path(text[line_start:index])
            found.append((path, array, line_start, _line_end(text, last)))
            continue
        fresh = False
        if char in "\"'":
            index = last = _string_end(text, index)
            continue
        if char in "[{":
            depth += 1
        elif char in "]}":
            depth -= 1
        index = last = index + 1
    if found:
        path, array, start, _ = found[-1]
        found[-1] = (path, array, start, _line_end(text, last))
    return [Header(path, array, start, content, found[n + 1][2] if n + 1 < len(found) else
                   length) for n, (path, array, start, content) in enumerate(found)]


def _newline(text: str, index: int) -> int:
    """The newline ending the line that holds `index` (or the end of the text)."""
    newline = text.find("\n", index)
    return len(text) if newline < 0 else newline


def _line_end(text: str, index: int) -> int:
    """Just past the newline ending the line that holds `index` (or the end of the text)."""
    return min(_newline(text, index) + 1, len(text))


def _string_end(text: str, index: int) -> int:
    """Just past the string (or quoted key) that starts at `index`."""
    quote = text[index]
    if text.startswith(quote * 3, index):
        at = index + 3
        while True:
            if quote == '"' and text[at] == "\\":
                at += 2
            elif text.startswith(quote * 3, at):
                run = at
                while run < len(text) and text[run] == quote:
                    run += 1
                return run  # up to two quotes before the closing three belong to the string
            else:
                at += 1
    at = index + 1
    while text[at] != quote:
        at += 2 if quote == '"' and text[at] == "\\" else 1
    return at + 1


def _header_path(line: str) -> tuple[tuple[str, ...], bool]:
    """The key path of a header line and whether it is an array of tables' entry."""
    node: Any = tomllib.loads(line.removesuffix("\r"))  # a file with CRLF line ends
    path: list[str] = []
    array = False
    while isinstance(node, dict) and len(node) == 1:
        key, node = next(iter(node.items()))
        path.append(key)
        array = isinstance(node, list)
        if array:
            node = node[-1]
    return tuple(path), array
