"""Logix tag names as the controller's symbolic paths (CIP EPATHs).

A tag name is what Studio 5000 shows: `Speed`, `Recipe[3]`, `Grid[1,2]`, `Motor.Speed` (a UDT
member), `Line[2].Motor.Speed`, and in program scope `Program:Main.Count`. Each part is an
ANSI extended symbol segment (0x91, length, name, a pad byte to an even length) followed by
one member segment per index (0x28 / 0x29 / 0x2A for 8, 16 and 32 bits). The controller joins
the symbols with dots and looks the tag up by that name.

Pure: no I/O.
"""

from __future__ import annotations

import re
import struct

_PART = re.compile(r"([A-Za-z_][A-Za-z0-9_]{0,39})(?:\[\s*(\d+(?:\s*,\s*\d+){0,2})\s*\])?$")
_PROGRAM = re.compile(r"Program:[A-Za-z_][A-Za-z0-9_]{0,39}$")


def parse_tag(text: str) -> list[tuple[str, tuple[int, ...]]]:
    """The parts of a tag name: (symbol, indexes) each; ValueError with the reason."""
    text = text.strip()
    parts: list[tuple[str, tuple[int, ...]]] = []
    pieces = text.split(".")
    if pieces and pieces[0].startswith("Program:"):
        if not _PROGRAM.match(pieces[0]) or len(pieces) < 2:
            raise ValueError(f"{text!r}: a program-scoped tag is Program:<program>.<tag>")
        parts.append((pieces[0], ()))
        pieces = pieces[1:]
    for piece in pieces:
        match = _PART.match(piece.strip())
        if not match:
            raise ValueError(f"{text!r} is not a Logix tag name (e.g. Speed, Recipe[3], "
                             f"Motor.Speed, Program:Main.Count)")
        indexes = tuple(int(i) for i in match[2].split(",")) if match[2] else ()
        parts.append((match[1], indexes))
    return parts


def tag_path(text: str) -> bytes:
    """The symbolic EPATH of a tag name (an even number of bytes)."""
    out = bytearray()
    for symbol, indexes in parse_tag(text):
        name = symbol.encode("ascii")
        out += bytes((0x91, len(name))) + name + (b"\0" if len(name) % 2 else b"")
        for index in indexes:
            if index < 0x100:
                out += bytes((0x28, index))
            elif index < 0x10000:
                out += b"\x29\x00" + struct.pack("<H", index)
            else:
                out += b"\x2a\x00" + struct.pack("<I", index)
    return bytes(out)


def canonical(text: str) -> str:
    """A tag name written one way (no spaces in indexes)."""
    return ".".join(f"{symbol}[{','.join(map(str, indexes))}]" if indexes else symbol
                    for symbol, indexes in parse_tag(text))
