"""What every console page shares: the `Console` state, rendering a page for a session, the
review-and-apply flow of a configuration change, and the audit line.

How this works: a page handler builds an edit of the configuration document and calls
`propose`; a valid change is parked in the session and the browser is sent to its review page
(`/console/changes/<id>`: the summary and the unified diff), an invalid one comes back as the
field errors the form shows. `Apply` on the review page writes and reloads
(outpost/console/changes.py) and writes one audit line. Audit lines are log records of
`outpost.console.audit` with the structured fields `CONSOLE_USER` and `CONSOLE_ACTION`
(journald, outpost/daemon.py), so `journalctl -u outpost CONSOLE_USER=alice` lists what one
user changed, and when.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass

from aiohttp import web

from bridge.alarms.service import AlarmService
from bridge.runtime import Bridge
from gateway.base.settings import ConfigError
from gateway.broker.engine.broker import Broker
from outpost.config import Config, ConsoleConfig
from outpost.console.auth import Accounts, Session, Sessions
from outpost.console.changes import ConfigFile, Edit, Proposal, field_errors
from outpost.console.html import frame
from outpost.console.live import LiveValues
from outpost.status import StatusBoard

audit_log = logging.getLogger("outpost.console.audit")


@dataclass
class Console:
    """The console's state, shared by every request."""

    board: StatusBoard
    broker: Broker
    bridge: Bridge | None
    live: LiveValues
    file: ConfigFile
    accounts: Accounts
    sessions: Sessions
    config: Callable[[], Config]
    reload: Callable[[], bool]
    secure: bool  # cookies only over HTTPS
    alarms: AlarmService | None = None  # (bridge/alarms/service.py; runs with the bridge)

    @property
    def gateway_id(self) -> str:
        return self.config().gateway_id

    @property
    def clock(self) -> Callable[[], float]:
        return time.monotonic

    @property
    def broker_clock(self) -> Callable[[], float]:
        return self.board.clock

    @staticmethod
    def new_token() -> str:
        return secrets.token_urlsafe(32)

    def accounts_changed(self, config: ConsoleConfig, keep: str | None = None) -> None:
        """Read the users again; end the sessions of those deleted, whose password or role
        changed (but for the session `keep`: the one that changed its own password)."""
        for user in self.accounts.reload(config):
            self.sessions.drop_user(user, keep)


CONSOLE = web.AppKey("console", Console)


def session_of(request: web.Request) -> Session:
    session = request.get("session")
    assert isinstance(session, Session), "the guard sets the session of every console request"
    return session


def render(request: web.Request, title: str, body: str, active: str = "", status: int = 200,
           error: str = "") -> web.Response:
    """A page for the logged-in user; shows (and clears) the session's notice."""
    console = request.app[CONSOLE]
    session = session_of(request)
    notice, session.notice = session.notice, ""
    unacked = console.alarms.unacknowledged() if console.alarms is not None else 0
    text = frame(title, body, user=session.user, role=session.role, active=active,
                 gateway=console.gateway_id, csrf=session.csrf, notice=notice, error=error,
                 alarms=unacked)
    return web.Response(text=text, content_type="text/html", status=status)


def audit(user: str, action: str, what: str, **fields: object) -> None:
    """One journal line per change: who, what (when is the record's own time)."""
    audit_log.info("console: %s %s: %s", user, action, what,
                   extra={"console_user": user, "console_action": action, **fields})


def propose(request: web.Request, edit: Edit, summary: str, back: str, prefix: str = ""
            ) -> tuple[dict[str, str], list[str]]:
    """Check the change; when valid, park it and redirect to its review page (raises);
    else return (field errors below `prefix`, other errors)."""
    console = request.app[CONSOLE]
    session = session_of(request)
    try:
        proposal = console.file.propose(edit, summary, back)
    except ConfigError as exc:
        return field_errors(exc.errors, prefix)
    except (KeyError, OSError) as exc:
        return {}, [str(exc)]
    session.pending.clear()  # one change at a time: an older review is out of date anyway
    session.pending[proposal.id] = proposal
    raise web.HTTPSeeOther(f"/console/changes/{proposal.id}")


def index_in(text: str, count: int) -> int | None:
    """`text` as an index below `count` (plain ASCII digits), else None."""
    if text.isascii() and text.isdigit() and len(text) <= 9 and int(text) < count:
        return int(text)
    return None


def path_index(request: web.Request, name: str, count: int, what: str) -> int:
    """The path parameter `name` as an index below `count`; else 404 naming `what`."""
    text = request.match_info[name]
    index = index_in(text, count)
    if index is None:
        raise web.HTTPNotFound(text=f"no {what} {text!r}\n")
    return index


def pending(request: web.Request) -> Proposal:
    proposal = session_of(request).pending.get(request.match_info["change"])
    if not isinstance(proposal, Proposal):
        raise web.HTTPNotFound(text="no such change waiting (applied, cancelled or replaced)")
    return proposal
