"""The files behind access control: password files, ACL files, TLS certificates.

How this works: `load_security` reads every listener's password file and ACL file
(`read_policies`, which lists every bad file with its key path before giving up) and builds
the `Security` hook (gateway/broker/contracts/auth.py). Its loader, `SecurityFiles`, does the same
on SIGHUP and
re-loads the certificate chains into the running TLS contexts that `start_listener`
registered, so new certificates apply to new handshakes without a restart. `outpost
check-config` uses `listener_file_errors`; `outpost passwd` uses `set_password`, which
rewrites a password file atomically.
"""

from __future__ import annotations

import contextlib
import logging
import os
import ssl
import stat
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TypeVar

from gateway.base.settings import ConfigError
from gateway.broker.contracts.acl import AccessList, AclError, parse_acl
from gateway.broker.contracts.auth import ListenerPolicy, PasswordDB, Security
from gateway.broker.contracts.config import TLS_TYPES, BrokerConfig, ListenerConfig, listener_labels
from gateway.broker.contracts.passwords import (
    DEFAULT_ITERATIONS,
    PasswordFileError,
    hash_password,
    parse_password_text,
    update_password_text,
)

log = logging.getLogger("outpost.security")
T = TypeVar("T")


class _FileReader:
    """Parses password and ACL files once each, collecting every problem with its key path."""

    def __init__(self) -> None:
        self.passwords: dict[Path, PasswordDB | str] = {}  # parsed, or the problem
        self.acls: dict[Path, AccessList | str] = {}
        self.errors: list[str] = []  # `listeners.N.key: message`, in config order
        self.bad_files: list[Path] = []

    def _problem(self, key: str, path: Path, problem: str) -> None:
        self.errors.append(f"{key}: {problem}")
        if path not in self.bad_files:
            self.bad_files.append(path)

    def read(self, index: int, listener: ListenerConfig
             ) -> tuple[PasswordDB | None, AccessList | None]:
        """The listener's parsed files (None where absent or invalid; see `errors`)."""
        passwords = acl = None
        if listener.password_file is not None:
            passwords = self._parsed(self.passwords, listener.password_file, _password_db,
                                     f"listeners.{index}.password_file")
        if listener.acl_file is not None:
            acl = self._parsed(self.acls, listener.acl_file, lambda _path, text: parse_acl(text),
                               f"listeners.{index}.acl_file")
        return passwords, acl

    def _parsed(self, cache: dict[Path, T | str], path: Path, parse: Callable[[Path, str], T],
                key: str) -> T | None:
        """`path` parsed once (cached with the problem, if any); a problem is recorded under
        `key` for every listener that names the file."""
        if path not in cache:
            try:
                cache[path] = parse(path, path.read_text(encoding="utf-8"))
            except (OSError, UnicodeDecodeError) as exc:
                cache[path] = f"cannot read {path}: {exc}"
            except (PasswordFileError, AclError) as exc:
                cache[path] = f"{path}: {exc}"
        found = cache[path]
        if isinstance(found, str):
            self._problem(key, path, found)
            return None
        return found

    def raise_errors(self) -> None:
        """`ConfigError` listing every problem found so far (none: return)."""
        if self.errors:
            source = str(self.bad_files[0]) if len(self.bad_files) == 1 else "listener files"
            raise ConfigError(source, list(self.errors))


def read_policies(config: BrokerConfig) -> list[ListenerPolicy]:
    """Read every listener's password file and ACL file.

    Raises `ConfigError` listing every unreadable or invalid file (key path, file, line).
    """
    reader = _FileReader()
    policies: list[ListenerPolicy] = []
    labels = listener_labels(list(config.listeners))
    for index, (listener, label) in enumerate(zip(config.listeners, labels, strict=True)):
        passwords, acl = reader.read(index, listener)
        policies.append(ListenerPolicy(
            label, listener.anonymous_allowed, passwords, acl, listener.use_identity_as_username
        ))
    reader.raise_errors()
    return policies


def listener_file_errors(listeners: Iterable[tuple[int, ListenerConfig]]) -> list[str]:
    """Every problem with the password files, ACL files and certificates of `listeners`
    ((index in the config, listener) pairs), as `listeners.N.key: message` lines
    (`outpost check-config`: also for the listeners of a config that is otherwise invalid)."""
    reader = _FileReader()
    for index, listener in listeners:
        reader.read(index, listener)
        reader.errors += certificate_errors(index, listener)
    return reader.errors


def _password_db(path: Path, text: str) -> PasswordDB:
    """A password file's entries; warns about weak hashes and a file everybody can read."""
    db = PasswordDB(parse_password_text(text), str(path))
    _warn_password_file(path, db)
    return db


def _warn_password_file(path: Path, db: PasswordDB) -> None:
    weak = sorted(name for name, entry in db.entries.items() if entry.weak)
    if weak:
        log.warning(
            "%s: %d user(s) with a weak hash ($6$, $7$ with few iterations, Argon2id with "
            "little memory): %s; run `outpost passwd %s USER` to re-hash",
            path, len(weak), ", ".join(weak[:10]), path,
        )
    with contextlib.suppress(OSError):
        if path.stat().st_mode & stat.S_IROTH:
            log.warning("%s is readable by every user: chmod 600 (or 640 with a group)", path)


class SecurityFiles:
    """The reload path of `Security`: re-reads files and refreshes the TLS certificates."""

    def __init__(self) -> None:
        self.contexts: dict[str, tuple[ssl.SSLContext, ListenerConfig]] = {}

    def __call__(self, config: BrokerConfig) -> list[ListenerPolicy]:
        policies = read_policies(config)
        errors: list[str] = []
        for label, (context, listener) in self.contexts.items():
            try:
                load_certificates(context, listener)
            except (OSError, ssl.SSLError) as exc:
                errors.append(f"listener {label}: cannot load certificate: {exc}")
        if errors:
            raise ConfigError("certificates", errors)
        return policies


def load_security(config: BrokerConfig) -> Security:
    """The `Security` hook for `config` (reads the files; raises `ConfigError`)."""
    files = SecurityFiles()
    return Security(read_policies(config), loader=files)


def certificate_errors(index: int, listener: ListenerConfig) -> list[str]:
    """Problems loading a tls/wss listener's certificate, key and CA bundle (key paths)."""
    if listener.type not in TLS_TYPES:
        return []
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    errors: list[str] = []
    try:
        context.load_cert_chain(str(listener.certfile), str(listener.keyfile))
    except (OSError, ssl.SSLError) as exc:
        errors.append(f"listeners.{index}.certfile: cannot load the certificate "
                      f"{listener.certfile} with the key {listener.keyfile}: {exc}")
    if listener.cafile is not None:
        try:
            context.load_verify_locations(cafile=str(listener.cafile))
        except (OSError, ssl.SSLError) as exc:
            errors.append(f"listeners.{index}.cafile: cannot load {listener.cafile}: {exc}")
    return errors


def load_certificates(context: ssl.SSLContext, listener: ListenerConfig) -> None:
    assert listener.certfile is not None and listener.keyfile is not None
    context.load_cert_chain(str(listener.certfile), str(listener.keyfile))
    if listener.cafile is not None:
        context.load_verify_locations(cafile=str(listener.cafile))


# -- password file maintenance (`outpost passwd`) ------------------------------------------


def set_password(path: Path, username: str, password: bytes | None,
                 iterations: int = DEFAULT_ITERATIONS) -> str:
    """Add, update (`password`) or delete (`None`) one user; returns what was done.

    The file is created with mode 0600, an existing file keeps its mode; it is replaced
    atomically (written next to it, fsynced, renamed), so a crash never leaves half a file.
    Raises `ValueError` (bad username, unknown user to delete) or `OSError`.
    """
    try:
        text = path.read_text(encoding="utf-8")
        mode = stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        if password is None:
            raise ValueError(f"{path} does not exist") from None
        text, mode = "", 0o600
    parse_password_text(text)  # refuse to rewrite a file we cannot read back
    stored = None if password is None else hash_password(password, iterations)
    new_text, existed = update_password_text(text, username, stored)
    if password is None and not existed:
        raise ValueError(f"user {username!r} is not in {path}")
    temporary = path.with_name(f".{path.name}.tmp{os.getpid()}")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(new_text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temporary, mode)
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    if password is None:
        return f"deleted user {username!r} from {path}"
    return f"{'updated' if existed else 'added'} user {username!r} in {path}"
