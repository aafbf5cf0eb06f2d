"""Password files: salted slow hashes, mosquitto's formats read as they are.

How this works: a password file has one `username:hash` line per user (`#` starts a comment
line, blank lines are skipped), exactly like mosquitto's `password_file`. Every hash format
mosquitto has written is understood, so a file written by `mosquitto_passwd` (1.x to 2.1) is
read unchanged, and a file written by `outpost passwd` is readable by mosquitto 2.x:

- `$argon2id$v=19$m=<KiB>,t=<passes>,p=<lanes>$<salt>$<hash>` (PHC string, unpadded base64):
  Argon2id, what `mosquitto_passwd` 2.1 writes by default (m=47104, t=1, p=1, 64-byte salt and
  hash). Checked by argon2-cffi with the parameters of the line; a memory cost above
  `MAX_ARGON2_MEMORY_KIB` is refused (a line must not be able to exhaust the gateway's RAM), one
  below `MIN_STRONG_ARGON2_MEMORY_KIB` is reported as weak.
- `$7$<iterations>$<base64 salt>$<base64 hash>`: PBKDF2-HMAC-SHA512. `outpost passwd` writes
  this with `DEFAULT_ITERATIONS` and a 12-byte random salt (the only length mosquitto 2.0 takes;
  2.1 writes 64-byte salts and takes both); `mosquitto_passwd` 2.0 writes it with 101
  iterations: accepted, reported as weak.
- `$6$<base64 salt>$<base64 hash>`: one SHA-512 of password + salt (mosquitto 1.x). Accepted,
  reported as weak.

Checking a password is slow on purpose (PBKDF2 at the default: about 0.3 s on x86, several
seconds on a Raspberry Pi; Argon2id at mosquitto's cost: 46 MiB of memory and tens of ms), so
the I/O layer runs `verify` in a worker thread (hashlib and argon2-cffi release the GIL) and
the broker core only ever sees cached results (see `gateway.broker.contracts.auth`).
Everything
here is pure: text in, entries out; `update_password_text` returns the new file text and the
caller writes it.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import unicodedata
from dataclasses import dataclass

from argon2 import extract_parameters
from argon2.exceptions import InvalidHashError, VerificationError
from argon2.low_level import Type, verify_secret

__all__ = [
    "DEFAULT_ITERATIONS",
    "MAX_ARGON2_MEMORY_KIB",
    "MIN_STRONG_ITERATIONS",
    "PasswordEntry",
    "PasswordFileError",
    "check_username",
    "hash_password",
    "parse_hash",
    "parse_password_text",
    "update_password_text",
    "verify",
]

# OWASP (2023) recommends 210,000 rounds for PBKDF2-HMAC-SHA512.
DEFAULT_ITERATIONS = 210_000
# Entries below this are accepted but reported as weak (mosquitto_passwd 2.0 writes 101).
MIN_STRONG_ITERATIONS = 100_000
SALT_BYTES = 12  # what mosquitto 2.0 expects (it refuses other lengths); 96 random bits
HASH_BYTES = 64
MAX_ITERATIONS = 10_000_000  # refuse absurd values: checking must stay bounded
# Argon2id: OWASP's smallest recommended memory cost (19 MiB, with 2 passes) marks a weak
# line; above a quarter of a Raspberry Pi 4's smallest RAM, a line is refused.
MIN_STRONG_ARGON2_MEMORY_KIB = 19_456
MAX_ARGON2_MEMORY_KIB = 262_144
MAX_ARGON2_PASSES = 1000
MAX_ARGON2_LANES = 64


class PasswordFileError(ValueError):
    """A line of a password file cannot be used (`line` is 1-based, 0 for the whole file)."""

    def __init__(self, message: str, line: int = 0) -> None:
        super().__init__(f"line {line}: {message}" if line else message)
        self.line = line


@dataclass(frozen=True, slots=True)
class PasswordEntry:
    """One user's stored hash."""

    username: str
    scheme: str  # "argon2id", "pbkdf2-sha512" ($7$) or "sha512" ($6$)
    iterations: int  # 1 for sha512, the passes (t) for argon2id
    salt: bytes
    digest: bytes
    text: str  # the hash exactly as stored
    memory_kib: int = 0  # argon2id's memory cost (m)

    @property
    def weak(self) -> bool:
        """Too cheap to brute-force offline: re-hash with `outpost passwd`."""
        if self.scheme == "argon2id":
            return self.memory_kib < MIN_STRONG_ARGON2_MEMORY_KIB
        return self.scheme == "sha512" or self.iterations < MIN_STRONG_ITERATIONS


def _b64decode(text: str) -> bytes:
    return base64.b64decode(text.encode("ascii"), validate=True)


def _unpadded_b64decode(text: str) -> bytes:
    return _b64decode(text + "=" * (-len(text) % 4))


def _parse_argon2id(username: str, text: str) -> PasswordEntry:
    """A PHC `$argon2id$` string as mosquitto 2.1 writes it (libargon2's encoding)."""
    try:
        params = extract_parameters(text)
        *_, salt_text, digest_text = text.split("$")
        salt, digest = _unpadded_b64decode(salt_text), _unpadded_b64decode(digest_text)
    except (InvalidHashError, binascii.Error, UnicodeEncodeError):
        raise ValueError("not a valid $argon2id$v=19$m=...,t=...,p=...$salt$hash line") from None
    if params.version != 19:
        raise ValueError(f"Argon2 version {params.version} (only 19 is in use)")
    if params.memory_cost > MAX_ARGON2_MEMORY_KIB:
        raise ValueError(f"Argon2 memory cost {params.memory_cost} KiB is above "
                         f"{MAX_ARGON2_MEMORY_KIB} KiB")
    if not (1 <= params.time_cost <= MAX_ARGON2_PASSES
            and 1 <= params.parallelism <= MAX_ARGON2_LANES):
        raise ValueError("Argon2 passes or lanes out of range")
    if len(salt) < 8 or len(digest) < 4:
        raise ValueError("an Argon2 salt under 8 bytes or a hash under 4 bytes")
    return PasswordEntry(username, "argon2id", params.time_cost, salt, digest, text,
                         params.memory_cost)


def parse_hash(username: str, text: str) -> PasswordEntry:
    """Decode a stored hash; raises `ValueError` for anything else (plaintext included)."""
    if text.startswith("$argon2id$"):
        return _parse_argon2id(username, text)
    parts = text.split("$")
    try:
        if len(parts) == 5 and parts[0] == "" and parts[1] == "7":
            iterations = int(parts[2])
            if not 1 <= iterations <= MAX_ITERATIONS:
                raise ValueError(f"iteration count {iterations} out of range")
            salt, digest = _b64decode(parts[3]), _b64decode(parts[4])
            scheme = "pbkdf2-sha512"
        elif len(parts) == 4 and parts[0] == "" and parts[1] == "6":
            iterations = 1
            salt, digest = _b64decode(parts[2]), _b64decode(parts[3])
            scheme = "sha512"
        else:
            raise ValueError("not a $argon2id$, $7$ (PBKDF2-SHA512) or $6$ (SHA-512) hash")
    except (binascii.Error, UnicodeEncodeError):
        raise ValueError("salt or hash is not valid base64") from None
    if not salt or len(digest) != HASH_BYTES:
        raise ValueError("empty salt or a hash that is not 64 bytes")
    return PasswordEntry(username, scheme, iterations, salt, digest, text)


def parse_password_text(text: str) -> dict[str, PasswordEntry]:
    """Parse a whole password file; raises `PasswordFileError` naming the first bad line."""
    entries: dict[str, PasswordEntry] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or raw.startswith("#"):
            continue
        username, sep, stored = line.partition(":")
        username, stored = username.strip(), stored.strip()
        if not sep or not username:
            raise PasswordFileError("expected USERNAME:HASH", number)
        if username in entries:
            raise PasswordFileError(f"user {username!r} appears twice", number)
        try:
            entries[username] = parse_hash(username, stored)
        except ValueError as exc:
            raise PasswordFileError(f"user {username!r}: {exc}", number) from None
    return entries


def hash_password(
    password: bytes, iterations: int = DEFAULT_ITERATIONS, salt: bytes | None = None
) -> str:
    """A new `$7$` PBKDF2-HMAC-SHA512 hash of `password` with a random salt."""
    if not 1 <= iterations <= MAX_ITERATIONS:
        raise ValueError(f"iterations must be between 1 and {MAX_ITERATIONS}")
    salt = os.urandom(SALT_BYTES) if salt is None else salt
    digest = hashlib.pbkdf2_hmac("sha512", password, salt, iterations, HASH_BYTES)
    salt_text = base64.b64encode(salt).decode()
    return f"$7${iterations}${salt_text}${base64.b64encode(digest).decode()}"


def verify(entry: PasswordEntry, password: bytes) -> bool:
    """Does `password` match `entry`? Slow on purpose; safe to call from a worker thread."""
    if entry.scheme == "argon2id":
        try:
            return verify_secret(entry.text.encode("ascii"), password, Type.ID)
        except VerificationError:  # a mismatch (VerifyMismatchError) included
            return False
    if entry.scheme == "sha512":
        candidate = hashlib.sha512(password + entry.salt).digest()
    else:
        candidate = hashlib.pbkdf2_hmac(
            "sha512", password, entry.salt, entry.iterations, len(entry.digest)
        )
    return hmac.compare_digest(candidate, entry.digest)


# Unicode categories refused in a name. Every character at which the reader's
# `str.splitlines` ends a line is in one: \n \r \v \f \x1c-\x1e NEL are control characters,
# U+2028 and U+2029 the line and paragraph separators. Format characters (invisible, bidi
# overrides) would make a name look like another; a lone surrogate cannot be written as UTF-8.
_REFUSED_CATEGORIES = {"Cc": "a control character", "Cf": "an invisible format character",
                       "Cs": "a lone surrogate (not valid text)", "Zl": "a line separator",
                       "Zp": "a paragraph separator"}


def check_username(username: str) -> None:
    """Raise `ValueError` (saying why) unless `username` reads back from a password file as
    exactly this user: one line, not a comment, nothing the reader strips or splits at."""
    if not username:
        raise ValueError("a user name must not be empty")
    for char in username:
        kind = _REFUSED_CATEGORIES.get(unicodedata.category(char))
        if kind is not None:
            raise ValueError(f"a user name must not contain U+{ord(char):04X} ({kind})")
    if ":" in username:
        raise ValueError("a user name must not contain ':' (it ends the name in the file)")
    if username.startswith("#"):
        raise ValueError("a user name must not start with '#' (the line would be a comment)")
    if username != username.strip():
        raise ValueError("a user name must not start or end with a space (it would be read "
                         "back without it)")


def update_password_text(text: str, username: str, stored: str | None) -> tuple[str, bool]:
    """Set (or with `stored=None` delete) one user's line; other lines are kept verbatim.

    Returns the new text and whether the user existed before. Raises `ValueError` for a
    name the file cannot hold (`check_username`).
    """
    check_username(username)
    lines = text.splitlines()
    found = False
    result: list[str] = []
    for raw in lines:
        name, sep, _ = raw.partition(":")
        if not raw.startswith("#") and sep and name.strip() == username:
            found = True
            if stored is not None:
                result.append(f"{username}:{stored}")
            continue
        result.append(raw)
    if stored is not None and not found:
        result.append(f"{username}:{stored}")
    return ("\n".join(result) + "\n") if result else "", found
