"""The alarms page: every alarm with its state, severity, value and times; acknowledge and
shelve; the recent transitions; alarm definitions added and removed.

How this works: states come from the running `AlarmService` (bridge/alarms/service.py), so the
page shows what MQTT shows. Acknowledging and shelving go to the service (the same path as
`alarms/<name>/ack` and `.../shelve`), are allowed to operators and admins (the guard's
`Session.may_post`) and audited. Definitions are configuration: adding or removing one is an
edit of `[[alarms.rules]]` in outpost.toml, checked, reviewed and applied like every change
(admins only); the reload hands the new `[alarms]` to the service, which keeps the state and
transition numbers of the alarms that stay. `alarms.json` feeds alarms.js: the count in the
navigation and the page's states, refreshed every 2 s.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any

import tomlkit
from aiohttp import web
from tomlkit.toml_document import TOMLDocument

from bridge.alarms.config import KINDS, SEVERITIES
from bridge.alarms.service import AlarmService
from outpost.console.context import CONSOLE, audit, path_index, propose, render, session_of
from outpost.console.devices import append_table, array_of_tables, typed
from outpost.console.html import (
    attr,
    button_form,
    csrf_input,
    esc,
    field,
    general_errors,
    table,
    value_text,
)

FIELDS = ("name", "point", "kind", "limit", "deadband", "on_delay", "off_delay", "window",
          "stale_after", "severity", "description")
NUMBERS = ("limit", "deadband", "on_delay", "off_delay", "window", "stale_after")
SHELVE_MINUTES = (("15", "15 min"), ("60", "1 h"), ("480", "8 h"), ("1440", "1 day"))


def add_routes(router: web.UrlDispatcher) -> None:
    router.add_get("/console/alarms", alarms_page)
    router.add_get("/console/alarms.json", alarms_json)
    router.add_post("/console/alarms", add_alarm)
    router.add_post("/console/alarms/{index}/remove", remove_alarm)
    router.add_post("/console/alarms/{name}/ack", acknowledge)
    router.add_post("/console/alarms/{name}/shelve", shelve)


def _when(ms: object) -> str:
    if not isinstance(ms, int):
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ms / 1000))


def _service(request: web.Request) -> AlarmService:
    alarms = request.app[CONSOLE].alarms
    if alarms is None:
        raise web.HTTPNotFound(text="no alarms: the bridge is not running\n")
    return alarms


async def alarms_page(request: web.Request, errors: Mapping[str, str] | None = None,
                      general: list[str] | None = None) -> web.StreamResponse:
    console = request.app[CONSOLE]
    session = session_of(request)
    service = console.alarms
    rows = []
    for row in service.status() if service is not None else []:
        name = row["name"]
        actions = ""
        if session.can_operate:
            base = f"/console/alarms/{name}"
            if not row["acked"] and row["state"] != "shelved":
                actions += button_form(f"{base}/ack", "acknowledge", session.csrf,
                                       css="ack")
            if row["state"] == "shelved":
                actions += button_form(f"{base}/shelve", "unshelve", session.csrf,
                                       {"minutes": "0"}, css="secondary")
            else:
                choices = "".join(f'<option{attr("value", v)}>{esc(t)}</option>'
                                  for v, t in SHELVE_MINUTES)
                actions += (f'<form method="post"{attr("action", f"{base}/shelve")} '
                            f'class="inline">{csrf_input(session.csrf)}<select name="minutes">'
                            f'{choices}</select><button type="submit" class="secondary">shelve'
                            f"</button></form>")
        limit = "" if row["limit"] is None else f" {row['limit']:g}"
        rows.append([
            esc(name), esc(row["point"]), esc(f"{row['kind']}{limit}"),
            f'<span class="severity {esc(row["severity"])}">{esc(row["severity"])}</span>',
            f'<span class="alarm-state {esc(row["state"])}"{attr("data-alarm", name)}>'
            f'{esc(row["state"].replace("_", " "))}</span>',
            f'<span{attr("data-alarm-value", name)}>{esc(value_text(row["value"], None))}</span>',
            esc(_when(row["raised_ms"])), esc(_when(row["since_ms"])),
            esc(_when(row["shelved_until_ms"])), actions])
    body = table(("alarm", "point", "kind", "severity", "state", "value", "raised", "since",
                  "shelved until", ""), rows, "no alarms defined", id="alarms")
    if service is not None:
        recent = [[esc(_when(t.ts_ms)), esc(t.alarm), esc(t.number),
                   esc(f"{t.from_state} → {t.to_state}".replace("_", " ")), esc(t.cause),
                   esc(value_text(t.value, None)), esc(t.user or "")]
                  for t in service.journal.recent(20)]
        body += "<h3>recent transitions</h3>" + table(
            ("time", "alarm", "#", "change", "cause", "value", "by"), recent, "none yet",
            id="transitions")
    if session.can_change:
        body += _definitions(request, errors or {}, general or [])
    return render(request, "alarms", f'<div id="alarms-page">{body}</div>', "alarms")


def _definitions(request: web.Request, errors: Mapping[str, str], general: list[str]) -> str:
    """The admin's part: the defined alarms with a remove button each, and the add form."""
    console = request.app[CONSOLE]
    session = session_of(request)
    config = console.config()
    rules = [[esc(r.name), esc(r.point), esc(r.kind),
              button_form(f"/console/alarms/{i}/remove", "remove", session.csrf, css="danger")]
             for i, r in enumerate(config.alarms.rules)]
    points = [(f"{d.name}/{p.name}", f"{d.name}/{p.name}") for d in
              config.bridge.device_configs() for p in d.describe().points]
    points += [(d.name, f"{d.name} (offline)") for d in config.bridge.device_configs()]
    return ("<h3>definitions</h3>" + table(("alarm", "point", "kind", ""), rules, "none",
                                           id="definitions")
            + f"<h3>add an alarm</h3>{general_errors(general)}"
            f'<form method="post" action="/console/alarms" id="alarm-form">'
            f'{csrf_input(session.csrf)}<div class="panel">'
            + field("name", "name", "", errors)
            + field("point", "point (device/point, or a device for offline)", "", errors,
                    options=points)
            + field("kind", "kind", "high", errors, options=[(k, k) for k in KINDS])
            + field("limit", "limit (rate: per second)", "", errors)
            + field("deadband", "deadband", "", errors)
            + field("on_delay", "on delay (s)", "", errors)
            + field("off_delay", "off delay (s)", "", errors)
            + field("window", "rate window (s)", "", errors)
            + field("stale_after", "stale after (s)", "", errors)
            + field("severity", "severity", "medium", errors,
                    options=[(s, s) for s in SEVERITIES])
            + field("description", "description", "", errors)
            + '</div><div class="actions"><button type="submit" id="add-alarm">review change'
            "</button></div></form>")


async def add_alarm(request: web.Request) -> web.StreamResponse:
    console = request.app[CONSOLE]
    form = await request.post()
    rule: dict[str, Any] = {}
    for key in FIELDS:
        text = str(form.get(key, "")).strip()
        if text:
            rule[key] = typed(text) if key in NUMBERS else text
    document, _ = console.file.document()
    index = len(document.get("alarms", {}).get("rules", []))

    def edit(document: TOMLDocument) -> None:
        table_ = tomlkit.table()
        table_.update(rule)
        append_table(array_of_tables(document, "alarms", "rules"), table_)

    errors, general = propose(request, edit, f"add alarm {rule.get('name', '?')}",
                              "/console/alarms", f"alarms.rules.{index}")
    # an unknown point is found where the bridge's devices are known: shown at its field
    for line in list(general):
        if f"rules.{index}.point: " in line:
            general.remove(line)
            errors["point"] = line.split(f"rules.{index}.point: ", 1)[1]
    return await alarms_page(request, errors, general)


async def remove_alarm(request: web.Request) -> web.StreamResponse:
    rules = request.app[CONSOLE].config().alarms.rules
    index = path_index(request, "index", len(rules), "alarm definition")
    name = rules[index].name

    def edit(document: TOMLDocument) -> None:
        del array_of_tables(document, "alarms", "rules")[index]

    errors, general = propose(request, edit, f"remove alarm {name}", "/console/alarms")
    return await alarms_page(request, errors, general)


def _named(request: web.Request) -> tuple[AlarmService, str]:
    service = _service(request)
    name = request.match_info["name"]
    if name not in service.alarms:
        raise web.HTTPNotFound(text=f"no alarm {name!r}\n")
    return service, name


async def acknowledge(request: web.Request) -> web.StreamResponse:
    service, name = _named(request)
    session = session_of(request)
    transition = service.acknowledge(name, session.user)
    if transition is None:
        session.notice = f"alarm {name}: nothing to acknowledge"
    else:
        session.notice = f"alarm {name} acknowledged"
        audit(session.user, "alarm", f"acknowledge {name}", alarm=name)
    raise web.HTTPSeeOther("/console/alarms")


async def shelve(request: web.Request) -> web.StreamResponse:
    service, name = _named(request)
    session = session_of(request)
    form = await request.post()
    text = str(form.get("minutes", ""))
    try:
        minutes = float(text)
        service.shelve(name, minutes * 60, session.user)
    except ValueError as exc:
        session.notice = f"alarm {name}: not shelved: {exc}"
    else:
        what = f"unshelve {name}" if minutes == 0 else f"shelve {name} for {minutes:g} min"
        session.notice = (f"alarm {name} unshelved" if minutes == 0
                          else f"alarm {name} shelved for {minutes:g} min")
        audit(session.user, "alarm", what, alarm=name)
    raise web.HTTPSeeOther("/console/alarms")


async def alarms_json(request: web.Request) -> web.StreamResponse:
    """Every alarm's state and the unacknowledged count (alarms.js)."""
    service = request.app[CONSOLE].alarms
    rows = service.status() if service is not None else []
    body = {"unacknowledged": service.unacknowledged() if service is not None else 0,
            "alarms": rows}
    return web.Response(text=json.dumps(body, default=str), content_type="application/json")
