"""The overview, uplink, broker and history pages, and the review page of every change.

How this works: the overview and the uplink and broker figures come from the status board
(the snapshot behind `/status`); forward rules are edits of the configuration document like
the devices'; users are written by `set_password` (the code of `outpost passwd`), then the
daemon reloads so the broker reads the password file again; a console user's role is a
change of `[console] users`, reviewed like any other. The history page lists the versions the
console kept (outpost/console/versions.py); rolling back proposes an old text as a change.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import tomlkit
from aiohttp import web
from tomlkit.toml_document import TOMLDocument

from gateway.broker.contracts.acl import AclError, parse_acl
from gateway.broker.engine.sys_topics import VERSION
from gateway.broker.net.security_files import set_password
from outpost.config_store import ConfigStoreError, atomic_write
from outpost.console.changes import StaleFileError, unified_diff
from outpost.console.context import CONSOLE, audit, pending, propose, render, session_of
from outpost.console.devices import append_table, typed
from outpost.console.html import (
    attr,
    button_form,
    cell_input,
    csrf_input,
    esc,
    field,
    general_errors,
    table,
    value_text,
)
from outpost.status import format_bytes, format_duration
from outpost.update import Device, UpdateError, read_status

log = logging.getLogger("outpost.console")
MAX_RETAINED = 200


def add_routes(router: web.UrlDispatcher) -> None:
    router.add_get("/console/", overview)
    router.add_get("/console/changes/{change}", review_page)
    router.add_post("/console/changes/{change}/apply", apply_change)
    router.add_post("/console/changes/{change}/cancel", cancel_change)
    router.add_get("/console/uplink", uplink_page)
    router.add_post("/console/uplink/forward", add_forward)
    router.add_post("/console/uplink/forward/{index}", edit_forward)
    router.add_post("/console/uplink/forward/{index}/remove", remove_forward)
    router.add_get("/console/broker", broker_page)
    router.add_post("/console/broker/users", set_user)
    router.add_post("/console/broker/acl/{index}", save_acl)
    router.add_get("/console/history", history_page)
    router.add_post("/console/history/{version}/rollback", rollback)


def _tile(label: str, value: object, stat: str = "") -> str:
    data = f' data-stat="{esc(stat)}"' if stat else ""
    return (f'<div class="tile"><div class="label">{esc(label)}</div>'
            f'<div class="value"{data}>{esc(value)}</div></div>')


async def overview(request: web.Request) -> web.StreamResponse:
    status = request.app[CONSOLE].board.collect()
    messages, queues = status["messages"], status["queues"]
    tiles = "".join((
        _tile("clients", status["clients"]["connected"], "clients.connected"),
        _tile("messages in /s", messages["received_per_s"], "messages.received_per_s"),
        _tile("messages out /s", messages["sent_per_s"], "messages.sent_per_s"),
        _tile("queued", queues["queued_messages"], "queues.queued_messages"),
        _tile("retained", status["retained"], "retained"),
        _tile("dropped", messages["dropped"], "messages.dropped"),
        _tile("uptime", format_duration(status["uptime_s"])),
    ))
    devices = (status.get("devices") or {}).get("devices", [])
    rows = []
    for device in devices:
        state = "online" if device.get("online") is True else (
            "offline" if device.get("online") is False else "unknown")
        values = " · ".join(
            f'{esc(name)} <span class="value" data-live="{esc(device["name"])}/{esc(name)}">'
            f"{esc(value_text(point.get('value'), point.get('unit')))}</span>"
            for name, point in list((device.get("points") or {}).items())[:6])
        rows.append([f'<a href="/console/devices/{esc(device["name"])}">{esc(device["name"])}'
                     f"</a>", f'<span class="badge {state}" data-live-status='
                     f'"{esc(device["name"])}">{state}</span>', values])
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
    return any(d.name == name for d in request.app[CONSOLE].config().bridge.devices)


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
    errors = errors or {}
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
        body += (f"<h3>add a forward rule</h3>{general_errors(general or [])}"
                 f'<form method="post" action="/console/uplink/forward" id="forward-form">'
                 f'{csrf_input(session.csrf)}<div class="panel">'
                 + field("filter", "topic filter", "", errors, placeholder="devices/#")
                 + field("remote", "remote", "", errors, options=remote_names)
                 + field("qos", "QoS", "1", errors, options=[("1", "1"), ("0", "0")])
                 + field("name", "name (optional)", "", errors)
                 + '</div><div class="actions"><button type="submit" id="add-forward">'
                 "review change</button></div></form>")
    return render(request, "uplink", body, "uplink")


def _forward_rules(document: TOMLDocument) -> Any:
    uplink = document.get("uplink")
    if uplink is None:
        uplink = document["uplink"] = tomlkit.table()
    if "forward" not in uplink:
        uplink["forward"] = tomlkit.aot()
    return uplink["forward"]


async def add_forward(request: web.Request) -> web.StreamResponse:
    console = request.app[CONSOLE]
    form = await request.post()
    rule: dict[str, Any] = {"filter": str(form.get("filter", "")).strip(),
                            "remote": str(form.get("remote", "cloud")),
                            "qos": typed(str(form.get("qos", "1")))}
    if str(form.get("name", "")).strip():
        rule["name"] = str(form["name"]).strip()
    index = len(console.config().uplink.forward)
    document, _ = console.file.document()
    index = len(document.get("uplink", {}).get("forward", []))

    def edit(document: TOMLDocument) -> None:
        table_ = tomlkit.table()
        table_.update(rule)
        append_table(_forward_rules(document), table_)

    errors, general = propose(request, edit, f"add forward rule {rule['filter']}",
                              "/console/uplink", f"uplink.forward.{index}")
    return await uplink_page(request, errors, general)


async def edit_forward(request: web.Request) -> web.StreamResponse:
    index = int(request.match_info["index"])
    form = await request.post()
    changes = {key: typed(str(form[f"rules.{index}.{key}"])) if key == "qos"
               else str(form[f"rules.{index}.{key}"]).strip()
               for key in ("filter", "qos") if f"rules.{index}.{key}" in form}

    def edit(document: TOMLDocument) -> None:
        _forward_rules(document)[index].update(changes)

    errors, general = propose(request, edit, f"edit forward rule {index}", "/console/uplink",
                              "uplink.forward")
    errors = {f"rules.{key}": message for key, message in errors.items()}
    return await uplink_page(request, errors, general)


async def remove_forward(request: web.Request) -> web.StreamResponse:
    index = int(request.match_info["index"])

    def edit(document: TOMLDocument) -> None:
        del _forward_rules(document)[index]

    errors, general = propose(request, edit, f"remove forward rule {index}", "/console/uplink")
    return await uplink_page(request, errors, general)


# -- broker ----------------------------------------------------------------------------------


def _password_files(request: web.Request) -> list[tuple[str, Path]]:
    config = request.app[CONSOLE].config()
    files: list[tuple[str, Path]] = []
    if config.console.password_file is not None:
        files.append(("console", config.console.password_file))
    for index, listener in enumerate(config.listeners):
        path = listener.password_file
        if path is not None and all(path != known for _, known in files):
            files.append((f"listener {listener.name or index} ({listener.bind})", path))
    return files


async def broker_page(request: web.Request, errors: dict[str, str] | None = None,
                      general: list[str] | None = None) -> web.StreamResponse:
    console = request.app[CONSOLE]
    session = session_of(request)
    status = console.board.collect()
    clients = [[esc(c["client_id"]), esc(c["peer"]), esc(c["protocol"]),
                esc(c.get("username") or ""), esc(c["subscriptions"]), esc(c["queued"])]
               for c in status["clients"]["list"]]
    topic_filter = request.query.get("filter", "#")
    try:
        retained = console.broker.retained.match(topic_filter, console.board.clock())
    except ValueError:
        retained = []
    rows = [[esc(m.topic), esc(bytes(m.payload[:120]).decode("utf-8", "replace")),
             esc(len(m.payload))] for m in retained[:MAX_RETAINED]]
    body = (table(("client id", "peer", "protocol", "user", "subscriptions", "queued"),
                  clients, "no clients connected", id="clients")
            + f"<h3>retained topics ({len(retained)})</h3>"
            + '<form method="get" action="/console/broker">'
            + field("filter", "topic filter", topic_filter)
            + '<button type="submit" class="secondary">show</button></form>'
            + table(("topic", "payload", "bytes"), rows, "none", id="retained"))
    config = console.config()
    roles = config.console.users
    body += "<h3>console users</h3>" + table(
        ("user", "role"), [[esc(u), esc(r)] for u, r in sorted(roles.items())], id="users")
    if session.can_change:
        errors = errors or {}
        files = [(str(index), label) for index, (label, _) in
                 enumerate(_password_files(request))]
        body += (f"<h3>add or change a user</h3>{general_errors(general or [])}"
                 f'<form method="post" action="/console/broker/users" id="user-form">'
                 f'{csrf_input(session.csrf)}<div class="panel">'
                 + field("file", "password file", "0", errors, options=files)
                 + field("username", "user", "", errors)
                 + field("password", "password", "", errors, kind="password")
                 + field("role", "console role", "", errors,
                         options=[("", "none"), ("viewer", "viewer"), ("admin", "admin")])
                 + field("delete", "delete the user", "", errors, kind="checkbox")
                 + '</div><div class="actions"><button type="submit" id="save-user">save'
                 "</button></div></form>")
    for index, (label, path) in enumerate(_acl_files(request)):
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            text = f"# cannot read {path}: {exc.strerror}"
        body += f"<h3>ACL of {esc(label)}: {esc(path)}</h3>"
        area = (f'<textarea name="acl" rows="12" cols="90"{attr("id", f"acl-{index}")}'
                f"{'' if session.can_change else ' readonly'}>{esc(text)}</textarea>")
        problem = (errors or {}).get(f"acl.{index}")
        if problem:
            area += f'<div class="field-error" data-error-for="acl.{index}">{esc(problem)}</div>'
        if session.can_change:
            area = (f'<form method="post" action="/console/broker/acl/{index}">'
                    f'{csrf_input(session.csrf)}{area}<div class="actions"><button '
                    f'type="submit" id="save-acl-{index}">save and reload</button></div></form>')
        body += area
    return render(request, "broker", body, "broker")


def _acl_files(request: web.Request) -> list[tuple[str, Path]]:
    files: list[tuple[str, Path]] = []
    for index, listener in enumerate(request.app[CONSOLE].config().listeners):
        path = listener.acl_file
        if path is not None and all(path != known for _, known in files):
            files.append((f"listener {listener.name or index} ({listener.bind})", path))
    return files


async def save_acl(request: web.Request) -> web.StreamResponse:
    """Check the ACL as the broker will read it, write it atomically, reload."""
    console = request.app[CONSOLE]
    session = session_of(request)
    index = int(request.match_info["index"])
    files = _acl_files(request)
    if index >= len(files):
        raise web.HTTPNotFound(text="no such ACL file")
    label, path = files[index]
    text = str((await request.post()).get("acl", "")).replace("\r\n", "\n")
    try:
        parse_acl(text)
    except AclError as exc:
        return await broker_page(request, {f"acl.{index}": str(exc)})
    mode = path.stat().st_mode & 0o7777
    atomic_write(path.resolve(), text.encode("utf-8"), mode)
    audit(session.user, "acl", f"{path} ({label}) rewritten")
    console.reload()  # the broker reads its ACL files again
    session.notice = f"saved {path} and reloaded"
    raise web.HTTPSeeOther("/console/broker")


async def set_user(request: web.Request) -> web.StreamResponse:
    """Write the password file (as `outpost passwd` does), reload, then review the role."""
    console = request.app[CONSOLE]
    session = session_of(request)
    form = await request.post()
    files = _password_files(request)
    choice = str(form.get("file", "0"))
    if not choice.isdigit() or int(choice) >= len(files):
        return await broker_page(request, {"file": "choose a password file"})
    label, path = files[int(choice)]
    user = str(form.get("username", "")).strip()
    password = str(form.get("password", ""))
    delete = bool(form.get("delete"))
    if not delete and not password:
        return await broker_page(request, {"password": "empty password refused"})
    loop = asyncio.get_running_loop()
    try:  # PBKDF2 with the default iterations: a worker thread, not the event loop
        done = await loop.run_in_executor(None, set_password, path, user,
                                          None if delete else password.encode("utf-8"))
    except (ValueError, OSError) as exc:
        return await broker_page(request, {"username": str(exc)})
    audit(session.user, "user", done)
    console.reload()  # the broker reads its password files again
    console.accounts.reload(console.config().console)  # (a [console] change would, too)
    session.notice = done
    role = str(form.get("role", ""))
    current = console.config().console.users.get(user)
    if label == "console" and (role or None) != current and (role or delete):

        def edit(document: TOMLDocument) -> None:
            section = document.get("console")
            if section is None:
                section = document["console"] = tomlkit.table()
            users = section.get("users")
            if users is None:
                users = section["users"] = tomlkit.inline_table()
            if delete or not role:
                users.pop(user, None)
            else:
                users[user] = role

        what = f"console role of {user}: {current or 'none'} -> {role or 'none'}"
        errors, general = propose(request, edit, what, "/console/broker", "console")
        return await broker_page(request, errors, general)
    raise web.HTTPSeeOther("/console/broker")


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
    number = int(request.match_info["version"])
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
