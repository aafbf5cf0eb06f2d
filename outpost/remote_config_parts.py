"""A named part of outpost.toml sent from the cloud, merged into the running file.

A remote configuration document (outpost/remote_config_document.py) carries either the whole
file (`"part": "all"`, the default) or one named part, a TOML fragment that holds only the
part's arrays of tables:

- `devices`: `[[bridge.buses]]`, `[[bridge.devices]]`, `[[bridge.serial]]`, `[[bridge.opcua]]`
  (every device and bus of the bridge; its settings such as `prefix` are not part of it);
- `forward`: `[[uplink.forward]]`.

`merge_part` replaces exactly those arrays in the running file's text, all of them: an array
the fragment leaves out is removed, so an empty fragment removes every device (or forward
rule). Every other byte of the file stays: the text of each array (from its first header
line to the last line of its last entry) is cut out and the fragment's text of that array put
in its place; the comment and blank lines after an array, which introduce what follows, stay
where they are. An array the running file does not have yet goes after the section's last
table (or at the end of the file). Comments inside the fragment's tables come along, those
before or after its arrays do not. The result is read back with tomllib and must equal the
running configuration with the arrays replaced, or the merge is refused.
"""

from __future__ import annotations

import copy
import tomllib
from typing import Any, Literal

from outpost.toml_tables import Header, headers

Part = Literal["all", "devices", "forward"]
WHOLE: Part = "all"
# part -> (its section, the arrays of tables of that section it is made of)
PART_ARRAYS: dict[str, tuple[str, tuple[str, ...]]] = {
    "devices": ("bridge", ("buses", "devices", "serial", "opcua")),
    "forward": ("uplink", ("forward",)),
}


class PartError(ValueError):
    """A part that cannot be merged; the text says why."""


def part_keys(part: str) -> list[str]:
    """The key paths a part is made of: ["uplink.forward"]."""
    section, arrays = PART_ARRAYS[part]
    return [f"{section}.{array}" for array in arrays]


def merge_part(running: str, part: str, fragment: str) -> str:
    """The running file's text with the arrays of `part` replaced by those of `fragment`;
    PartError when the fragment holds anything else, or either text cannot be merged."""
    if part not in PART_ARRAYS:
        raise PartError(f"unknown part {part!r}: one of {', '.join(PART_ARRAYS)}")
    section, arrays = PART_ARRAYS[part]
    new_data = _load(fragment, f"part {part!r}")
    foreign = [key for key in new_data if key != section]
    new_section = new_data.get(section, {})
    if isinstance(new_section, dict):
        foreign += [f"{section}.{key}" for key in new_section if key not in arrays]
    else:
        foreign.append(section)
    if foreign:
        raise PartError(f"part {part!r} may only hold {', '.join(part_keys(part))}; found "
                        f"{', '.join(foreign)}")
    old_data = _load(running, "the running file")
    old_headers, new_headers = headers(running), headers(fragment)
    edits: list[tuple[int, int, str]] = []  # (start, end, text): running[start:end] -> text
    added: list[str] = []
    for array in arrays:
        path = (section, array)
        old = _regions(old_headers, path, old_data, "the running file")
        new = _regions(new_headers, path, new_data, f"part {part!r}")
        block = "".join(_whole_lines(fragment[start:end]) for start, end in new)
        if old:
            (start, end), *more = old
            edits.append((start, end, block))
            edits += [(start, end, "") for start, end in more]
        elif block:
            added.append(block)
    if added:
        edits.append(_addition(running, old_headers, section, added))
    merged = _edited(running, edits)
    _verify(merged, old_data, new_data, section, arrays)
    return merged


def _load(text: str, what: str) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise PartError(f"{what} is not valid TOML: {exc}") from None


def _regions(found: list[Header], path: tuple[str, ...], data: dict[str, Any], what: str,
             ) -> list[tuple[int, int]]:
    """(start, content end) of each run of consecutive entries of the array `path` (with
    their sub-tables, `[[bridge.devices.points]]`); usually one."""
    regions: list[tuple[int, int]] = []
    inside = False
    for header in found:
        if header.array and header.path == path:
            if inside:
                regions[-1] = (regions[-1][0], header.content_end)
            else:
                regions.append((header.start, header.content_end))
            inside = True
        elif inside and header.path[:len(path)] == path:
            regions[-1] = (regions[-1][0], header.content_end)
        else:
            inside = False
    section = data.get(path[0])
    if not regions and isinstance(section, dict) and path[1] in section:
        name = ".".join(path)
        raise PartError(f"{what} writes {name} otherwise than as [[{name}]] tables; a part "
                        "replaces arrays of tables only (send the whole file instead)")
    return regions


def _whole_lines(text: str) -> str:
    return text if text.endswith("\n") else text + "\n"


def _addition(running: str, found: list[Header], section: str, blocks: list[str],
              ) -> tuple[int, int, str]:
    """The edit that adds arrays the running file does not have: after the section's last
    table, or at the end of the file."""
    text = "".join("\n" + block for block in blocks)
    ends = [header.content_end for header in found if header.path[0] == section]
    if ends:
        return max(ends), max(ends), text
    if running and not running.endswith("\n"):
        text = "\n" + text
    return len(running), len(running), text


def _edited(text: str, edits: list[tuple[int, int, str]]) -> str:
    parts, at = [], 0
    for start, end, replacement in sorted(edits, key=lambda edit: (edit[0], edit[1])):
        parts += [text[at:start], replacement]
        at = end
    return "".join([*parts, text[at:]])


def _verify(merged: str, old: dict[str, Any], new: dict[str, Any], section: str,
            arrays: tuple[str, ...]) -> None:
    """The merged text must read as the running configuration with the arrays replaced."""
    expected = copy.deepcopy(old)
    table = expected.setdefault(section, {})
    if not isinstance(table, dict):
        raise PartError(f"the running file's {section} is not a table")
    for array in arrays:
        if array in new.get(section, {}):
            table[array] = new[section][array]
        else:
            table.pop(array, None)
    try:
        got = tomllib.loads(merged)
    except tomllib.TOMLDecodeError as exc:
        got = {"": str(exc)}
    if not table and section not in got:
        del expected[section]
    if got != expected:
        raise PartError(f"the part could not be merged into the running file without changing "
                        f"more than {section}'s arrays (the running file holds them in a way "
                        "the merge does not handle); send the whole file instead")
