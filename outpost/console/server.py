"""The console's web server: an aiohttp application on the daemon's event loop.

How this works: when `[console] enabled`, this server takes the `[status]` listener (same
address, same TLS, same loopback rule) and serves both:

- the status endpoint as before: `/` (the status page), `/status`, `/metrics`, with HTTP Basic
  against `[status] password_file` when one is set (scrapers and `outpost status` keep
  working unchanged);
- the console under `/console/`: nothing but `/console/login` and `/console/static/*` before a
  login; every other path needs a session cookie (a page redirects to the login, anything else
  gets 401). Every POST needs the session's CSRF token, and every POST but logging out needs
  the admin role (a viewer gets 403; an operator may acknowledge and shelve alarms and write
  points, `Session.may_post`), and a POST whose `Origin` (or, without one, `Referer`)
  is another site's is refused (403) whatever it carries. A body that is not valid form data
  (bad UTF-8, an unknown charset) is a 400 before any handler runs. Every answer, errors and
  404s included, carries a Content-Security-Policy that allows only the console's own script
  and stylesheet, and the other security headers (`_security_headers`).
- the listener is bounded (outpost/http_guard.py): connections per address and in all, and
  deadlines for a request's head and body.

`Console` holds what the pages need (the board, the broker, the bridge, the live values, the
configuration file, the accounts and sessions, and `reload`: the daemon's SIGHUP path). The
pages themselves are in outpost/console/pages_*.py; each registers its routes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import ssl
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, urlsplit

from aiohttp import web
from prometheus_client import generate_latest

from bridge.alarms.service import AlarmService
from bridge.runtime import Bridge
from gateway.broker.contracts.auth import PasswordDB
from gateway.broker.engine.broker import Broker
from outpost.config import Config
from outpost.config_store import ConfigStore
from outpost.console import (
    pages_admin,
    pages_alarms,
    pages_broker,
    pages_devices,
    pages_forms,
    pages_history,
)
from outpost.console.auth import THROTTLE_MAX, Accounts, Sessions, TooManyAttemptsError, same_token
from outpost.console.changes import ConfigFile
from outpost.console.context import CONSOLE, Console, session_of
from outpost.console.html import attr, field, frame
from outpost.console.live import LiveValues
from outpost.http_guard import serve_guarded
from outpost.status import StatusBoard
from outpost.status_http import (
    PAGE_CSP,
    PROMETHEUS_TYPE,
    basic_credentials,
    check_password,
    metrics_registry,
    status_page,
    status_users,
    tls_context,
)

log = logging.getLogger("outpost.console")

STATIC = Path(__file__).resolve().parent / "static"
SESSION_COOKIE = "outpost_session"
LOGIN_COOKIE = "outpost_login"
CONSOLE_CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
               "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
MAX_BODY = 256 * 1024
OPEN_PATHS = ("/console/login",)
STATUS_PATHS = ("/", "/status", "/metrics")
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass
class ConsoleParts:
    """What the composition root hands the console."""

    board: StatusBoard
    broker: Broker
    bridge: Bridge | None
    config_path: Path
    state_dir: Path  # where the configuration store keeps the versions
    config: Callable[[], Config]  # the running configuration
    reload: Callable[[], bool]  # the SIGHUP path: re-read the file, apply; False if refused
    alarms: AlarmService | None = None


class ConsoleServer:
    """The status endpoint and the console on one listener (the `[status]` one)."""

    def __init__(self, parts: ConsoleParts) -> None:
        config = parts.config()
        status = config.status
        self.tls: ssl.SSLContext | None = tls_context(status)
        self.status_users: PasswordDB | None = status_users(status)
        live = LiveValues(config.bridge.prefix)
        self.console = Console(
            board=parts.board, broker=parts.broker, bridge=parts.bridge, live=live,
            file=ConfigFile(parts.config_path, ConfigStore(parts.config_path, parts.state_dir)),
            accounts=Accounts(config.console),
            sessions=Sessions(config.console.session_minutes * 60, time.monotonic),
            config=parts.config, reload=parts.reload, secure=self.tls is not None,
            alarms=parts.alarms)
        self.registry = metrics_registry(parts.board)
        self.page = status_page()
        self.runner: web.AppRunner | None = None
        self.listener: asyncio.Server | None = None
        self.app = self._app()

    def _app(self) -> web.Application:
        app = web.Application(middlewares=[self._guard], client_max_size=MAX_BODY)
        app.on_response_prepare.append(_security_headers)
        app[CONSOLE] = self.console
        app.router.add_get("/", self._status_page)
        app.router.add_get("/status", self._status_json)
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/console", _to_console)
        app.router.add_get("/console/login", login_page)
        app.router.add_post("/console/login", login)
        app.router.add_post("/console/logout", logout)
        app.router.add_get("/console/status.json", status_json)
        app.router.add_static("/console/static/", STATIC, append_version=False)
        pages_forms.add_routes(app.router)  # (before `/console/devices/{device}`)
        pages_devices.add_routes(app.router)
        pages_admin.add_routes(app.router)
        pages_broker.add_routes(app.router)
        pages_alarms.add_routes(app.router)
        pages_history.add_routes(app.router)
        return app

    def reload(self, config: Config) -> None:
        """`[console]` changed (users, roles, password file): applied live; the sessions of
        users deleted or whose password or role changed end."""
        self.console.accounts_changed(config.console)

    async def start(self, host: str, port: int) -> tuple[str, int]:
        self.console.live.attach(self.console.broker, self.console.broker_clock)
        self.runner = web.AppRunner(self.app, access_log=None, handle_signals=False,
                                    shutdown_timeout=2.0)
        await self.runner.setup()
        assert self.runner.server is not None
        self.listener = await serve_guarded(self.runner.server, host, port, self.tls)
        sockname = self.listener.sockets[0].getsockname()
        return str(sockname[0]), int(sockname[1])

    async def close(self) -> None:
        self.console.live.close()
        if self.listener is not None:
            self.listener.close()
            self.listener = None
        if self.runner is not None:
            with contextlib.suppress(Exception):
                await self.runner.cleanup()
            self.runner = None

    # -- the status endpoint -------------------------------------------------------------

    async def _status_page(self, request: web.Request) -> web.StreamResponse:
        return web.Response(body=self.page, content_type="text/html", charset="utf-8",
                            headers={"Content-Security-Policy": PAGE_CSP})

    async def _status_json(self, request: web.Request) -> web.StreamResponse:
        history = request.query.get("history", "0") not in ("0", "", "false")
        body = json.dumps(self.console.board.collect(history=history), separators=(",", ":"),
                          default=str)
        return web.Response(text=body, content_type="application/json")

    async def _metrics(self, request: web.Request) -> web.StreamResponse:
        return web.Response(body=generate_latest(self.registry),
                            headers={"Content-Type": PROMETHEUS_TYPE})

    # -- the guard ------------------------------------------------------------------------

    @web.middleware
    async def _guard(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        path = request.path
        if path in STATUS_PATHS:
            if self.status_users is not None and not await self._basic_ok(request):
                return web.Response(status=401, text="authentication required\n", headers={
                    "WWW-Authenticate": 'Basic realm="outpost", charset="UTF-8"'})
            response = await handler(request)
        elif path.startswith("/console/static/"):
            response = await handler(request)
            response.headers["Cache-Control"] = "no-cache"  # revalidated: 304 when unchanged
        elif request.method == "POST" and (refused := await _post_refusal(request)):
            return refused
        elif path in OPEN_PATHS:
            response = await handler(request)
        else:
            response = await self._console(request, handler)
        return response

    async def _console(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        console = self.console
        session = console.sessions.get(request.cookies.get(SESSION_COOKIE))
        if session is None:
            if request.method == "GET" and "text/html" in request.headers.get("Accept", ""):
                raise web.HTTPSeeOther(f"/console/login?next={quote(request.path_qs)}")
            return web.Response(status=401, text="log in first\n")
        request["session"] = session
        if request.method == "POST":
            form = await request.post()
            token = request.headers.get("X-CSRF-Token") or form.get("csrf")
            if not session.csrf_ok(token if isinstance(token, str) else None):
                log.warning("console: %s %s refused: no valid CSRF token", session.user,
                            request.path, extra={"console_user": session.user})
                return web.Response(status=403, text="refused: missing or wrong CSRF token\n")
            if request.path != "/console/logout" and not session.may_post(request.path):
                log.warning("console: %s %s refused: read-only user", session.user,
                            request.path, extra={"console_user": session.user})
                return web.Response(status=403, text="refused: your role is read-only\n")
        return await handler(request)

    async def _basic_ok(self, request: web.Request) -> bool:
        users = self.status_users
        assert users is not None
        # (header values are decoded as UTF-8 with surrogate escapes: this gives the bytes back)
        found = basic_credentials(request.headers.get("Authorization", "").encode(
            "utf-8", "surrogateescape"))
        return found is not None and await check_password(users, *found)


async def _security_headers(request: web.Request, response: web.StreamResponse) -> None:
    """On every answer the application gives (the 404 of an unknown path, an exception's
    answer and a stream included), just before its head is sent."""
    response.headers.setdefault("Content-Security-Policy", CONSOLE_CSP)
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["X-Frame-Options"] = "DENY"
    response.headers["Referrer-Policy"] = "same-origin"
    response.headers.setdefault("Cache-Control", "no-store")


def _foreign_origin(request: web.Request) -> str | None:
    """The other site a POST comes from (its `Origin`, else its `Referer`), None when it
    names ours or neither header is sent (a script: the CSRF token decides alone)."""
    origin = request.headers.get("Origin")
    if origin is None:
        referer = request.headers.get("Referer")
        if referer is None:
            return None
        try:
            parts = urlsplit(referer)
        except ValueError:
            return referer
        origin = f"{parts.scheme}://{parts.netloc}"
    own = f"{request.scheme}://{request.host}"
    return None if origin.lower() == own.lower() else origin


async def _post_refusal(request: web.Request) -> web.StreamResponse | None:
    """A POST from another site (403), or whose body is not form data we can read (400);
    None when it may go on (its form is parsed, and kept for the handler)."""
    foreign = _foreign_origin(request)
    if foreign is not None:
        log.warning("console: POST %s from %r refused: another origin", request.path,
                    foreign, extra={"peer": request.remote or "?"})
        return web.Response(status=403, text="refused: this form was sent from another site\n")
    try:
        await request.post()
    except (ValueError, LookupError) as exc:  # bad UTF-8, unknown charset, broken multipart
        log.warning("console: POST %s refused: unreadable form (%s)", request.path,
                    type(exc).__name__, extra={"peer": request.remote or "?"})
        return web.Response(status=400, text="refused: the form is not valid UTF-8 form data\n")
    return None


async def _to_console(request: web.Request) -> web.StreamResponse:
    raise web.HTTPSeeOther("/console/")


# -- login -------------------------------------------------------------------------------------


def _login_form(token: str, next_path: str, error: str = "", user: str = "") -> str:
    errors = {"password": error} if error else {}
    return (f'<div class="panel login"><form method="post" action="/console/login">'
            f'<input type="hidden" name="login_token"{attr("value", token)}>'
            f'<input type="hidden" name="next"{attr("value", next_path)}>'
            f'{field("username", "user", user)}'
            f'{field("password", "password", "", errors, kind="password")}'
            f'<div class="actions"><button type="submit" id="login">log in</button></div>'
            f"</form></div>")


def _safe_next(value: object) -> str:
    text = value if isinstance(value, str) else ""
    return text if text.startswith("/console/") and not text.startswith("//") else "/console/"


async def login_page(request: web.Request) -> web.StreamResponse:
    console = request.app[CONSOLE]
    token = request.cookies.get(LOGIN_COOKIE) or console.new_token()
    body = _login_form(token, _safe_next(request.query.get("next")))
    response = web.Response(text=frame("log in", body, gateway=console.gateway_id),
                            content_type="text/html")
    response.set_cookie(LOGIN_COOKIE, token, httponly=True, samesite="Strict",
                        secure=console.secure, path="/console/login")
    return response


async def login(request: web.Request) -> web.StreamResponse:
    """Double-submit token against login CSRF, the throttle, then the password and role."""
    console = request.app[CONSOLE]
    form = await request.post()
    token = request.cookies.get(LOGIN_COOKIE)
    sent = form.get("login_token")
    if not token or not isinstance(sent, str) or not same_token(token, sent):
        return web.Response(status=403, text="refused: reload the login page\n")
    user = str(form.get("username", ""))
    password = str(form.get("password", ""))
    source = request.remote or "?"
    next_path = _safe_next(form.get("next"))
    try:
        role = await console.accounts.login(user, password, source, console.clock)
    except TooManyAttemptsError as exc:
        log.warning("console: login of %r from %s refused: %s", user, source, exc,
                    extra={"console_user": user, "peer": source})
        body = _login_form(token, next_path, str(exc), user)
        return web.Response(status=429, text=frame("log in", body, gateway=console.gateway_id),
                            content_type="text/html",
                            headers={"Retry-After": f"{THROTTLE_MAX:.0f}"})
    if role is None:
        log.warning("console: login of %r from %s refused", user, source,
                    extra={"console_user": user, "peer": source})
        body = _login_form(token, next_path, "wrong user or password, or no console role", user)
        return web.Response(status=401, text=frame("log in", body, gateway=console.gateway_id),
                            content_type="text/html")
    session = console.sessions.create(user, role)
    log.info("console: %s logged in from %s (%s)", user, source, role,
             extra={"console_user": user, "peer": source, "console_action": "login"})
    response = web.HTTPSeeOther(next_path)
    response.set_cookie(SESSION_COOKIE, session.token, httponly=True, samesite="Strict",
                        secure=console.secure, path="/")
    raise response


async def logout(request: web.Request) -> web.StreamResponse:
    console = request.app[CONSOLE]
    session = session_of(request)
    console.sessions.drop(session.token)
    response = web.HTTPSeeOther("/console/login")
    response.del_cookie(SESSION_COOKIE, path="/")
    raise response


async def status_json(request: web.Request) -> web.StreamResponse:
    """The board's snapshot for the overview, with the history when asked (`?history=1`);
    behind the login, unlike /status."""
    history = request.query.get("history") == "1"
    status = request.app[CONSOLE].board.collect(history=history)
    return web.Response(text=json.dumps(status, default=str), content_type="application/json")
