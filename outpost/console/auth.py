"""Who may use the console: accounts, sessions, CSRF tokens and the login throttle.

How this works:

- `Accounts` reads `[console] password_file` (the broker's `$7$` format, `outpost passwd`) and
  `[console] users` (username -> role). A user logs in only with a password from the file
  *and* a role: the same password file can hold users that have none (a broker or `/metrics`
  user is not a console user). The slow PBKDF2 check runs in a worker thread and its verdict
  is cached like the broker's (`PasswordDB`). `reload` swaps both at once (a `[console]`
  change applied live, or a user added from the console).
- `Sessions` keeps logins in memory: a random 256-bit token in an HttpOnly, SameSite=Strict
  cookie (Secure under TLS) names a `Session` holding the user, the role, its own random
  CSRF token and an absolute expiry (`[console] session_minutes`). A restart logs everyone
  out, which is what an appliance should do. Each user has at most `MAX_SESSIONS_PER_USER`
  (their own oldest go), so no user can log another out by logging in often; users are
  those of `[console] users`, so the whole table stays small. A user's sessions end when the
  user is deleted, their password changes or their role changes (`Accounts.reload` says whose).
- Every state-changing request carries the session's CSRF token (a hidden form field or the
  `X-CSRF-Token` header) and is refused without it; the comparison is constant-time.
- `LoginGate` (outpost/console/throttle.py) throttles logins per source address and per user
  name, counting each attempt before its hash, so guesses sent in parallel queue.

Pure bookkeeping apart from reading the password file; the clock is passed in.
"""

from __future__ import annotations

import asyncio
import hmac
import re
import secrets
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gateway.broker.contracts.auth import PasswordDB
from gateway.broker.contracts.passwords import parse_password_text
from outpost.config import ConsoleConfig
from outpost.console.throttle import LoginGate
from outpost.status_http import check_password

ADMIN = "admin"
OPERATOR = "operator"  # acknowledges and shelves alarms, writes points; changes no configuration
VIEWER = "viewer"
#: the POSTs an operator may make (an admin may make every one, a viewer none but logging out)
OPERATOR_POSTS = re.compile(r"/console/devices/[^/]+/write|/console/alarms/[^/]+/(ack|shelve)")
MAX_SESSIONS_PER_USER = 8
THROTTLE_BASE = 0.5  # seconds after the first failure, doubling
THROTTLE_MAX = 8.0
THROTTLE_FORGET = 600.0


class TooManyAttemptsError(Exception):
    """A login refused before its check: its address or user name has attempts queued."""


class Accounts:
    """Console users: their password (the file) and their role (`[console] users`)."""

    def __init__(self, config: ConsoleConfig) -> None:
        self.roles: dict[str, str] = {}
        self.passwords = PasswordDB({})
        self.throttle = LoginGate(THROTTLE_BASE, THROTTLE_MAX, THROTTLE_FORGET)
        self.reload(config)

    def reload(self, config: ConsoleConfig) -> set[str]:
        """Read the password file again and take the roles of `config`; returns the users
        whose sessions must end (deleted, password changed, role changed or taken away)."""
        entries = {}
        if config.password_file is not None:
            entries = parse_password_text(config.password_file.read_text(encoding="utf-8"))
        old = {user: entry.text for user, entry in self.passwords.entries.items()}
        old_roles = self.roles
        self.passwords = PasswordDB(entries, str(config.password_file or ""))
        self.roles = dict(config.users)
        return {user for user in {*old, *old_roles}
                if old.get(user) != (entries[user].text if user in entries else None)
                or old_roles.get(user) != self.roles.get(user)}

    async def login(self, username: str, password: str, source: str,
                    now: Callable[[], float]) -> str | None:
        """The user's role when the password is right and the user has one, else None.

        The attempt is counted against `source` and `username` before the hash and waits its
        turn (`LoginGate`); raises `TooManyAttemptsError` when it would wait too long."""
        keys = (f"address {source}", f"user {username}")
        wait = self.throttle.admit(keys, now())
        if wait is None:
            raise TooManyAttemptsError(f"too many login attempts from {source} or for this user: "
                                  f"try again in {THROTTLE_MAX:g} s")
        if wait:
            await asyncio.sleep(wait)
        ok = await check_password(self.passwords, username, password.encode("utf-8"))
        role = self.roles.get(username) if ok else None
        if role is not None:  # (a user without a role fails like a wrong password)
            self.throttle.succeeded(keys, now())
        return role


@dataclass
class Session:
    """One login."""

    token: str
    user: str
    role: str
    csrf: str
    expires: float
    # Changes reviewed but not yet applied (id -> the proposal), see outpost/console/changes.py.
    pending: dict[str, Any] = field(default_factory=dict)
    notice: str = ""  # shown once on the next page (what the last action did)

    @property
    def can_change(self) -> bool:
        return self.role == ADMIN

    @property
    def can_operate(self) -> bool:
        """Acknowledge and shelve alarms, write points."""
        return self.role in (ADMIN, OPERATOR)

    def may_post(self, path: str) -> bool:
        """May this session's role make a POST to `path` (logging out aside)?"""
        return self.can_change or (self.can_operate and OPERATOR_POSTS.fullmatch(path) is not None)

    def csrf_ok(self, token: str | None) -> bool:
        return token is not None and same_token(token, self.csrf)


def same_token(sent: str, expected: str) -> bool:
    """Constant-time comparison of two tokens. Ours are ASCII: anything else (a header's
    undecodable bytes arrive as surrogates) is simply not the token."""
    if not sent.isascii():
        return False
    return hmac.compare_digest(sent.encode("ascii"), expected.encode("ascii"))


class Sessions:
    """Logged-in sessions by cookie token."""

    def __init__(self, lifetime_s: float, clock: Callable[[], float]) -> None:
        self.lifetime_s = lifetime_s
        self.clock = clock
        self.sessions: OrderedDict[str, Session] = OrderedDict()

    def create(self, user: str, role: str) -> Session:
        token = secrets.token_urlsafe(32)
        session = Session(token, user, role, secrets.token_urlsafe(32),
                          self.clock() + self.lifetime_s)
        self.sessions[token] = session
        own = [t for t, s in self.sessions.items() if s.user == user]  # oldest first
        for old in own[:-MAX_SESSIONS_PER_USER]:
            del self.sessions[old]
        return session

    def get(self, token: str | None) -> Session | None:
        if not token:
            return None
        session = self.sessions.get(token)
        if session is None:
            return None
        if self.clock() >= session.expires:
            del self.sessions[token]
            return None
        return session

    def drop(self, token: str | None) -> None:
        if token:
            self.sessions.pop(token, None)

    def drop_user(self, user: str, keep: str | None = None) -> None:
        """Log a user out everywhere (deleted, password or role changed), but for the
        session `keep` (the one that changed its own password)."""
        for token in [t for t, s in self.sessions.items() if s.user == user and t != keep]:
            del self.sessions[token]
