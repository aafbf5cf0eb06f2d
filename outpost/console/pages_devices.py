"""The devices pages: the list, adding a device (from a profile or by points) with a probe,
one device's page (live values, deadbands, writes, removal), and the live value stream.

How this works: every form posts to a handler that turns it into an edit of the configuration
document (outpost/console/devices.py) and hands it to `propose` (review, then apply); a form
with errors is rendered again as it was sent, each error under its input. The probe reads the
device as the form describes it and renders the form again with each point's answer. Writes go
to the bridge's own write path (`Bridge.write`: the same checks as `<prefix>/<dev>/<pt>/set`).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from aiohttp import web

from bridge.modbus.config import BusConfig, DeviceConfig, PointConfig, profile_names
from bridge.modbus.poller import WriteError
from bridge.serial.config import SerialPointConfig
from bridge.serial.reader import CommandError
from gateway.base.settings import ConfigError
from outpost.config import config_folder
from outpost.console.changes import field_errors, keep_fields
from outpost.console.context import CONSOLE, audit, propose, render, session_of
from outpost.console.devices import (
    BUS_KEYS,
    DEVICE_KEYS,
    NEW_BUS,
    POINT_KEYS,
    SERIAL_KEYS,
    SERIAL_POINT_KEYS,
    Answer,
    FormError,
    add_device_edit,
    add_serial_edit,
    device_table,
    enabled_edit,
    point_rows,
    probe,
    probe_bus,
    probe_device,
    remove_device_edit,
    remove_serial_edit,
    row_errors,
    sent_rows,
    serial_table,
    typed,
    update_device_edit,
)
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

log = logging.getLogger("outpost.console")
POINT_ROWS = 4
KEEPALIVE = 15.0  # seconds between two keepalive lines of an idle event stream


def add_routes(router: web.UrlDispatcher) -> None:
    router.add_get("/console/devices", devices_page)
    router.add_get("/console/devices/new", new_device_page)
    router.add_post("/console/devices/new", add_device)
    router.add_post("/console/devices/probe", probe_page)
    router.add_get("/console/devices/{device}", device_page)
    router.add_post("/console/devices/{device}", edit_device)
    router.add_post("/console/devices/{device}/remove", remove_device)
    router.add_post("/console/devices/{device}/enabled", set_enabled)
    router.add_post("/console/devices/{device}/write", write_point)
    router.add_get("/console/serial/new", new_serial_page)
    router.add_post("/console/serial/new", add_serial)
    router.add_post("/console/serial/{device}/remove", remove_serial)
    router.add_post("/console/serial/{device}/enabled", set_enabled)
    router.add_get("/console/live", live_stream)


def _states(request: web.Request) -> dict[str, dict[str, Any]]:
    section = request.app[CONSOLE].board.collect().get("devices") or {}
    return {d["name"]: d for d in section.get("devices", [])}


def _last_values(device: str, points: Sequence[SerialPointConfig | PointConfig],
                 state: Mapping[str, Any], shown: int = 4) -> str:
    """The first points' latest values, each in a cell the live stream updates."""
    values = state.get("points") or {}
    return " · ".join(
        f'{esc(p.name)} <span class="value"{attr("data-live", f"{device}/{p.name}")}>'
        f"{esc(value_text(values.get(p.name, {}).get('value'), p.unit))}</span>"
        for p in points[:shown])


async def devices_page(request: web.Request) -> web.StreamResponse:
    console = request.app[CONSOLE]
    session = session_of(request)
    config = console.config().bridge
    states = _states(request)
    rows = []
    for device in config.devices:
        state = states.get(device.name, {})
        values = _last_values(device.name, device.points, state)
        rows.append([f'<a href="/console/devices/{esc(device.name)}">{esc(device.name)}</a>',
                     "modbus", esc(device.bus), esc(device.unit_id),
                     device_badge(device.name, state.get("online"), device.enabled), values])
    for serial in config.serial:
        state = states.get(serial.name, {})
        values = _last_values(serial.name, serial.points, state)
        remove = (_enabled_button(f"/console/serial/{serial.name}", serial.enabled, session.csrf)
                  + button_form(f"/console/serial/{serial.name}/remove", "remove", session.csrf,
                                css="danger") if session.can_change else "")
        rows.append([esc(serial.name), "serial line", esc(serial.device), remove,
                     device_badge(serial.name, state.get("online"), serial.enabled), values])
    body = table(("device", "kind", "bus / port", "unit", "state", "last values"), rows,
                 "no devices configured", id="devices")
    if session.can_change:
        body += ('<div class="actions"><a href="/console/devices/new"><button type="button" '
                 'id="add-device">add a Modbus device</button></a><a href="/console/serial/new">'
                 '<button type="button" class="secondary" id="add-serial">add a serial line '
                 "device</button></a></div>")
    return render(request, "devices", f'<div data-live-device="">{body}</div>', "devices")


# -- adding a device ---------------------------------------------------------------------------


def _device_form(request: web.Request, form: Mapping[str, str], errors: Mapping[str, str],
                 general: list[str], answers: list[Answer] | None = None) -> web.Response:
    console = request.app[CONSOLE]
    session = session_of(request)
    bridge = console.config().bridge
    buses = [(b.name, f"{b.name} ({b.type} {b.host or b.device}:{b.port})") for b in bridge.buses]
    buses.append((NEW_BUS, "a new bus…"))
    profiles = [("", "none: by points below"), *((p, p) for p in profile_names())]
    get = form.get
    device = "".join((
        field("name", "name", get("name", ""), errors),
        field("map", "profile", get("map", ""), errors, options=profiles),
        field("bus", "bus", get("bus", buses[0][0]), errors, options=buses),
        field("unit_id", "unit id", get("unit_id", "1"), errors),
        field("address_base", "address base (empty: the profile's)", get("address_base", ""),
              errors, options=[("", "profile / 0"), ("0", "0"), ("1", "1")]),
        field("poll_interval", "poll every (s)", get("poll_interval", "1"), errors),
    ))
    bus = "".join((
        field("bus.name", "new bus name", get("bus.name", ""), errors),
        field("bus.type", "type", get("bus.type", "tcp"), errors,
              options=[("tcp", "Modbus TCP"), ("rtu-over-tcp", "RTU over TCP"),
                       ("rtu", "RTU (serial port)")]),
        field("bus.host", "host", get("bus.host", ""), errors),
        field("bus.port", "TCP port", get("bus.port", ""), errors),
        field("bus.device", "serial port", get("bus.device", ""), errors,
              placeholder="/dev/ttyUSB0"),
        field("bus.baudrate", "baud rate", get("bus.baudrate", ""), errors),
        field("bus.parity", "parity", get("bus.parity", "N"), errors,
              options=[("N", "none"), ("E", "even"), ("O", "odd")]),
    ))
    count = _row_count(form)
    errors, general = _form_errors(form, errors, general, POINT_KEYS, count,
                                   {*DEVICE_KEYS, "bus.name", *(f"bus.{k}" for k in BUS_KEYS)})
    rows = []
    for i in range(count):
        rows.append([cell_input(f"points.{i}.{key}", get(f"points.{i}.{key}", ""), errors,
                                kind="checkbox" if key == "writable" else "text",
                                size=14 if key == "name" else 7)
                     for key in POINT_KEYS])
    points = table(POINT_KEYS, rows, id="point-rows")
    probe_html = _answers(answers) if answers is not None else ""
    body = (f'{general_errors(general)}<form method="post" action="/console/devices/new" '
            f'id="device-form">{csrf_input(session.csrf)}'
            f'<div class="panel">{device}</div><h3>new bus (when bus is "a new bus…")</h3>'
            f'<div class="panel">{bus}</div><h3>points (besides the profile\'s)</h3>{points}'
            f'<div class="actions"><button type="submit" formaction="/console/devices/probe" '
            f'class="secondary" id="probe">probe</button>'
            f'<button type="submit" id="review">review change</button></div></form>{probe_html}')
    return render(request, "add a device", body, "devices")


def _answers(answers: list[Answer]) -> str:
    rows = []
    for answer in answers:
        if answer.error is not None:
            result = f'<span class="q-bad">failed: {esc(answer.error)}</span>'
        else:
            quality = "" if answer.quality == "good" else f" ({esc(answer.quality)})"
            result = esc(value_text(answer.value, answer.unit)) + quality
        rows.append([esc(answer.point), esc(answer.table), esc(answer.address),
                     f'<span class="probe-value"{attr("data-point", answer.point)}>{result}'
                     f"</span>"])
    ok = sum(1 for a in answers if a.error is None)
    return (f"<h3>probe: {ok} of {len(answers)} point(s) answered</h3>"
            + table(("point", "table", "address", "answer"), rows, id="probe-results"))


def _form_dict(form: Mapping[str, Any]) -> dict[str, str]:
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


def _form_errors(form: Mapping[str, str], errors: Mapping[str, str], general: list[str],
                 point_keys: tuple[str, ...], count: int, fields: set[str]
                 ) -> tuple[dict[str, str], list[str]]:
    """Every error next to an input the form shows (a point's under its row), the others at
    the top: none is filed under a key no input has."""
    rows = [row for row, _ in point_rows(form, point_keys)]
    inputs = fields | {f"points.{i}.{key}" for i in range(count) for key in point_keys}
    return keep_fields(row_errors(errors, rows, point_keys), general, inputs)


async def new_device_page(request: web.Request) -> web.StreamResponse:
    if not session_of(request).can_change:
        raise web.HTTPForbidden(text="your role is read-only")
    return _device_form(request, {}, {}, [])


async def add_device(request: web.Request) -> web.StreamResponse:
    console = request.app[CONSOLE]
    form = _form_dict(await request.post())
    device, bus = device_table(form)
    document, _ = console.file.document()
    index = len(document.get("bridge", {}).get("devices", []))
    bus_index = len(document.get("bridge", {}).get("buses", []))
    summary = f"add device {device.get('name', '?')}"
    errors, general = propose(request, add_device_edit(device, bus), summary,
                              f"/console/devices/{device.get('name', '')}",
                              f"bridge.devices.{index}")
    bus_errors, general = field_errors(general, f"bridge.buses.{bus_index}")
    errors.update({f"bus.{key}": message for key, message in bus_errors.items()})
    return _device_form(request, form, errors, general)


async def probe_page(request: web.Request) -> web.StreamResponse:
    console = request.app[CONSOLE]
    form = _form_dict(await request.post())
    device, bus_table = device_table(form)
    running = console.config()
    try:
        if bus_table is not None:
            bus = probe_bus(bus_table)
        elif any(b.name == device.get("bus") for b in running.bridge.buses):
            bus = running.bridge.bus(str(device["bus"]))
        else:
            raise ConfigError("probe", [f"bus: no bus {device.get('bus')!r}"])
        config = probe_device({**device, "name": device.get("name") or "probe"}, bus,
                              config_folder(console.file.path))
    except ConfigError as exc:  # paths are the form's own names: `unit_id`, `bus.host`
        errors = {path: message for path, _, message in
                  (line.partition(": ") for line in exc.errors)}
        return _device_form(request, form, errors, exc.errors)
    answers = await _probe(request, config, bus)
    log.info("console: %s probed %s (%d point(s))", session_of(request).user, config.name,
             len(answers), extra={"console_user": session_of(request).user})
    return _device_form(request, form, {}, [], answers)


async def _probe(request: web.Request, device: DeviceConfig, bus: BusConfig) -> list[Answer]:
    bridge = request.app[CONSOLE].bridge
    running = None
    if bridge is not None and bus.name in bridge.buses and bridge.config.bus(bus.name) == bus:
        running = bridge.buses[bus.name]
    return await probe(device, bus, running)


# -- serial line devices ---------------------------------------------------------------------


def _serial_form(request: web.Request, form: Mapping[str, str], errors: Mapping[str, str],
                 general: list[str]) -> web.Response:
    session = session_of(request)
    get = form.get
    count = _row_count(form)
    errors, general = _form_errors(form, errors, general, SERIAL_POINT_KEYS, count,
                                   set(SERIAL_KEYS))
    device = "".join((
        field("name", "name", get("name", ""), errors),
        field("device", "serial port", get("device", ""), errors, placeholder="/dev/ttyUSB1"),
        field("baudrate", "baud rate", get("baudrate", "9600"), errors),
        field("parity", "parity", get("parity", "N"), errors,
              options=[("N", "none"), ("E", "even"), ("O", "odd")]),
        field("delimiter", "line end", get("delimiter", "\\r\\n"), errors),
        field("pattern", "regex (one named group per point)", get("pattern", ""), errors,
              placeholder=r"T=(?P<temperature>[-\d.]+)"),
    ))
    rows = [[cell_input(f"points.{i}.{key}", get(f"points.{i}.{key}", ""), errors,
                        size=14 if key in ("name", "field") else 7)
             for key in SERIAL_POINT_KEYS] for i in range(count)]
    body = (f'{general_errors(general)}<form method="post" action="/console/serial/new" '
            f'id="serial-form">{csrf_input(session.csrf)}<input type="hidden" name="parser" '
            f'value="regex"><div class="panel">{device}</div><h3>points (field: the regex '
            f"group)</h3>{table(SERIAL_POINT_KEYS, rows, id='serial-rows')}"
            f'<div class="actions"><button type="submit" id="review-serial">review change'
            f"</button></div></form>")
    return render(request, "add a serial line device", body, "devices")


async def new_serial_page(request: web.Request) -> web.StreamResponse:
    if not session_of(request).can_change:
        raise web.HTTPForbidden(text="your role is read-only")
    return _serial_form(request, {}, {}, [])


async def add_serial(request: web.Request) -> web.StreamResponse:
    console = request.app[CONSOLE]
    form = _form_dict(await request.post())
    device = serial_table(form)
    document, _ = console.file.document()
    index = len(document.get("bridge", {}).get("serial", []))
    errors, general = propose(request, add_serial_edit(device),
                              f"add serial device {device.get('name', '?')}",
                              "/console/devices", f"bridge.serial.{index}")
    return _serial_form(request, form, errors, general)


async def remove_serial(request: web.Request) -> web.StreamResponse:
    name = request.match_info["device"]
    errors, general = propose(request, remove_serial_edit(name), f"remove serial device {name}",
                              "/console/devices")
    session_of(request).notice = "; ".join([*general, *errors.values()])
    raise web.HTTPSeeOther("/console/devices")


# -- one device ------------------------------------------------------------------------------


def _device(request: web.Request) -> DeviceConfig:
    name = request.match_info["device"]
    for device in request.app[CONSOLE].config().bridge.devices:
        if device.name == name:
            return device
    raise web.HTTPNotFound(text=f"no Modbus device {name!r}")


def _own_points(request: web.Request, name: str) -> set[str]:
    document, _ = request.app[CONSOLE].file.document()
    for table_ in document.get("bridge", {}).get("devices", []):
        if table_.get("name") == name:
            return {str(p.get("name")) for p in table_.get("points", [])}
    return set()


async def device_page(request: web.Request, errors: Mapping[str, str] | None = None,
                      general: list[str] | None = None) -> web.StreamResponse:
    device = _device(request)
    session = session_of(request)
    state = _states(request).get(device.name, {})
    own = _own_points(request, device.name)
    errors, general = keep_fields(errors or {}, general or [], {
        "unit_id", "poll_interval", *(f"deadband.{p.name}" for p in device.points
                                      if p.name in own)})
    values = state.get("points") or {}
    rows = []
    writes: list[str] = []
    for point in device.points:
        key = f"{device.name}/{point.name}"
        value = value_text(values.get(point.name, {}).get("value"), point.unit)
        if session.can_change and point.name in own:
            deadband = cell_input(f"deadband.{point.name}", point.deadband or "", errors, size=6)
        else:
            deadband = esc(point.deadband if point.deadband is not None else "")
        write = ""
        if point.writable and session.can_change:  # (forms cannot nest: `form=` names it)
            ident = f"write-{point.name}"
            write = (f'<input name="value" size="6"{attr("form", ident)}>'
                     f'<button type="submit"{attr("form", ident)}{attr("id", ident + "-button")}'
                     f">write</button>")
            writes.append(f'<form method="post" action="/console/devices/{esc(device.name)}/'
                          f'write"{attr("id", ident)}>{csrf_input(session.csrf)}'
                          f'<input type="hidden" name="point"{attr("value", point.name)}></form>')
        rows.append([esc(point.name), esc(point.table), esc(point.address),
                     f'<span class="value"{attr("data-live", key)}>{esc(value)}</span>',
                     deadband, write])
    points = table(("point", "table", "address", "value", "deadband", "write"), rows,
                   "no points", id="points")
    badge = device_badge(device.name, state.get("online"), device.enabled)
    info = (f'<div class="panel">{badge} bus '
            f"{esc(device.bus)} · unit id {esc(device.unit_id)} · "
            f"{esc(device.map or 'own points')} · poll every {device.poll_interval:g} s</div>")
    if session.can_change:
        settings = "".join((
            field("unit_id", "unit id", device.unit_id, errors),
            field("poll_interval", "poll every (s)", device.poll_interval, errors)))
        body = (f"{general_errors(general)}{info}"
                f'<form method="post" action="/console/devices/{esc(device.name)}" '
                f'id="edit-device">{csrf_input(session.csrf)}<div class="panel">{settings}</div>'
                f'{points}<div class="actions"><button type="submit" id="save">review change'
                f"</button></div></form>"
                + _enabled_button(f"/console/devices/{device.name}", device.enabled,
                                  session.csrf)
                + button_form(f"/console/devices/{device.name}/remove", "remove this device",
                              session.csrf, css="danger") + "".join(writes))
    else:
        body = info + points
    body = f'<div{attr("data-live-device", device.name)}>{body}</div>'
    return render(request, f"device {device.name}", body, "devices")


async def edit_device(request: web.Request) -> web.StreamResponse:
    console = request.app[CONSOLE]
    device = _device(request)
    form = _form_dict(await request.post())
    own = _own_points(request, device.name)
    settings: dict[str, Any] = {key: typed(form[key]) for key in ("unit_id", "poll_interval")
                                if key in form}
    points: dict[str, dict[str, Any]] = {}
    for point in device.points:
        text = form.get(f"deadband.{point.name}")
        if text is None or point.name not in own:
            continue
        new = typed(text) if text.strip() else None
        if new != point.deadband:
            points[point.name] = {"deadband": new}
    document, _ = console.file.document()
    index = next((i for i, d in enumerate(document.get("bridge", {}).get("devices", []))
                  if d.get("name") == device.name), None)
    if index is None:  # the running configuration has it, the file no longer
        raise web.HTTPConflict(text=f"{device.name} is no longer in {console.file.path}: "
                               f"it was edited meanwhile\n")
    changed = ", ".join([*settings, *(f"{p}.deadband" for p in points)])
    errors, general = propose(request, update_device_edit(device.name, settings, points),
                              f"edit device {device.name} ({changed})",
                              f"/console/devices/{device.name}", f"bridge.devices.{index}")
    # `points.N.deadband` errors belong to the deadband input of point N
    for key in [k for k in errors if k.startswith("points.")]:
        parts = key.split(".")
        if len(parts) == 3 and parts[1].isdigit() and int(parts[1]) < len(device.points):
            errors[f"{parts[2]}.{device.points[int(parts[1])].name}"] = errors.pop(key)
    return await device_page(request, errors, general)


async def remove_device(request: web.Request) -> web.StreamResponse:
    device = _device(request)
    errors, general = propose(request, remove_device_edit(device.name),
                              f"remove device {device.name}", "/console/devices")
    return await device_page(request, errors, general)


def _enabled_button(device_path: str, enabled: bool, csrf: str) -> str:
    """Disable (or enable again) through the change review, like any other edit."""
    return button_form(f"{device_path}/enabled", "disable" if enabled else "enable", csrf,
                       {"enabled": "false" if enabled else "true"}, css="secondary")


async def set_enabled(request: web.Request) -> web.StreamResponse:
    """`enabled = false` / back to enabled, for a Modbus or a serial device."""
    name = request.match_info["device"]
    family = "serial" if request.path.startswith("/console/serial/") else "devices"
    enabled = (await request.post()).get("enabled") == "true"
    back = f"/console/devices/{name}" if family == "devices" else "/console/devices"
    errors, general = propose(request, enabled_edit(family, name, enabled),
                              f"{'enable' if enabled else 'disable'} device {name}", back)
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
    device = _device(request)
    form = await request.post()
    point, text = str(form.get("point", "")), str(form.get("value", ""))
    value = _write_value(text)
    if console.bridge is None:
        session.notice = "write refused: no bridge is running"
    else:
        try:
            written, registers = await console.bridge.write(device.name, point, value)
        except (WriteError, CommandError) as exc:
            session.notice = f"write {device.name}/{point} = {text} refused: {exc}"
            log.warning("console: %s: write %s/%s = %r refused: %s", session.user, device.name,
                        point, value, exc, extra={"console_user": session.user,
                                                  "device": device.name})
        else:
            session.notice = f"wrote {device.name}/{point} = {written} (registers {registers})"
            audit(session.user, "write", f"{device.name}/{point} = {written!r}",
                  device=device.name)
    raise web.HTTPSeeOther(f"/console/devices/{device.name}")


# -- live values -------------------------------------------------------------------------------


async def live_stream(request: web.Request) -> web.StreamResponse:
    """Server-Sent Events: the values of one device (`?device=`), or of all."""
    live = request.app[CONSOLE].live
    session = session_of(request)
    queue = live.watch(request.query.get("device") or None, session.token, session.user)
    if queue is None:
        return web.Response(status=503,
                            text=f"refused: {live.refusal(session.token, session.user)}\n")
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                           "Cache-Control": "no-store"})
    await response.prepare(request)
    try:
        while True:
            try:
                event = await asyncio.wait_for(queue.get(), KEEPALIVE)
            except TimeoutError:  # a comment line: a closed tab is noticed, its queue freed
                await response.write(b": keepalive\n\n")
                continue
            if event is None:  # the console is closing
                break
            await response.write(f"data: {event}\n\n".encode())
    except (ConnectionError, RuntimeError):
        pass
    finally:
        live.unwatch(queue)
    return response
