"""The broker page: clients, the retained topics, users, roles and ACL files.

How this works: clients and retained topics are read from the status board and the broker at
the moment of the request (at most `MAX_RETAINED` topics listed). Users are written by
`set_password`, the code of `outpost passwd` (PBKDF2 in a worker thread, the file replaced
atomically; a name the file cannot hold is refused under its field and nothing is written);
then the daemon reloads, so the broker reads the password file again, and the console reads
its own: a deleted user, or one whose password changed, is logged out everywhere at once.
A console user's role is a change of `[console] users`, reviewed like any other change. An
ACL file is checked with the broker's own parser, written atomically and
reloaded; a file the parser refuses is not written and the error is shown under it.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import tomlkit
from aiohttp import web
from tomlkit.toml_document import TOMLDocument

from gateway.broker.contracts.acl import AclError, parse_acl
from gateway.broker.contracts.passwords import check_username
from gateway.broker.net.security_files import set_password
from outpost.config_store import atomic_write
from outpost.console.context import (
    CONSOLE,
    audit,
    index_in,
    path_index,
    propose,
    render,
    session_of,
)
from outpost.console.html import attr, csrf_input, esc, field, general_errors, table

MAX_RETAINED = 200


def add_routes(router: web.UrlDispatcher) -> None:
    router.add_get("/console/broker", broker_page)
    router.add_post("/console/broker/users", set_user)
    router.add_post("/console/broker/acl/{index}", save_acl)


def _listener_files(request: web.Request, key: str) -> list[tuple[str, Path]]:
    """(label, path) of each distinct `password_file` or `acl_file` (`key`) of the listeners,
    the console's own password file first."""
    config = request.app[CONSOLE].config()
    files: list[tuple[str, Path]] = []
    if key == "password_file" and config.console.password_file is not None:
        files.append(("console", config.console.password_file))
    for index, listener in enumerate(config.listeners):
        path = getattr(listener, key)
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
                 enumerate(_listener_files(request, "password_file"))]
        body += (f"<h3>add or change a user</h3>{general_errors(general or [])}"
                 f'<form method="post" action="/console/broker/users" id="user-form">'
                 f'{csrf_input(session.csrf)}<div class="panel">'
                 + field("file", "password file", "0", errors, options=files)
                 + field("username", "user", "", errors)
                 + field("password", "password", "", errors, kind="password")
                 + field("role", "console role", "", errors,
                         options=[("", "unchanged"), ("viewer", "viewer"),
                                  ("operator", "operator"), ("admin", "admin")])
                 + field("delete", "delete the user", "", errors, kind="checkbox")
                 + '</div><div class="actions"><button type="submit" id="save-user">save'
                 "</button></div></form>")
    for index, (label, path) in enumerate(_listener_files(request, "acl_file")):
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


async def save_acl(request: web.Request) -> web.StreamResponse:
    """Check the ACL as the broker will read it, write it atomically, reload."""
    console = request.app[CONSOLE]
    session = session_of(request)
    files = _listener_files(request, "acl_file")
    index = path_index(request, "index", len(files), "ACL file")
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
    files = _listener_files(request, "password_file")
    choice = index_in(str(form.get("file", "0")), len(files))
    if choice is None:
        return await broker_page(request, {"file": "choose a password file"})
    label, path = files[choice]
    user = str(form.get("username", "")).strip()
    password = str(form.get("password", ""))
    delete = bool(form.get("delete"))
    if not delete and not password:
        return await broker_page(request, {"password": "empty password refused"})
    try:  # (before the slow hash; `set_password` checks it again)
        check_username(user)
    except ValueError as exc:
        return await broker_page(request, {"username": str(exc)})
    loop = asyncio.get_running_loop()
    try:  # PBKDF2 with the default iterations: a worker thread, not the event loop
        done = await loop.run_in_executor(None, set_password, path, user,
                                          None if delete else password.encode("utf-8"))
    except (ValueError, OSError) as exc:
        return await broker_page(request, {"username": str(exc)})
    audit(session.user, "user", done)
    console.reload()  # the broker reads its password files again
    # The console's own users: a deleted one, or one with a new password, is logged out
    # (this session stays when it changed its own password).
    console.accounts_changed(console.config().console, keep=None if delete else session.token)
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
