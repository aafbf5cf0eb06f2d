#!/usr/bin/env python3
"""Print the Debian mirror lines for mmdebstrap, read from this machine's own apt sources.

Nothing is hard-coded: the URIs come from /etc/apt/sources.list and sources.list.d (both the
one-line and the deb822 formats). For each suite the image needs (SUITE, SUITE-updates,
SUITE-security) the first source that lists it gives the URI; the components are the image's
own (main and non-free-firmware: raspi-firmware and Wi-Fi firmware live there), whatever the
host enabled. A suite the host lacks is left out, except SUITE itself, which is an error.

    python3 image/mirror.py bookworm "main non-free-firmware"
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

SOURCES = Path("/etc/apt/sources.list")
SOURCES_D = Path("/etc/apt/sources.list.d")


def one_line_entries(text: str) -> Iterator[tuple[str, str]]:
    """(uri, suite) of every `deb` line of a sources.list file."""
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        words = line.split()
        if not words or words[0] != "deb":
            continue
        words = words[1:]
        if words and words[0].startswith("["):  # options: [arch=amd64 signed-by=...]
            while words and not words[0].endswith("]"):
                words = words[1:]
            words = words[1:]
        if len(words) >= 2:
            yield words[0], words[1]


def deb822_entries(text: str) -> Iterator[tuple[str, str]]:
    """(uri, suite) of every `Types: deb` stanza of a .sources file."""
    for stanza in text.split("\n\n"):
        fields: dict[str, str] = {}
        key = ""
        for raw in stanza.splitlines():
            if raw.startswith("#"):
                continue
            if raw[:1].isspace() and key:
                fields[key] += " " + raw.strip()
                continue
            key, _, value = raw.partition(":")
            key = key.strip().lower()
            fields[key] = value.strip()
        if "deb" not in fields.get("types", "").split():
            continue
        if fields.get("enabled", "yes").lower() == "no":
            continue
        for uri in fields.get("uris", "").split():
            for suite in fields.get("suites", "").split():
                yield uri, suite


def host_entries() -> list[tuple[str, str]]:
    """Every (uri, suite) the host's apt sources name, in apt's reading order."""
    entries: list[tuple[str, str]] = []
    if SOURCES.is_file():
        entries += one_line_entries(SOURCES.read_text())
    if SOURCES_D.is_dir():
        for path in sorted(SOURCES_D.iterdir()):
            if path.suffix == ".list":
                entries += one_line_entries(path.read_text())
            elif path.suffix == ".sources":
                entries += deb822_entries(path.read_text())
    return entries


def mirror_lines(suite: str, components: str) -> list[str]:
    """`deb URI SUITE COMPONENTS` for SUITE, SUITE-updates and SUITE-security."""
    entries = host_entries()
    lines = []
    for wanted in (suite, f"{suite}-updates", f"{suite}-security"):
        uri = next((u for u, s in entries if s == wanted), None)
        if uri is None:
            if wanted == suite:
                raise SystemExit(f"mirror.py: no apt source for {suite!r} in {SOURCES}[.d]")
            continue
        lines.append(f"deb {uri} {wanted} {components}")
    return lines


def main(argv: list[str]) -> int:
    suite = argv[1] if len(argv) > 1 else "bookworm"
    components = argv[2] if len(argv) > 2 else "main non-free-firmware"
    for line in mirror_lines(suite, components):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
