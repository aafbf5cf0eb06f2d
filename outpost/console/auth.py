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
  out, which is what an appliance should do. At most `MAX_SESSIONS` are kept (the oldest go).
- Every state-changing request carries the session's CSRF token (a hidden form field or the
  `X-CSRF-Token` header) and is refused without it; the comparison is constant-time.
- `LoginThrottle` is the broker's: failures per source address double the delay every later
  attempt from that address waits, whatever its outcome.

Pure bookkeeping apart from reading the password file; the clock is passed in.
"""

from __future__ import annotations

import asyncio
import hmac
import secrets
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gateway.broker.contracts.auth import LoginThrottle, PasswordDB
from gateway.broker.contracts.passwords import parse_password_text
from outpost.config import ConsoleConfig
from outpost.status_http import check_password

ADMIN = "admin"
VIEWER = "viewer"
MAX_SESSIONS = 64
THROTTLE_BASE = 0.5  # seconds after the first failure, doubling
THROTTLE_MAX = 8.0
THROTTLE_FORGET = 600.0


class Accounts:
    """Console users: their password (the file) and their role (`[console] users`)."""

    def __init__(self, config: ConsoleConfig) -> None:
        self.roles: dict[str, str] = {}
        self.passwords = PasswordDB({})
        self.throttle = LoginThrottle(THROTTLE_BASE, THROTTLE_MAX, THROTTLE_FORGET)
        self.reload(config)

    def reload(self, config: ConsoleConfig) -> None:
        """Read the password file again and take the roles of `config`."""
        entries = {}
        if config.password_file is not None:
            entries = parse_password_text(config.password_file.read_text(encoding="utf-8"))
        self.passwords = PasswordDB(entries, str(config.password_file or ""))
        self.roles = dict(config.users)

    async def login(self, username: str, password: str, source: str,
                    now: Callable[[], float]) -> str | None:
        """The user's role when the password is right and the user has one, else None.

        Waits the throttle's delay for `source` first, and counts a failure against it."""
        delay = self.throttle.delay(source, now())
        if delay:
            await asyncio.sleep(delay)
        ok = await check_password(self.passwords, username, password.encode("utf-8"))
        role = self.roles.get(username) if ok else None
        if role is None:
            self.throttle.failed(source, now())
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

    def csrf_ok(self, token: str | None) -> bool:
        return token is not None and same_token(token, self.csrf)


def same_token(sent: str, expected: str) -> bool:
    """Constant-time comparison of two tokens."""
    return hmac.compare_digest(sent.encode(), expected.encode())


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
        while len(self.sessions) > MAX_SESSIONS:
            self.sessions.popitem(last=False)
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

    def drop_user(self, user: str) -> None:
        """Log a user out everywhere (deleted, or role taken away)."""
        for token in [t for t, s in self.sessions.items() if s.user == user]:
            del self.sessions[token]
