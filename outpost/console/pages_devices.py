"""The devices pages of every family: the list, one device's page (live values, settings,
deadbands, writes, disable, removal, the history chart of outpost/console/pages_history.py),
and the live value stream. Adding and editing a device (its family's form, the probe) are in
outpost/console/pages_forms.py.

How this works: the pages know the families only through bridge/catalog.py: a device is
found by its name in every family's list of the running configuration, shown with the keys
its family's schema hints name (`list`, `edit`, a point's `where`), and changed through the
same review and apply as every other change. Writes go to the bridge's own write path
(`Bridge.write`: the same checks as `<prefix>/<dev>/<pt>/set`), whatever the family.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import quote

from aiohttp import web

from bridge.catalog import entries
from bridge.driver import WriteError
from bridge.families import registered
from outpost.console.changes import keep_fields
from outpost.console.context import CONSOLE, audit, propose, render, session_of
from outpost.console.devices import (
    enabled_edit,
    find_device,
    remove_device_edit,
    typed,
    update_device_edit,
)
from outpost.console.forms import form_spec
from outpost.console.html import (
    attr,
    button_form,
    cell_input,
    csrf_input,
    device_badge,
    esc,
    field,
    general_errors,
    table,
    value_text,
)
from outpost.console.pages_forms import catalog, device_of, form_dict
from outpost.console.pages_history import chart_section

log = logging.getLogger("outpost.console")
KEEPALIVE = 15.0  # seconds between two keepalive lines of an idle event stream
LOOK = 0.5  # seconds between two looks at whether an idle stream's tab was closed


def add_routes(router: web.UrlDispatcher) -> None:
    router.add_get("/console/devices", devices_page)
    router.add_get("/console/live", live_stream)
    for section in {"devices", *(e.section for e in entries(registered(None)))}:
        router.add_post(f"/console/{section}/{{device}}/remove", remove_device)
        router.add_post(f"/console/{section}/{{device}}/enabled", set_enabled)
    router.add_get("/console/devices/{device}", device_page)
    router.add_post("/console/devices/{device}", edit_device)
    router.add_post("/console/devices/{device}/write", write_point)


def _states(request: web.Request) -> dict[str, dict[str, Any]]:
    section = request.app[CONSOLE].board.collect().get("devices") or {}
    return {d["name"]: d for d in section.get("devices", [])}


def _last_values(device: str, points: Sequence[Any], state: Mapping[str, Any],
                 shown: int = 4) -> str:
    """The first points' latest values, each in a cell the live stream updates."""
    values = state.get("points") or {}
    return " · ".join(
        f'{esc(p.name)} <span class="value"{attr("data-live", f"{device}/{p.name}")}>'
        f"{esc(value_text(values.get(p.name, {}).get('value'), getattr(p, 'unit', None)))}"
        f"</span>" for p in points[:shown])


def _keys(device: Any, keys: Sequence[str]) -> str:
    return " · ".join(esc(getattr(device, key)) for key in keys
                      if getattr(device, key, None) is not None)


def _enabled_button(path: str, enabled: bool, csrf: str) -> str:
    """Disable (or enable again) through the change review, like any other edit."""
    return button_form(f"{path}/enabled", "disable" if enabled else "enable", csrf,
                       {"enabled": "false" if enabled else "true"}, css="secondary")


async def devices_page(request: web.Request) -> web.StreamResponse:
    console = request.app[CONSOLE]
    session = session_of(request)
    config = console.config().bridge
    states = _states(request)
    rows = []
    adds = []
    for entry in catalog(request):
        spec = form_spec(entry)
        for device in entry.devices(config):
            state = states.get(device.name, {})
            path = f"/console/{entry.section}/{device.name}"
            actions = (_enabled_button(path, device.enabled, session.csrf)
                       + button_form(f"{path}/remove", "remove", session.csrf, css="danger")
                       if session.can_change else "")
            rows.append([f'<a href="/console/devices/{esc(device.name)}">{esc(device.name)}</a>',
                         esc(entry.title), _keys(device, spec.listed),
                         device_badge(device.name, state.get("online"), device.enabled),
                         _last_values(device.name, device.points, state), actions])
        adds.append(f'<a href="/console/{esc(entry.section)}/new"><button type="button" '
                    f'class="secondary"{attr("id", f"add-{entry.kind}")}>add a '
                    f"{esc(entry.title)}</button></a>")
    body = table(("device", "kind", "where", "state", "last values", ""), rows,
                 "no devices configured", id="devices")
    if session.can_change:
        body += f'<div class="actions">{"".join(adds)}</div>'
    return render(request, "devices", f'<div data-live-device="">{body}</div>', "devices")


# -- one device ------------------------------------------------------------------------------


def _own_points(request: web.Request, section: str, name: str) -> list[str]:
    """The names of the device's own points (those of its table: not a profile's)."""
    document, _ = request.app[CONSOLE].file.document()
    try:
        _, table_ = find_device(document, name, section)
    except KeyError:
        return []
    return [str(p.get("name")) for p in table_.get("points", [])]


async def device_page(request: web.Request, errors: Mapping[str, str] | None = None,
                      general: list[str] | None = None) -> web.StreamResponse:
    entry, device = device_of(request)
    spec = form_spec(entry)
    session = session_of(request)
    state = _states(request).get(device.name, {})
    own = _own_points(request, entry.section, device.name)
    deadbands = any(c.key == "deadband" for c in spec.columns) or all(
        hasattr(p, "deadband") for p in device.points[:1])
    edited = [spec.input(key) for key in spec.edited]
    errors, general = keep_fields(errors or {}, general or [], {
        *spec.edited, *(f"deadband.{p.name}" for p in device.points if p.name in own)})
    values = state.get("points") or {}
    rows = []
    writes: list[str] = []
    for point in device.points:
        key = f"{device.name}/{point.name}"
        unit = getattr(point, "unit", None)
        value = value_text(values.get(point.name, {}).get("value"), unit)
        deadband = esc(getattr(point, "deadband", None) if deadbands else "")
        if deadbands and session.can_change and point.name in own:
            deadband = cell_input(f"deadband.{point.name}", point.deadband or "", errors, size=6)
        write = ""
        if getattr(point, "writable", False) and session.can_operate:  # forms cannot nest
            ident = f"write-{point.name}"
            write = (f'<input name="value" size="6"{attr("form", ident)}>'
                     f'<button type="submit"{attr("form", ident)}{attr("id", ident + "-button")}'
                     f">write</button>")
            writes.append(f'<form method="post" action="/console/devices/{esc(device.name)}/'
                          f'write"{attr("id", ident)}>{csrf_input(session.csrf)}'
                          f'<input type="hidden" name="point"{attr("value", point.name)}></form>')
        chart = f'<a{attr("href", f"?chart={quote(point.name)}#chart")}>{esc(point.name)}</a>'
        rows.append([chart, " ".join(esc(getattr(point, k, "")) for k in spec.where),
                     f'<span class="value"{attr("data-live", key)}>{esc(value)}</span>',
                     deadband, write])
    points = table(("point", "where", "value", "deadband", "write"), rows, "no points",
                   id="points")
    badge = device_badge(device.name, state.get("online"), device.enabled)
    info = (f'<div class="panel">{badge} {esc(entry.title)} · '
            f"{_keys(device, [*spec.listed, *(k for k in spec.edited if k not in spec.listed)])}"
            f"</div>")
    if session.can_change:
        settings = "".join(
            field(item.key, f"{item.label} ({item.unit})" if item.unit else item.label,
                  item.text(getattr(device, item.key, None)), errors,
                  kind="password" if item.kind == "secret" else "text",
                  options=list(item.choices) if item.choices else None)
            for item in edited if item is not None and item.kind != "bool")
        path = f"/console/devices/{device.name}"
        body = (f"{general_errors(general)}{info}"
                f'<form method="post"{attr("action", path)} id="edit-device">'
                f'{csrf_input(session.csrf)}<div class="panel">{settings}</div>'
                f'{points}<div class="actions"><button type="submit" id="save">review change'
                f'</button><a href="{esc(path)}/edit"><button type="button" class="secondary" '
                f'id="edit-all">edit every setting and point</button></a></div></form>'
                + _enabled_button(path, device.enabled, session.csrf)
                + button_form(f"{path}/remove", "remove this device", session.csrf,
                              css="danger") + "".join(writes))
    else:  # an operator's write forms; a viewer has none
        body = info + points + "".join(writes)
    body += chart_section(device.name, [p.name for p in device.points],
                          request.query.getall("chart", []))
    body = f'<div{attr("data-live-device", device.name)}>{body}</div>'
    return render(request, f"device {device.name}", body, "devices")


async def edit_device(request: web.Request) -> web.StreamResponse:
    """The device page's settings and the deadbands of its own points, changed in place."""
    console = request.app[CONSOLE]
    entry, device = device_of(request)
    spec = form_spec(entry)
    form = form_dict(await request.post())
    own = _own_points(request, entry.section, device.name)
    settings: dict[str, Any] = {}
    for key in spec.edited:
        item = spec.input(key)
        if item is None or key not in form:
            continue
        value = item.value(form[key])
        settings[key] = value if form[key].strip() and item.differs(value) else None
    points: dict[str, dict[str, Any]] = {}
    for point in device.points:
        text = form.get(f"deadband.{point.name}")
        if text is None or point.name not in own:
            continue
        new = typed(text) if text.strip() else None
        if new != point.deadband:
            points[point.name] = {"deadband": new}
    document, _ = console.file.document()
    try:
        index, _ = find_device(document, device.name, entry.section)
    except KeyError:  # the running configuration has it, the file no longer
        raise web.HTTPConflict(text=f"{device.name} is no longer in {console.file.path}: "
                               f"it was edited meanwhile\n") from None
    changed = ", ".join([*settings, *(f"{p}.deadband" for p in points)])
    errors, general = propose(
        request, update_device_edit(device.name, settings, points, entry.section),
        f"edit device {device.name} ({changed})", f"/console/devices/{device.name}",
        f"bridge.{entry.section}.{index}")
    # `points.N.deadband` errors belong to the deadband input of own point N
    for key in [k for k in errors if k.startswith("points.")]:
        parts = key.split(".")
        if len(parts) == 3 and parts[1].isdigit() and int(parts[1]) < len(own):
            errors[f"{parts[2]}.{own[int(parts[1])]}"] = errors.pop(key)
    return await device_page(request, errors, general)


async def remove_device(request: web.Request) -> web.StreamResponse:
    entry, device = device_of(request)
    errors, general = propose(request, remove_device_edit(device.name, entry.section),
                              f"remove device {device.name}", "/console/devices")
    session_of(request).notice = "; ".join([*general, *errors.values()])
    raise web.HTTPSeeOther(f"/console/devices/{device.name}")


async def set_enabled(request: web.Request) -> web.StreamResponse:
    """`enabled = false` / back to enabled, for a device of any family."""
    entry, device = device_of(request)
    enabled = (await request.post()).get("enabled") == "true"
    back = (f"/console/devices/{device.name}"
            if request.path.startswith("/console/devices/") else "/console/devices")
    errors, general = propose(request, enabled_edit(entry.section, device.name, enabled),
                              f"{'enable' if enabled else 'disable'} device {device.name}", back)
    session_of(request).notice = "; ".join([*general, *errors.values()])
    raise web.HTTPSeeOther(back)


def _write_value(text: str) -> object:
    """What a user typed, as the JSON of a `.../set` command would carry it."""
    try:
        return json.loads(text)
    except ValueError:
        return text


async def write_point(request: web.Request) -> web.StreamResponse:
    console = request.app[CONSOLE]
    session = session_of(request)
    _, device = device_of(request)
    form = await request.post()
    point, text = str(form.get("point", "")), str(form.get("value", ""))
    value = _write_value(text)
    if console.bridge is None:
        session.notice = "write refused: no bridge is running"
    else:
        try:
            written, registers = await console.bridge.write(device.name, point, value)
        except WriteError as exc:
            session.notice = f"write {device.name}/{point} = {text} refused: {exc}"
            log.warning("console: %s: write %s/%s = %r refused: %s", session.user, device.name,
                        point, value, exc, extra={"console_user": session.user,
                                                  "device": device.name})
        else:
            took = f" (registers {registers})" if registers is not None else ""
            session.notice = f"wrote {device.name}/{point} = {written}{took}"
            audit(session.user, "write", f"{device.name}/{point} = {written!r}",
                  device=device.name)
    raise web.HTTPSeeOther(f"/console/devices/{device.name}")


# -- live values -------------------------------------------------------------------------------


async def live_stream(request: web.Request) -> web.StreamResponse:
    """Server-Sent Events: the values of one device (`?device=`), or of all.

    A tab that is closed (its page left for the next one) closes its connection; the stream
    ends as soon as that is seen, not at its next write (the next value of a device that may
    publish nothing for a long time, or the next keepalive), so that a closed tab does not
    hold one of the streams a login may have (outpost/console/live.py)."""
    live = request.app[CONSOLE].live
    session = session_of(request)
    queue = live.watch(request.query.get("device") or None, session.token, session.user)
    if queue is None:
        return web.Response(status=503,
                            text=f"refused: {live.refusal(session.token, session.user)}\n")
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                           "Cache-Control": "no-store"})
    await response.prepare(request)
    idle = 0.0
    try:
        while True:
            try:
                event = await asyncio.wait_for(queue.get(), LOOK)
            except TimeoutError:
                transport = request.transport
                if transport is None or transport.is_closing():
                    break  # the tab was closed: its queue is freed
                idle += LOOK
                if idle >= KEEPALIVE:  # a comment line: what is between notices it is alive
                    idle = 0.0
                    await response.write(b": keepalive\n\n")
                continue
            idle = 0.0
            if event is None:  # the console is closing
                break
            await response.write(f"data: {event}\n\n".encode())
    except (ConnectionError, RuntimeError):
        pass
    finally:
        live.unwatch(queue)
    return response
