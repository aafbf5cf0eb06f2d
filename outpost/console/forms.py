"""A device family's forms, made from its configuration model's JSON schema.

How this works: `form_spec` reads the schema of a family's device model (bridge/catalog.py:
pydantic's `model_json_schema()` with the model's `x-ui` hints) and returns what a form shows:
the device's inputs (`main` at once, the rest under "advanced"), the columns of its point
rows, the profile choice and the shared table (a Modbus bus) where the family has them. An
input's kind comes from the schema (a `Literal` is a choice, a bool a checkbox, an int or a
float a number, a string text); its label, unit, choice labels and placeholder from the hints;
lists and tables (an enum's labels, a list of certificates) are not in the form and stay as
the file has them.

Inputs are named by their key path inside the device table (`unit_id`, `points.3.address`,
`bus.host` for a new bus), so a configuration error lands next to the input it is about.
`device_table` turns a submitted form into the device table: a value typed by its schema (a
number where the text is one; anything else is left as typed so the check names it), and
only the keys whose value is not the model's default, so the file says what differs. A form
holds at most `MAX_POINT_ROWS` point rows (`sent_rows` refuses more).

Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from bridge.catalog import Entry, list_model

MAX_POINT_ROWS = 64
NEW_SHARED = "+new"  # the shared-table choice "a new one…" (a new Modbus bus)
ROW_PREFIXES = ("points.", "found.")  # the row inputs of a form: point rows, browse results
_MISSING = object()


class FormError(ValueError):
    """A form none of the console's pages sends (more point rows than they hold)."""


@dataclass(frozen=True)
class Input:
    """One input of a form, from one property of a schema."""

    key: str
    label: str
    kind: str  # text, integer, number, bool, choice, secret
    choices: tuple[tuple[str, str], ...] = ()  # (value as sent, label)
    default: Any = _MISSING  # the model's default, _MISSING when the key is required
    unit: str = ""
    help: str = ""
    placeholder: str = ""
    escaped: bool = False  # typed as the escapes people write: \r\n
    initial: Any = _MISSING  # what an empty form shows, when not the default
    numeric: bool = False  # a choice of numbers (address_base: 0 or 1)

    def value(self, text: str) -> Any:
        """What the text is as this input's key holds it (typed by the schema; text that is
        not of the schema's type is kept as typed, so the check names it)."""
        if self.escaped:
            return text.replace("\\r", "\r").replace("\\n", "\n").replace("\\t", "\t")
        if self.kind == "bool":
            return text not in ("", "0", "false")
        if self.kind in ("integer", "number") or self.numeric:
            for kind in (int, float):
                try:
                    return kind(text.strip())
                except ValueError:
                    pass
        return text.strip()

    def text(self, value: Any) -> str:
        """A value of the file as this input shows it."""
        if value is None or value is _MISSING:
            return ""
        if self.kind == "bool":
            return "1" if value else ""
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        text = str(value)
        if self.escaped:
            text = text.replace("\r", "\\r").replace("\n", "\\n").replace("\t", "\\t")
        return text

    def first(self) -> str:
        """What an empty form shows."""
        return self.text(self.default if self.initial is _MISSING else self.initial)

    def differs(self, value: Any) -> bool:
        """Whether the value is worth writing: not the model's default."""
        return self.default is _MISSING or value != self.default


@dataclass(frozen=True)
class FormSpec:
    """Everything a family's form shows, from its schema."""

    section: str
    title: str
    main: tuple[Input, ...]
    advanced: tuple[Input, ...]
    columns: tuple[Input, ...]  # the point rows' inputs
    where: tuple[str, ...]  # the point keys that say where a point is (its address)
    listed: tuple[str, ...]  # the device keys the device list shows
    edited: tuple[str, ...]  # the device keys its page edits in place
    profile: tuple[str, str] | None = None  # (key, value prefix): `map = "profile:NAME"`
    shared: tuple[str, str] | None = None  # (key, section): a device's bus and `buses`
    shared_spec: FormSpec | None = field(default=None, repr=False)

    @property
    def inputs(self) -> tuple[Input, ...]:
        return self.main + self.advanced

    def input(self, key: str) -> Input | None:
        return next((i for i in self.inputs if i.key == key), None)


def _branch(prop: Mapping[str, Any], defs: Mapping[str, Any]) -> Mapping[str, Any]:
    """The property's schema without `None` (an optional value) and with its `$ref` read."""
    options = [p for p in prop.get("anyOf", [prop]) if p.get("type") != "null"]
    branch = options[0] if len(options) == 1 else {}
    ref = branch.get("$ref")
    if isinstance(ref, str):
        branch = {**defs.get(ref.rsplit("/", 1)[-1], {}), **{k: v for k, v in branch.items()
                                                             if k != "$ref"}}
    return branch


def _inputs(schema: Mapping[str, Any], defs: Mapping[str, Any], hints: Mapping[str, Any],
            skip: set[str]) -> list[Input]:
    """The form inputs of a schema's properties, in the model's order."""
    labels, units = hints.get("labels", {}), hints.get("units", {})
    choice_labels, placeholders = hints.get("choices", {}), hints.get("placeholders", {})
    initial, escaped, secret = hints.get("initial", {}), hints.get("escaped", []), hints.get(
        "secret", [])
    inputs = []
    required = set(schema.get("required", []))
    for key, prop in schema.get("properties", {}).items():
        if key in skip:
            continue
        branch = _branch(prop, defs)
        kind = {"boolean": "bool", "integer": "integer", "number": "number",
                "string": "text"}.get(str(branch.get("type")), "")
        choices: tuple[tuple[str, str], ...] = ()
        if "enum" in branch:
            kind = "choice"
            named = choice_labels.get(key, {})
            choices = tuple((str(v), str(named.get(str(v), v))) for v in branch["enum"])
            if prop.get("default", _MISSING) is None or "default" not in prop:
                choices = (("", "-"), *choices)  # none: the default (or the profile's)
        if not kind:  # a list or a table: edited in the file
            continue
        if key in secret:
            kind = "secret"
        inputs.append(Input(
            key, str(labels.get(key, key.replace("_", " "))), kind, choices,
            prop.get("default", _MISSING) if key not in required else _MISSING,
            str(units.get(key, branch.get("unit", ""))), str(prop.get("description", "")),
            str(placeholders.get(key, "")), key in escaped, initial.get(key, _MISSING),
            kind == "choice" and all(isinstance(v, int | float) for v in branch["enum"])))
    return inputs


def form_spec(entry: Entry) -> FormSpec:
    """The form of a family's devices."""
    return _spec(entry.section, entry.title, entry.schema())


def _spec(section: str, title: str, schema: Mapping[str, Any]) -> FormSpec:
    defs = schema.get("$defs", {})
    hints = schema.get("x-ui", {})
    inputs = _inputs(schema, defs, hints, {"points", "enabled"})
    main_keys = list(hints.get("main", [i.key for i in inputs if i.default is _MISSING]))
    main = tuple(sorted((i for i in inputs if i.key in main_keys),
                        key=lambda i: main_keys.index(i.key)))
    advanced = tuple(i for i in inputs if i.key not in main_keys)
    point_schema = _branch(schema.get("properties", {}).get("points", {}).get("items", {}),
                           defs)
    point_hints = point_schema.get("x-ui", {})
    point_inputs = _inputs(point_schema, defs, {**hints, **point_hints}, set())
    required = point_schema.get("required", [])
    column_keys = list(hints.get("columns", ["name", *(k for k in required if k != "name"),
                                             "unit", "writable"]))
    columns = tuple(sorted((i for i in point_inputs if i.key in column_keys),
                           key=lambda i: column_keys.index(i.key)))
    where = tuple(point_hints.get("where", [k for k in required if k != "name"][:1]))
    edited = tuple(hints.get("edit", [i.key for i in main if i.key != "name"]))
    profile = hints.get("profile")
    shared = hints.get("shared")
    shared_spec = None
    if shared:
        model = list_model(shared["section"])
        shared_spec = _spec(shared["section"], shared["section"], model.model_json_schema())
    return FormSpec(section, title, main, advanced, columns, where,
                    tuple(hints.get("list", [i.key for i in main[1:2]])), edited,
                    (profile["field"], profile["prefix"]) if profile else None,
                    (shared["field"], shared["section"]) if shared else None, shared_spec)


# -- a submitted form ------------------------------------------------------------------------


def sent_rows(form: Mapping[str, str], prefix: str = "points.") -> list[int]:
    """The rows a form sent (the N of `points.N.key`), in order; raises `FormError` for a
    row number of any row input (`ROW_PREFIXES`) that is not one below `MAX_POINT_ROWS`."""
    rows = set()
    for key in form:
        start = next((p for p in ROW_PREFIXES if key.startswith(p)), None)
        if start is None:
            continue
        index = key.split(".")[1]
        if not (index.isascii() and index.isdigit() and len(index) <= 3
                and int(index) < MAX_POINT_ROWS):
            raise FormError(f"a form holds at most {MAX_POINT_ROWS} point rows "
                            f"(points.0 to points.{MAX_POINT_ROWS - 1})")
        if start == prefix:
            rows.add(int(index))
    return sorted(rows)


def point_rows(form: Mapping[str, str], columns: tuple[Input, ...],
               prefix: str = "points.") -> list[tuple[int, dict[str, Any]]]:
    """(row, point) for each point row of a form, empty rows left out (a row is empty when
    nothing is typed or ticked: choices alone are no point): the K-th point of the table the
    form becomes is on row `point_rows(...)[K][0]`."""
    points = []
    for index in sent_rows(form, prefix):
        point: dict[str, Any] = {}
        typed = False
        for column in columns:
            text = form.get(f"{prefix}{index}.{column.key}", "")
            if column.kind == "bool":
                if text:
                    point[column.key] = True
                    typed = True
            elif text.strip():
                value = column.value(text)
                typed = typed or column.kind != "choice"
                if column.differs(value):
                    point[column.key] = value
        if typed:
            points.append((index, point))
    return points


def inputs_table(form: Mapping[str, str], inputs: tuple[Input, ...], prefix: str = ""
                 ) -> tuple[dict[str, Any], set[str]]:
    """(the keys worth writing, the keys the form sent empty or at their default)."""
    table: dict[str, Any] = {}
    dropped = set()
    for item in inputs:
        text = form.get(prefix + item.key)
        if text is None:  # not sent: not shown (a hand-made request), left as it is
            continue
        value = item.value(text)
        if (text.strip() or item.kind == "bool") and item.differs(value):
            table[item.key] = value
        else:
            dropped.add(item.key)
    return table, dropped


def device_table(form: Mapping[str, str], spec: FormSpec
                 ) -> tuple[dict[str, Any], dict[str, Any] | None, set[str]]:
    """(device table, new shared table or None, device keys sent empty) of a submitted form."""
    device, dropped = inputs_table(form, spec.inputs)
    if spec.profile is not None:
        key, prefix = spec.profile
        if device.get(key):
            device[key] = f"{prefix}{device[key]}"
    points = [point for _, point in point_rows(form, spec.columns)]
    if points:
        device["points"] = points
    shared = None
    if spec.shared is not None and spec.shared_spec is not None:
        key = spec.shared[0]
        if device.get(key) == NEW_SHARED:
            shared, _ = inputs_table(form, spec.shared_spec.inputs, f"{key}.")
            shared["name"] = form.get(f"{key}.name", "").strip()
            device[key] = shared["name"]
    return device, shared, dropped


def form_of(table: Mapping[str, Any], spec: FormSpec) -> dict[str, str]:
    """A device table of the file as the form that would write it (to edit it)."""
    form = {item.key: item.text(table.get(item.key, item.default)) for item in spec.inputs}
    if spec.profile is not None:
        key, prefix = spec.profile
        form[key] = form.get(key, "").removeprefix(prefix)
    for row, point in enumerate(list(table.get("points", []))[:MAX_POINT_ROWS]):
        for column in spec.columns:
            form[f"points.{row}.{column.key}"] = column.text(point.get(column.key,
                                                                       column.default))
    return form


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
