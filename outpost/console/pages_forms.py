"""Adding and editing a device of any family: its form, the probe and the browse before saving.

How this works: the console knows the families only through bridge/catalog.py (the running
bridge's families, in their registered order). A family's form is rendered from its
configuration model's schema (outpost/console/forms.py): the device's inputs, "advanced"
ones folded away, its point rows, a profile choice and a new shared table (a Modbus bus)
where the family has them. Every form posts to a handler that turns it into an edit of the
configuration document (outpost/console/devices.py) and hands it to `propose` (review, then
apply); a form with errors is rendered again as it was sent, each error under its input.

The probe (when the family has `explore`, bridge/driver.py) applies the same edit to a copy of
the file, checks it like a change (so a wrong value is shown at its input, as for "review"),
and asks the family to explore the device as the checked configuration has it: every point
read once, and what browsing or discovery found (an OPC UA server's variables), each found
row with a box to tick; "add the ticked as points" fills point rows from them. Nothing is
written by a probe.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

from aiohttp import web

from bridge.catalog import Entry, entries
from bridge.driver import Exploration, Found
from bridge.families import registered
from gateway.base.settings import ConfigError
from outpost.console.changes import field_errors, keep_fields
from outpost.console.context import CONSOLE, propose, render, session_of
from outpost.console.devices import add_device_edit, find_device, replace_device_edit
from outpost.console.forms import (
    MAX_POINT_ROWS,
    NEW_SHARED,
    FormError,
    FormSpec,
    Input,
    device_table,
    form_of,
    form_spec,
    point_rows,
    row_errors,
    sent_rows,
)
from outpost.console.html import (
    attr,
    cell_input,
    csrf_input,
    esc,
    field,
    general_errors,
    table,
    value_text,
)

log = logging.getLogger("outpost.console")
POINT_ROWS = 4  # the point rows an empty form shows
EXPLORE_TIMEOUT = 30.0  # seconds a probe may take before the page says it gave up


def add_routes(router: web.UrlDispatcher) -> None:
    """The add, probe and pick routes of every family (`/console/<section>/new` ...), and
    the edit form of any device."""
    for entry in entries(registered(None)):
        router.add_get(f"/console/{entry.section}/new", new_device_page)
        router.add_post(f"/console/{entry.section}/new", add_device)
        router.add_post(f"/console/{entry.section}/probe", probe_page)
        router.add_post(f"/console/{entry.section}/pick", pick_page)
    router.add_get("/console/devices/{device}/edit", edit_page)
    router.add_post("/console/devices/{device}/edit", edit_device)


def catalog(request: web.Request) -> list[Entry]:
    """The families, as the running bridge has them (its Modbus buses, its OPC UA state)."""
    bridge = request.app[CONSOLE].bridge
    return entries(bridge.families if bridge is not None else registered(None))


def entry_of(request: web.Request) -> Entry:
    """The family of a `/console/<section>/...` path."""
    section = request.path.split("/")[2]
    found = next((e for e in catalog(request) if e.section == section), None)
    if found is None:
        raise web.HTTPNotFound(text=f"no device family {section!r}\n")
    return found


def device_of(request: web.Request, name: str | None = None) -> tuple[Entry, Any]:
    """(family, configuration) of the running device named in the path; 404 when none."""
    name = name or request.match_info["device"]
    bridge = request.app[CONSOLE].config().bridge
    for entry in catalog(request):
        for device in entry.devices(bridge):
            if device.name == name:
                return entry, device
    raise web.HTTPNotFound(text=f"no device {name!r}\n")


def form_dict(form: Mapping[str, Any]) -> dict[str, str]:
    """The text fields of a posted form; 400 for a form none of our pages sends."""
    fields = {key: value for key, value in form.items()
              if isinstance(value, str) and key != "csrf"}
    try:
        sent_rows(fields)
    except FormError as exc:
        raise web.HTTPBadRequest(text=f"refused: {exc}\n") from None
    return fields


def _row_count(form: Mapping[str, str]) -> int:
    """How many point rows a form shows: the rows sent (at most `MAX_POINT_ROWS`), at least
    `POINT_ROWS`."""
    return max([POINT_ROWS - 1, *sent_rows(form)]) + 1


def _label(item: Input) -> str:
    return f"{item.label} ({item.unit})" if item.unit else item.label


def _input(request: web.Request, entry: Entry, spec: FormSpec, item: Input,
           form: Mapping[str, str], errors: Mapping[str, str], prefix: str = "") -> str:
    """One labelled input of the device (or of its new shared table, `prefix`)."""
    name = prefix + item.key
    text = form.get(name, item.first())
    options: list[tuple[str, str]] | None = list(item.choices) if item.choices else None
    if not prefix and spec.profile is not None and item.key == spec.profile[0]:
        options = [("", "none: by points below"), *((p, p) for p in entry.profiles())]
    if not prefix and spec.shared is not None and item.key == spec.shared[0]:
        shared = getattr(request.app[CONSOLE].config().bridge, spec.shared[1], [])
        options = [(s.name, s.name) for s in shared]
        options.append((NEW_SHARED, f"a new {item.label}…"))
        text = form.get(name, options[0][0])
    if item.kind == "bool":
        hidden = f'<input type="hidden"{attr("name", name)} value="0">'
        return hidden + field(name, _label(item), item.value(text), errors, kind="checkbox")
    kind = "password" if item.kind == "secret" else "text"
    return field(name, _label(item), text, errors, kind=kind, options=options,
                 placeholder=item.placeholder)


def _rows(spec: FormSpec, form: Mapping[str, str], errors: Mapping[str, str],
          count: int) -> str:
    rows = []
    for i in range(count):
        cells = []
        for column in spec.columns:
            name = f"points.{i}.{column.key}"
            value = form.get(name, column.first() if column.kind == "choice" else "")
            wide = column.key == "name" or column.key in spec.where
            cells.append(cell_input(
                name, column.value(value) if column.kind == "bool" else value, errors,
                kind="checkbox" if column.kind == "bool" else "text", size=14 if wide else 7,
                options=list(column.choices) if column.choices else None))
        rows.append(cells)
    return table([c.key for c in spec.columns], rows, id="point-rows")


def device_form(request: web.Request, entry: Entry, form: Mapping[str, str],
                errors: Mapping[str, str], general: list[str],
                exploration: Exploration | None = None, problem: str = "",
                editing: str = "") -> web.Response:
    """The form of a device of `entry`'s family (`editing`: the name of the device it
    edits), as sent, each error under its input, and a probe's answer below."""
    session = session_of(request)
    spec = form_spec(entry)
    count = _row_count(form)
    shared_inputs: tuple[Input, ...] = ()
    if spec.shared is not None and spec.shared_spec is not None:
        shared_inputs = spec.shared_spec.main
    inputs = {i.key for i in spec.inputs} | {f"{spec.shared[0]}.{i.key}" for i in shared_inputs
                                             if spec.shared is not None}
    inputs |= {f"points.{i}.{c.key}" for i in range(count) for c in spec.columns}
    keys = tuple(c.key for c in spec.columns)
    rows = [row for row, _ in point_rows(form, spec.columns)]
    errors, general = keep_fields(row_errors(errors, rows, keys), general, inputs)
    main = "".join(_input(request, entry, spec, i, form, errors) for i in spec.main)
    advanced = "".join(_input(request, entry, spec, i, form, errors) for i in spec.advanced)
    body = f'<div class="panel">{main}</div>'
    if shared_inputs and spec.shared is not None:
        key = spec.shared[0]
        new = "".join(_input(request, entry, spec, i, form, errors, f"{key}.")
                      for i in shared_inputs)
        body += f'<h3>new {esc(key)} (when {esc(key)} is "a new {esc(key)}…")</h3>' \
                f'<div class="panel">{new}</div>'
    if advanced:
        folded = any(f.key in errors for f in spec.advanced)
        body += (f'<details{" open" if folded else ""}><summary>advanced</summary>'
                 f'<div class="panel">{advanced}</div></details>')
    body += f"<h3>points</h3>{_rows(spec, form, errors, count)}"
    primary = entry.section == catalog(request)[0].section  # its page's ids stay as they were
    review = "review" if primary else f"review-{entry.kind}"
    probe = (f'<button type="submit" formaction="/console/{esc(entry.section)}/probe" '
             f'class="secondary" id="probe">probe</button>' if entry.can_explore else "")
    action = (f"/console/devices/{editing}/edit" if editing
              else f"/console/{entry.section}/new")
    hidden = f'<input type="hidden" name="editing"{attr("value", editing)}>' if editing else ""
    body = (f'{general_errors(general)}<form method="post"{attr("action", action)} '
            f'id="device-form" data-family="{esc(entry.kind)}">{csrf_input(session.csrf)}'
            f'{hidden}{body}<div class="actions">{probe}<button type="submit"'
            f'{attr("id", review)}>review change</button></div>'
            f"{_explored(entry, exploration, problem)}</form>")
    title = f"edit device {editing}" if editing else f"add a {entry.title}"
    return render(request, title, body, "devices")


def _answer(row: Found) -> str:
    if row.error is not None:
        return f'<span class="q-bad">failed: {esc(row.error)}</span>'
    quality = "" if row.quality in ("good", None) else f" ({esc(row.quality)})"
    return esc(value_text(row.value, row.unit)) + quality


def _explored(entry: Entry, exploration: Exploration | None, problem: str) -> str:
    """A probe's answer: what the device says of itself, its points, what it has besides."""
    if problem:
        return f'<div class="error" id="probe-error">probe failed: {esc(problem)}</div>'
    if exploration is None:
        return ""
    html = ""
    if exploration.lines:
        lines = "\n".join(exploration.lines)
        html += f'<pre class="probe-lines" id="probe-lines">{esc(lines)}</pre>'
    if exploration.points:
        rows = [[esc(row.name), esc(row.where),
                 f'<span class="probe-value"{attr("data-point", row.name)}>{_answer(row)}'
                 f"</span>"] for row in exploration.points]
        ok = sum(1 for row in exploration.points if row.error is None)
        html += (f"<h3>probe: {ok} of {len(rows)} point(s) answered</h3>"
                 + table(("point", "where", "answer"), rows, id="probe-results"))
    if exploration.found:
        rows = []
        for i, row in enumerate(exploration.found[:MAX_POINT_ROWS]):
            keep = "".join(f'<input type="hidden"{attr("name", f"found.{i}.{key}")}'
                           f'{attr("value", value)}>' for key, value in (row.point or {}).items())
            tick = (f'<input type="checkbox"{attr("name", f"found.{i}.pick")} value="1"'
                    f'{attr("aria-label", row.name)}>' if row.point else "")
            rows.append([tick + keep, esc(row.name), esc(row.where), esc(row.detail),
                         f'<span class="found-value"{attr("data-found", row.where)}>'
                         f"{_answer(row)}</span>"])
        html += (f"<h3>found on the device: {len(rows)}</h3>"
                 + table(("", "name", "where", "type", "value"), rows, id="found")
                 + f'<div class="actions"><button type="submit" class="secondary" id="pick" '
                   f'formaction="/console/{esc(entry.section)}/pick">add the ticked as '
                   f"points</button></div>")
    return html


# -- handlers ----------------------------------------------------------------------------------


def _shared_section(entry: Entry) -> str:
    spec = form_spec(entry)
    return spec.shared[1] if spec.shared is not None else ""


def _errors_of(entry: Entry, index: int, shared_index: int, errors: dict[str, str],
               general: list[str]) -> tuple[dict[str, str], list[str]]:
    """The errors of a new shared table (`bridge.buses.M.host`) at its inputs (`bus.host`)."""
    spec = form_spec(entry)
    if spec.shared is None:
        return errors, general
    shared_errors, general = field_errors(general, f"bridge.{spec.shared[1]}.{shared_index}")
    errors.update({f"{spec.shared[0]}.{key}": text for key, text in shared_errors.items()})
    return errors, general


def _counts(request: web.Request, entry: Entry) -> tuple[int, int]:
    """(index a new device of the family gets, index a new shared table gets)."""
    document, _ = request.app[CONSOLE].file.document()
    bridge = document.get("bridge", {})
    return (len(bridge.get(entry.section, [])),
            len(bridge.get(_shared_section(entry), [])) if _shared_section(entry) else 0)


async def new_device_page(request: web.Request) -> web.StreamResponse:
    if not session_of(request).can_change:
        raise web.HTTPForbidden(text="your role is read-only")
    return device_form(request, entry_of(request), {}, {}, [])


async def add_device(request: web.Request) -> web.StreamResponse:
    entry = entry_of(request)
    form = form_dict(await request.post())
    device, shared, _ = device_table(form, form_spec(entry))
    index, shared_index = _counts(request, entry)
    name = device.get("name", "")
    errors, general = propose(request, add_device_edit(device, shared, entry.section,
                                                       _shared_section(entry)),
                              f"add device {name or '?'}", "/console/devices",
                              f"bridge.{entry.section}.{index}")
    errors, general = _errors_of(entry, index, shared_index, errors, general)
    return device_form(request, entry, form, errors, general)


async def probe_page(request: web.Request) -> web.StreamResponse:
    console = request.app[CONSOLE]
    entry = entry_of(request)
    form = form_dict(await request.post())
    spec = form_spec(entry)
    device, shared, _ = device_table(form, spec)
    device["name"] = device.get("name") or "probe"
    editing = form.get("editing", "")
    index, shared_index = _counts(request, entry)
    if editing:
        try:
            index, _ = find_device(console.file.document()[0], editing, entry.section)
        except KeyError:
            raise web.HTTPNotFound(text=f"no device {editing!r}\n") from None
        edit = replace_device_edit(editing, entry.section, device, shared,
                                   _shared_section(entry), spec)
    else:
        edit = add_device_edit(device, shared, entry.section, _shared_section(entry))
    try:
        config = console.file.trial(edit)
    except ConfigError as exc:
        errors, general = field_errors(exc.errors, f"bridge.{entry.section}.{index}")
        errors, general = _errors_of(entry, index, shared_index, errors, general)
        return device_form(request, entry, form, errors, general, editing=editing)
    except (KeyError, OSError) as exc:
        return device_form(request, entry, form, {}, [str(exc)], editing=editing)
    target = next(d for d in entry.devices(config.bridge) if d.name == device["name"])
    problem = ""
    exploration = None
    try:
        exploration = await asyncio.wait_for(entry.explore(target, config.bridge),
                                             EXPLORE_TIMEOUT)
    except TimeoutError:
        problem = f"no answer within {EXPLORE_TIMEOUT:g} s"
    except Exception as exc:  # every failure of a probe is its answer, shown on the page
        problem = str(exc) or type(exc).__name__
    user = session_of(request).user
    log.info("console: %s probed %s (%s)", user, target.name, problem or
             f"{len(exploration.points) if exploration else 0} point(s)",
             extra={"console_user": user})
    return device_form(request, entry, form, {}, [], exploration, problem, editing)


async def pick_page(request: web.Request) -> web.StreamResponse:
    """The form again, with the ticked rows of a browse as point rows after the last one."""
    entry = entry_of(request)
    form = form_dict(await request.post())
    spec = form_spec(entry)
    picked = [i for i in sent_rows(form, "found.") if form.get(f"found.{i}.pick")]
    filled = [row for row, _ in point_rows(form, spec.columns)]
    row = max(filled, default=-1) + 1
    new = {k: v for k, v in form.items() if not k.startswith("found.")}
    for found in picked:
        if row >= MAX_POINT_ROWS:
            break
        for column in spec.columns:
            new[f"points.{row}.{column.key}"] = form.get(f"found.{found}.{column.key}",
                                                         column.first())
        row += 1
    return device_form(request, entry, new, {}, [], editing=form.get("editing", ""))


async def edit_page(request: web.Request) -> web.StreamResponse:
    """Every setting the family's form shows of one device, and its own points, to edit."""
    if not session_of(request).can_change:
        raise web.HTTPForbidden(text="your role is read-only")
    entry, device = device_of(request)
    document, _ = request.app[CONSOLE].file.document()
    try:
        _, table_ = find_device(document, device.name, entry.section)
    except KeyError:
        raise web.HTTPConflict(text=f"{device.name} is no longer in the file\n") from None
    return device_form(request, entry, form_of(table_, form_spec(entry)), {}, [],
                       editing=device.name)


async def edit_device(request: web.Request) -> web.StreamResponse:
    entry, device = device_of(request)
    form = form_dict(await request.post())
    spec = form_spec(entry)
    table_, shared, _ = device_table(form, spec)
    index, shared_index = _counts(request, entry)
    try:
        index, _ = find_device(request.app[CONSOLE].file.document()[0], device.name,
                               entry.section)
    except KeyError:
        raise web.HTTPConflict(text=f"{device.name} is no longer in the file\n") from None
    name = table_.get("name", device.name)
    errors, general = propose(
        request, replace_device_edit(device.name, entry.section, table_, shared,
                                     _shared_section(entry), spec),
        f"edit device {device.name}", f"/console/devices/{name}",
        f"bridge.{entry.section}.{index}")
    errors, general = _errors_of(entry, index, shared_index, errors, general)
    return device_form(request, entry, form, errors, general, editing=device.name)
