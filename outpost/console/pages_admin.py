"""The overview, uplink and history pages, and the review page of every change.

How this works: the overview and the uplink figures come from the status board (the snapshot
behind `/status`); forward rules are edits of the configuration document like the devices'.
The review page shows a parked change's diff and applies it (outpost/console/changes.py).
The history page lists the versions of the configuration store (outpost/config_store.py), with
the running version and the RAUC update status; rolling back proposes an old text as a change,
reviewed like any other.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import tomlkit
from aiohttp import web
from tomlkit.toml_document import TOMLDocument

from gateway.broker.engine.sys_topics import VERSION
from outpost.config_store import ConfigStoreError
from outpost.console.changes import StaleFileError, keep_fields, unified_diff
from outpost.console.context import (
    CONSOLE,
    audit,
    path_index,
    pending,
    propose,
    render,
    session_of,
)
from outpost.console.devices import append_table, array_of_tables, typed
from outpost.console.html import (
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
from outpost.status import format_bytes, format_duration
from outpost.update import Device, UpdateError, read_status

log = logging.getLogger("outpost.console")


def add_routes(router: web.UrlDispatcher) -> None:
    router.add_get("/console/", overview)
    router.add_get("/console/changes/{change}", review_page)
    router.add_post("/console/changes/{change}/apply", apply_change)
    router.add_post("/console/changes/{change}/cancel", cancel_change)
    router.add_get("/console/uplink", uplink_page)
    router.add_post("/console/uplink/forward", add_forward)
    router.add_post("/console/uplink/forward/{index}", edit_forward)
    router.add_post("/console/uplink/forward/{index}/remove", remove_forward)
    router.add_get("/console/history", history_page)
    router.add_post("/console/history/{version}/rollback", rollback)


def _tile(label: str, value: object, stat: str = "", series: str = "") -> str:
    """A figure, refreshed by the page's script (`stat`), with a sparkline of its history
    (`series`: a history series of the status board)."""
    data = f' data-stat="{esc(stat)}"' if stat else ""
    spark = (f'<svg class="spark" width="140" height="28" data-series="{esc(series)}"></svg>'
             if series else "")
    return (f'<div class="tile"><div class="label">{esc(label)}</div>'
            f'<div class="value"{data}>{esc(value)}</div>{spark}</div>')


async def overview(request: web.Request) -> web.StreamResponse:
    status = request.app[CONSOLE].board.collect()
    messages, queues = status["messages"], status["queues"]
    tiles = "".join((
        _tile("clients", status["clients"]["connected"], "clients.connected",
              "clients/connected"),
        _tile("messages in /s", messages["received_per_s"], "messages.received_per_s",
              "messages/received_per_s"),
        _tile("messages out /s", messages["sent_per_s"], "messages.sent_per_s",
              "messages/sent_per_s"),
        _tile("queued", queues["queued_messages"], "queues.queued_messages",
              "queues/queued_messages"),
        _tile("retained", status["retained"], "retained"),
        _tile("dropped", messages["dropped"], "messages.dropped"),
        _tile("uptime", format_duration(status["uptime_s"])),
    ))
    devices = (status.get("devices") or {}).get("devices", [])
    rows = []
    for device in devices:
        values = " · ".join(
            f'{esc(name)} <span class="value" data-live="{esc(device["name"])}/{esc(name)}">'
            f"{esc(value_text(point.get('value'), point.get('unit')))}</span>"
            for name, point in list((device.get("points") or {}).items())[:6])
        rows.append([f'<a href="/console/devices/{esc(device["name"])}">{esc(device["name"])}'
                     f"</a>", device_badge(device["name"], device.get("online"),
                                           not device.get("disabled")), values])
    uplink = status.get("uplink")
    uplink_line = "no uplink configured" if not uplink else (
        f"{'connected' if uplink.get('connected') else 'disconnected'}, backlog "
        f"{uplink.get('backlog_messages', 0)} messages")
    body = (f'<div data-live-device=""><div class="tiles">{tiles}</div><h3>devices</h3>'
            + table(("device", "state", "values"), rows, "no devices reported")
            + f'<h3>uplink</h3><div class="panel">{esc(uplink_line)}</div></div>'
            + '<p><a href="/">the status page</a> (also at /status and /metrics)</p>')
    return render(request, "overview", body, "overview")


# -- reviewing and applying a change ---------------------------------------------------------


async def review_page(request: web.Request) -> web.StreamResponse:
    proposal = pending(request)
    session = session_of(request)
    change = proposal.id
    body = (f'<div class="panel" id="summary">{esc(proposal.summary)}</div>'
            f'<pre class="diff" id="diff">{esc(proposal.diff)}</pre><div class="actions">'
            + button_form(f"/console/changes/{change}/apply", "apply", session.csrf)
            .replace("<button", '<button id="apply"', 1)
            + button_form(f"/console/changes/{change}/cancel", "cancel", session.csrf,
                          css="secondary")
            + "</div>")
    return render(request, "review the change", body)


async def apply_change(request: web.Request) -> web.StreamResponse:
    console = request.app[CONSOLE]
    proposal = pending(request)
    session = session_of(request)
    try:
        console.file.apply(proposal, session.user, console.reload)
    except StaleFileError as exc:
        session.pending.clear()
        log.warning("console: %s: %s not applied: %s", session.user, proposal.summary, exc,
                    extra={"console_user": session.user})
        return render(request, "change not applied", f'<p><a href="{esc(proposal.back)}">'
                      f"back</a></p>", status=409, error=str(exc))
    except Exception as exc:  # ConfigError (reload refused), OSError (disk)
        session.pending.clear()
        log.error("console: %s: %s not applied: %s", session.user, proposal.summary, exc,
                  extra={"console_user": session.user})
        return render(request, "change not applied", "", status=500,
                      error=f"not applied: {exc}")
    session.pending.clear()
    audit(session.user, "change", proposal.summary)
    session.notice = f"applied: {proposal.summary}"
    raise web.HTTPSeeOther(proposal.back if _exists(request, proposal.back) else "/console/")


def _exists(request: web.Request, path: str) -> bool:
    name = path.removeprefix("/console/devices/")
    if name == path or "/" in name:
        return True
    return any(d.name == name for d in request.app[CONSOLE].config().bridge.device_configs())


async def cancel_change(request: web.Request) -> web.StreamResponse:
    proposal = pending(request)
    session_of(request).pending.clear()
    raise web.HTTPSeeOther(proposal.back)


# -- uplink ----------------------------------------------------------------------------------


async def uplink_page(request: web.Request, errors: dict[str, str] | None = None,
                      general: list[str] | None = None) -> web.StreamResponse:
    console = request.app[CONSOLE]
    session = session_of(request)
    config = console.config().uplink
    section: dict[str, Any] = console.board.collect().get("uplink") or {}
    remotes = {r.get("name"): r for r in section.get("remotes") or []}
    rows = [[esc(r.name), esc(", ".join(r.addresses)),
             "connected" if remotes.get(r.name, {}).get("connected") else "disconnected"]
            for r in config.remotes]
    figures = (f"backlog {section.get('backlog_messages', 0)} messages "
               f"({format_bytes(section.get('backlog_bytes'))}), oldest "
               f"{format_duration(section.get('oldest_age_s'))}, draining "
               f"{section.get('drain_rate') or 0:.1f} msg/s, ETA "
               f"{format_duration(section.get('eta_s'))}") if section else "no uplink figures"
    rules = []
    errors, general = keep_fields(errors or {}, general or [], {
        "filter", "remote", "qos", "name",
        *(f"rules.{i}.{key}" for i in range(len(config.forward)) for key in ("filter", "qos"))})
    for index, rule in enumerate(config.forward):
        if not session.can_change:
            rules.append([esc(config.rule_name(index)), esc(rule.filter), esc(rule.remote),
                          esc(rule.qos), ""])
            continue
        form = f"rule-{index}"  # (a form per row: the inputs name it with `form=`)
        edit = (f'<form method="post" action="/console/uplink/forward/{index}"'
                f' id="{form}">{csrf_input(session.csrf)}</form>')
        rules.append([esc(config.rule_name(index)),
                      cell_input(f"rules.{index}.filter", rule.filter, errors, size=24,
                                 form=form),
                      esc(rule.remote),
                      cell_input(f"rules.{index}.qos", rule.qos, errors, size=2, form=form),
                      edit + f'<button type="submit" form="{form}" class="secondary">save'
                      f"</button> " + button_form(f"/console/uplink/forward/{index}/remove",
                                                  "remove", session.csrf, css="danger")])
    body = (f'<div class="panel">{"enabled" if config.enabled else "disabled"} · '
            f"{esc(figures)}</div>" + table(("remote", "addresses", "state"), rows,
                                            "no remotes", id="remotes")
            + "<h3>forward rules</h3>" + table(("name", "filter", "remote", "QoS", ""), rules,
                                              "no forward rules", id="forward"))
    if session.can_change:
        remote_names = [(r.name, r.name) for r in config.remotes] or [("cloud", "cloud")]
        body += (f"<h3>add a forward rule</h3>{general_errors(general)}"
                 f'<form method="post" action="/console/uplink/forward" id="forward-form">'
                 f'{csrf_input(session.csrf)}<div class="panel">'
                 + field("filter", "topic filter", "", errors, placeholder="devices/#")
                 + field("remote", "remote", "", errors, options=remote_names)
                 + field("qos", "QoS", "1", errors, options=[("1", "1"), ("0", "0")])
                 + field("name", "name (optional)", "", errors)
                 + '</div><div class="actions"><button type="submit" id="add-forward">'
                 "review change</button></div></form>")
    return render(request, "uplink", body, "uplink")


async def add_forward(request: web.Request) -> web.StreamResponse:
    console = request.app[CONSOLE]
    form = await request.post()
    rule: dict[str, Any] = {"filter": str(form.get("filter", "")).strip(),
                            "remote": str(form.get("remote", "cloud")),
                            "qos": typed(str(form.get("qos", "1")))}
    if str(form.get("name", "")).strip():
        rule["name"] = str(form["name"]).strip()
    document, _ = console.file.document()
    index = len(document.get("uplink", {}).get("forward", []))

    def edit(document: TOMLDocument) -> None:
        table_ = tomlkit.table()
        table_.update(rule)
        append_table(array_of_tables(document, "uplink", "forward"), table_)

    errors, general = propose(request, edit, f"add forward rule {rule['filter']}",
                              "/console/uplink", f"uplink.forward.{index}")
    return await uplink_page(request, errors, general)


def _rule_index(request: web.Request) -> int:
    """The forward rule of the path (404 when the running configuration has no such rule)."""
    rules = request.app[CONSOLE].config().uplink.forward
    return path_index(request, "index", len(rules), "forward rule")


async def edit_forward(request: web.Request) -> web.StreamResponse:
    index = _rule_index(request)
    form = await request.post()
    changes = {key: typed(str(form[f"rules.{index}.{key}"])) if key == "qos"
               else str(form[f"rules.{index}.{key}"]).strip()
               for key in ("filter", "qos") if f"rules.{index}.{key}" in form}

    def edit(document: TOMLDocument) -> None:
        array_of_tables(document, "uplink", "forward")[index].update(changes)

    errors, general = propose(request, edit, f"edit forward rule {index}", "/console/uplink",
                              "uplink.forward")
    errors = {f"rules.{key}": message for key, message in errors.items()}
    return await uplink_page(request, errors, general)


async def remove_forward(request: web.Request) -> web.StreamResponse:
    index = _rule_index(request)

    def edit(document: TOMLDocument) -> None:
        del array_of_tables(document, "uplink", "forward")[index]

    errors, general = propose(request, edit, f"remove forward rule {index}", "/console/uplink")
    return await uplink_page(request, errors, general)


# -- history ---------------------------------------------------------------------------------


async def history_page(request: web.Request) -> web.StreamResponse:
    console = request.app[CONSOLE]
    session = session_of(request)
    loop = asyncio.get_running_loop()
    try:
        update = await loop.run_in_executor(None, read_status, Device())
        slots = " · ".join(f"{s.bootname}: {s.state} {s.version or ''} {s.boot_status}"
                           for s in update.slots)
        last = update.last_install or {}
        trial = "committed" if update.committed else "on trial"
        updates = (f"booted slot {update.booted} ({trial}) · {slots} · last install: "
                   f"{last.get('result', '-')} {last.get('version', '')} "
                   f"({update.last_install_boot or 'unknown'})")
    except (UpdateError, OSError) as exc:
        updates = f"no update status: {exc}"
    store = console.file.store
    current = store.current()
    rows = []
    for version in reversed(store.history()):
        try:
            diff = unified_diff(store.show(version.number), current.text,
                                f"version {version.number}", "outpost.toml (now)")
        except ConfigStoreError as exc:
            diff = str(exc)
        running = " (running)" if version.number == current.version else ""
        action = (button_form(f"/console/history/{version.number}/rollback", "roll back to this",
                              session.csrf, css="secondary")
                  if session.can_change and not running else "")
        rows.append([esc(version.number) + running, esc(version.time), esc(version.source),
                     esc(f"{version.result}: {version.reason}" if version.reason
                         else version.result),
                     f'<details><summary>diff to now</summary><pre class="diff">{esc(diff)}'
                     f"</pre></details>", action])
    body = (f'<div class="panel" id="version">{esc(VERSION)} · {esc(updates)}</div>'
            "<h3>configuration versions</h3>"
            + table(("#", "time", "source", "result", "", ""), rows, "no versions recorded",
                    id="versions"))
    return render(request, "updates and history", body, "history")


async def rollback(request: web.Request) -> web.StreamResponse:
    console = request.app[CONSOLE]
    session = session_of(request)
    numbers = [version.number for version in console.file.store.history()]
    number = path_index(request, "version", max(numbers, default=0) + 1, "version")
    try:
        old = console.file.store.show(number)
        proposal = console.file.propose_text(console.file.read(), old,
                                             f"roll back to version {number}",
                                             "/console/history")
    except Exception as exc:  # a kept text that is no longer valid (a file it names is gone)
        session.notice = f"cannot roll back to version {number}: {exc}"
        raise web.HTTPSeeOther("/console/history") from None
    session.pending.clear()
    session.pending[proposal.id] = proposal
    raise web.HTTPSeeOther(f"/console/changes/{proposal.id}")
