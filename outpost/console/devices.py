"""Devices as the console edits them: document edits of any family's device tables.

How this works: a device of any family is one table of an array of tables under `[bridge]`
(`[[bridge.<section>]]`, the family's section: bridge/catalog.py); a form becomes such a table
(outpost/console/forms.py) and the `*_edit` functions here return the document edits that
`ConfigFile.propose` applies: append a table (and the shared table it names, a new Modbus
bus), set or remove keys of one, replace what a form shows of one, disable, remove. Keys a
form does not show (hand-written ones) are left as they are.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import tomlkit
from tomlkit.items import AoT, Table
from tomlkit.toml_document import TOMLDocument

from bridge.catalog import entries
from bridge.families import registered
from outpost.console.changes import Edit
from outpost.console.forms import NEW_SHARED, FormSpec, form_spec
from outpost.console.forms import device_table as form_table

NEW_BUS = NEW_SHARED  # the bus choice "a new bus…" of a Modbus device's form


def typed(text: str) -> Any:
    """A form value as TOML would hold it: an integer, a number, or the text itself."""
    text = text.strip()
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def device_table(form: Mapping[str, str], spec: FormSpec | None = None
                 ) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """(device table, new shared table or None) of a submitted form of `spec`'s family (by
    default the first registered family's)."""
    spec = spec or form_spec(entries(registered(None))[0])
    device, shared, _ = form_table(form, spec)
    return device, shared


def array_of_tables(document: TOMLDocument, section: str, key: str) -> AoT:
    """`[[section.key]]` of the document, made (empty) when it is not there yet."""
    table = document.get(section)
    if table is None:
        table = tomlkit.table()
        document[section] = table
    array = table.get(key)
    if array is None:
        array = tomlkit.aot()
        table[key] = array
    return array


def append_table(array: AoT, table: Table) -> None:
    """Append to an array of tables with a blank line before it, as people write them."""
    if len(array) and not array[-1].as_string().endswith("\n\n"):
        array[-1].add(tomlkit.nl())
    array.append(table)


def _inline(value: Any) -> Any:
    if isinstance(value, dict):
        inline = tomlkit.inline_table()
        inline.update(value)
        return inline
    return value


def _points(points: Sequence[Mapping[str, Any]]) -> Any:
    array = tomlkit.array()
    array.extend(_inline(dict(point)) for point in points)
    array.multiline(True)
    return array


def _table(data: Mapping[str, Any]) -> Table:
    table = tomlkit.table()
    for key, value in data.items():
        table[key] = _points(value) if key == "points" else value
    return table


def add_device_edit(device: dict[str, Any], shared: dict[str, Any] | None,
                    section: str = "devices", shared_section: str = "buses") -> Edit:
    """Append `[[bridge.<section>]]` (and `[[bridge.<shared_section>]]` for a new bus)."""

    def edit(document: TOMLDocument) -> None:
        if shared is not None:
            append_table(array_of_tables(document, "bridge", shared_section), _table(shared))
        append_table(array_of_tables(document, "bridge", section), _table(device))

    return edit


def find_device(document: TOMLDocument, name: str, section: str = "devices"
                ) -> tuple[int, Any]:
    """(index, table) of the device called `name` in `[[bridge.<section>]]`."""
    for index, table in enumerate(document.get("bridge", {}).get(section, [])):
        if table.get("name") == name:
            return index, table
    raise KeyError(name)


def enabled_edit(section: str, name: str, enabled: bool) -> Edit:
    """Disable a device (`enabled = false`) or enable it again (the key goes: true is the
    default, so the table reads as it did before it was disabled)."""

    def edit(document: TOMLDocument) -> None:
        _, table = find_device(document, name, section)
        if enabled:
            table.pop("enabled", None)
        else:
            table["enabled"] = False

    return edit


def remove_device_edit(name: str, section: str = "devices") -> Edit:
    def edit(document: TOMLDocument) -> None:
        index, _ = find_device(document, name, section)
        del document["bridge"][section][index]

    return edit


def update_device_edit(name: str, settings: Mapping[str, Any],
                       points: Mapping[str, Mapping[str, Any]], section: str = "devices"
                       ) -> Edit:
    """Set device keys (`settings`, None removes) and point keys (by point name; a point of
    a profile is not in the device's own `points`: KeyError)."""

    def edit(document: TOMLDocument) -> None:
        _, table = find_device(document, name, section)
        for key, value in settings.items():
            if value is None:
                table.pop(key, None)
            else:
                table[key] = value
        for point_name, changes in points.items():
            own = table.get("points")
            entry = next((p for p in own or [] if p.get("name") == point_name), None)
            if entry is None:
                raise KeyError(f"{name}/{point_name} is defined by the profile")
            for key, value in changes.items():
                if value is None:
                    entry.pop(key, None)
                else:
                    entry[key] = value

    return edit


def replace_device_edit(name: str, section: str, device: Mapping[str, Any],
                        shared: dict[str, Any] | None, shared_section: str,
                        spec: FormSpec) -> Edit:
    """What the form shows of the device `name`, replaced by `device` (a form's table): the
    keys of its inputs are set or removed, its points are the form's rows (a row keeps the
    keys no column shows of the point of its name), every other key stays."""
    shown = {item.key for item in spec.inputs} | {"points"}
    columns = {column.key for column in spec.columns}

    def edit(document: TOMLDocument) -> None:
        _, table = find_device(document, name, section)
        if shared is not None:
            append_table(array_of_tables(document, "bridge", shared_section), _table(shared))
        for key in shown - set(device):
            table.pop(key, None)
        old = {str(p.get("name")): p for p in table.get("points", [])}
        for key, value in device.items():
            if key != "points":
                table[key] = value
        points = []
        for point in device.get("points", []):
            kept = {k: v for k, v in old.get(str(point.get("name")), {}).items()
                    if k not in columns}
            points.append({**point, **kept})
        if points:
            table["points"] = _points(points)

    return edit
