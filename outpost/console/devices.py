"""Devices as the console edits them: forms to TOML tables, edits of the document, the probe.

How this works: a device form's inputs are named by their key path inside the device table
(`name`, `unit_id`, `map`, `points.0.address`, and `bus.type`, `bus.host` ... for a new bus),
so a configuration error (`bridge.devices.3.points.0.address: ...`) lands next to the input
it is about. `device_table` turns a submitted form into the TOML table (numbers where the
text is one; anything else is left as typed so the check names it), and the `*_edit`
functions return the document edits that `ConfigFile.propose` applies. A form holds at most
`MAX_POINT_ROWS` point rows (`sent_rows` refuses more): what a page renders back is bounded
by what one of our pages can send, not by the numbers in a posted key.

`probe` is the engine of `outpost modbus probe --map`: one request per point, no retries,
each point decoded or its failure given. It reads over the bridge's own bus when that bus is
running (the bus lock keeps the probe between two polls, never across one), else over a
one-off connection that it closes again.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tomlkit
from pydantic import ValidationError
from tomlkit.items import AoT, Table
from tomlkit.toml_document import TOMLDocument

from bridge.cli import read_once
from bridge.modbus import convert
from bridge.modbus.bus import ModbusBus, TransactionError
from bridge.modbus.config import BusConfig, DeviceConfig
from bridge.modbus.frames import Request
from bridge.modbus.plan import READ_FUNCTION
from gateway.base.settings import ConfigError, format_errors
from outpost.console.changes import Edit

POINT_KEYS = ("name", "table", "address", "type", "scale", "unit", "deadband", "writable")
DEVICE_KEYS = ("name", "bus", "unit_id", "address_base", "poll_interval", "map")
BUS_KEYS = ("type", "host", "port", "device", "baudrate", "parity")
SERIAL_KEYS = ("name", "device", "baudrate", "parity", "delimiter", "parser", "pattern")
SERIAL_POINT_KEYS = ("name", "field", "type", "unit", "deadband")
NEW_BUS = "+new"
MAX_POINT_ROWS = 64


class FormError(ValueError):
    """A form none of the console's pages sends (more point rows than they hold)."""


def typed(text: str) -> Any:
    """A form value as TOML would hold it: an integer, a number, or the text itself."""
    text = text.strip()
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def sent_rows(form: Mapping[str, str]) -> list[int]:
    """The point rows a form sent (the N of `points.N.key`), in order; raises `FormError`
    for a row number that is not one below `MAX_POINT_ROWS`."""
    rows = set()
    for key in form:
        if key.startswith("points."):
            index = key.split(".")[1]
            if not (index.isascii() and index.isdigit() and len(index) <= 3
                    and int(index) < MAX_POINT_ROWS):
                raise FormError(f"a form holds at most {MAX_POINT_ROWS} point rows "
                                f"(points.0 to points.{MAX_POINT_ROWS - 1})")
            rows.add(int(index))
    return sorted(rows)


def point_rows(form: Mapping[str, str], keys: tuple[str, ...]) -> list[tuple[int, dict[str, Any]]]:
    """(row, point) for each point row of a form (`points.N.key`), empty rows left out: the
    K-th point of the table the form becomes is on row `point_rows(...)[K][0]`."""
    points = []
    for index in sent_rows(form):
        point: dict[str, Any] = {}
        for key in keys:
            value = form.get(f"points.{index}.{key}", "").strip()
            if key == "writable":
                if value:
                    point[key] = True
            elif value:
                numeric = key in ("address", "scale", "deadband")
                point[key] = typed(value) if numeric else value
        if set(point) - {"table", "type"}:  # an empty row (defaults only) is no point
            points.append((index, point))
    return points


def _rows(form: Mapping[str, str], keys: tuple[str, ...]) -> list[dict[str, Any]]:
    return [point for _, point in point_rows(form, keys)]


_ROW_PROBLEM = re.compile(r"""points\.([0-9]+) (?:'[^']*'|"[^"]*"): (.*)""", re.DOTALL)


def row_errors(errors: Mapping[str, str], rows: list[int], keys: tuple[str, ...]
               ) -> dict[str, str]:
    """Errors of a device table (`points.K.key`, `points.K`, `points`) moved to the inputs of
    the form rows they are about (`rows`: `point_rows`'s, the form row of the K-th point).

    A problem of a whole point (`scale must not be 0`, `runs past register 65535`) goes to
    the input of the key its message names first, else to the row's name; the others stay as
    they were."""
    placed: dict[str, str] = {}

    def put(key: str, message: str) -> None:
        placed[key] = f"{placed[key]}; {message}" if key in placed else message

    for key, text in errors.items():
        parts = key.split(".")
        if parts[0] != "points" or len(parts) > 3:
            put(key, text)
            continue
        for problem in text.removeprefix("Value error, ").split("; "):
            point, sub, message = parts[1:2], parts[2:], problem
            found = _ROW_PROBLEM.fullmatch(problem) if not point else None
            if found:
                point, message = [found.group(1)], found.group(2)
            if not point or not point[0].isdigit() or int(point[0]) >= len(rows):
                put(key, problem)
                continue
            if not sub:
                named = [(match.start(), name) for name in keys
                         if (match := re.search(rf"\b{name}\b", message))]
                sub = [min(named)[1] if named else "name"]
            put(f"points.{rows[int(point[0])]}.{sub[0]}", message)
    return placed


def serial_table(form: Mapping[str, str]) -> dict[str, Any]:
    """The `[[bridge.serial]]` table of a submitted serial device form (line framing)."""
    device: dict[str, Any] = {}
    for key in SERIAL_KEYS:
        value = form.get(key, "").strip() if key != "delimiter" else form.get(key, "")
        if value:
            device[key] = typed(value) if key == "baudrate" else value
    if "delimiter" in device:  # typed as the escapes people write: \r\n
        device["delimiter"] = device["delimiter"].replace("\\r", "\r").replace("\\n", "\n")
    points = _rows(form, SERIAL_POINT_KEYS)
    if points:
        device["points"] = points
    return device


def add_serial_edit(device: dict[str, Any]) -> Edit:
    """Append `[[bridge.serial]]`."""

    def edit(document: TOMLDocument) -> None:
        append_table(_array(document, "bridge", "serial"), _table(device))

    return edit


def remove_serial_edit(name: str) -> Edit:
    def edit(document: TOMLDocument) -> None:
        index, _ = find_device(document, name, "serial")
        del document["bridge"]["serial"][index]

    return edit


def device_table(form: Mapping[str, str]) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """(device table, new bus table or None) from a submitted device form."""
    device: dict[str, Any] = {}
    for key in DEVICE_KEYS:
        value = form.get(key, "").strip()
        if value:
            device[key] = value if key in ("name", "bus", "map") else typed(value)
    if device.get("map"):
        device["map"] = f"profile:{device['map']}"
    points = _rows(form, POINT_KEYS)
    if points:
        device["points"] = points
    bus = None
    if device.get("bus") == NEW_BUS:
        bus = {"name": form.get("bus.name", "").strip()}
        for key in BUS_KEYS:
            value = form.get(f"bus.{key}", "").strip()
            if value:
                bus[key] = typed(value) if key in ("port", "baudrate") else value
        device["bus"] = bus["name"]
    return device, bus


def _array(document: TOMLDocument, section: str, key: str) -> AoT:
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


def _table(data: Mapping[str, Any]) -> Table:
    table = tomlkit.table()
    for key, value in data.items():
        if key == "points":
            array = tomlkit.array()
            array.extend(_inline(point) for point in value)
            array.multiline(True)
            table[key] = array
        else:
            table[key] = value
    return table


def add_device_edit(device: dict[str, Any], bus: dict[str, Any] | None) -> Edit:
    """Append `[[bridge.devices]]` (and `[[bridge.buses]]` for a new bus)."""

    def edit(document: TOMLDocument) -> None:
        if bus is not None:
            append_table(_array(document, "bridge", "buses"), _table(bus))
        append_table(_array(document, "bridge", "devices"), _table(device))

    return edit


def find_device(document: TOMLDocument, name: str, family: str = "devices") -> tuple[int, Any]:
    """(index, table) of the device called `name` in `[[bridge.<family>]]` (Modbus:
    `devices`, serial: `serial`) of the document."""
    for index, table in enumerate(document.get("bridge", {}).get(family, [])):
        if table.get("name") == name:
            return index, table
    raise KeyError(name)


def enabled_edit(family: str, name: str, enabled: bool) -> Edit:
    """Disable a device (`enabled = false`) or enable it again (the key goes: true is the
    default, so the table reads as it did before it was disabled)."""

    def edit(document: TOMLDocument) -> None:
        _, table = find_device(document, name, family)
        if enabled:
            table.pop("enabled", None)
        else:
            table["enabled"] = False

    return edit


def remove_device_edit(name: str) -> Edit:
    def edit(document: TOMLDocument) -> None:
        index, _ = find_device(document, name)
        del document["bridge"]["devices"][index]

    return edit


def update_device_edit(name: str, settings: Mapping[str, Any],
                       points: Mapping[str, Mapping[str, Any]]) -> Edit:
    """Set device keys (`settings`, None removes) and point keys (by point name; a point of
    a profile gets an entry of its own in `points`, which overrides nothing else: the
    profile's entry is replaced by a copy with the change)."""

    def edit(document: TOMLDocument) -> None:
        _, table = find_device(document, name)
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


# -- the probe -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Answer:
    """One point's answer to the probe."""

    point: str
    table: str
    address: int
    value: Any = None
    unit: str | None = None
    quality: str | None = None
    error: str | None = None


def probe_device(device: Mapping[str, Any], bus: BusConfig, base_dir: Path) -> DeviceConfig:
    """The device a probe reads (`ConfigError` with key paths when the form is wrong)."""
    data = {**device, "bus": bus.name}
    try:
        return DeviceConfig.model_validate(data, context={"base_dir": base_dir})
    except ValidationError as exc:
        raise ConfigError("probe", format_errors(exc, DeviceConfig)) from None


def probe_bus(bus: Mapping[str, Any]) -> BusConfig:
    """A one-off bus without retries and with a short timeout."""
    data = {**bus, "retries": 0, "timeout": min(float(bus.get("timeout", 1.0)), 1.0)}
    try:
        return BusConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError("probe", [f"bus.{line}" for line in format_errors(exc, BusConfig)]
                          ) from None


async def probe(device: DeviceConfig, bus: BusConfig, running: ModbusBus | None) -> list[Answer]:
    """Read every point once; `running`: the bridge's bus of that name, when it has one."""
    requests = [Request(device.unit_id, READ_FUNCTION[p.table], device.span(p).address, p.size)
                for p in device.points]
    if running is None:
        results = await read_once(bus, requests)
    else:
        results = []
        for request in requests:
            try:
                results.append((await running.execute(request, retries=0)).values)
            except TransactionError as exc:
                results.append(str(exc))
    answers = []
    for point, result in zip(device.points, results, strict=True):
        if isinstance(result, str):
            answers.append(Answer(point.name, point.table, point.address, error=result))
            continue
        value, quality = convert.decode(device.value_spec(point), result)
        answers.append(Answer(point.name, point.table, point.address, value, point.unit,
                              quality))
    return answers
