"""Every password line mosquitto has written: 2.1's `$argon2id$` and `$7$` with 64-byte salts,
2.0's `$7$` (101 rounds, 12-byte salt), 1.x's `$6$`, from mosquitto's own tests, from
reference tools with mosquitto 2.1's parameters and from Debian's `mosquitto_passwd` on this
machine; and a broker that logs users in from such a file."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.broker.contracts.passwords import (
    MAX_ARGON2_MEMORY_KIB,
    PasswordFileError,
    parse_hash,
    parse_password_text,
    verify,
)
from tests.gateway.broker.auth.support import (
    SecureBroker,
    mosquitto_tool,
    run_tool,
    start_secure_broker,
    tcp_client,
)

# From mosquitto's own tests (github.com/eclipse/mosquitto, branch develop):
# - test/broker/dynamic-security-init.json: user "admin" with salt, hash and 101 iterations,
#   assembled into a line the way plugins/dynamic-security/clients.c does ("$7$%d$%s$%s");
#   its password "admin" is the one test/broker/14-dynsec-*.py log in with.
DYNSEC_ADMIN = ("$7$101$Ezuo4G1TqYtTQDL/$Rko31yHY12ryMoyZTBNIUsCPb5SDa4WmUP3Xe2+V6P+QOSW3Gj6I"
                "Dmpl6zQsAjutb476zEYdBeTw9tU7WZ1new==")
# - test/broker/09-pwfile-parse-invalid.py: "test" with password "test", and "empty" whose
#   password has 0 length.
PARSE_INVALID_TEST = ("$6$njERlZMi/7DzNB9E$iiavfuXvUm8iyDZArTy7smTxh07GXXOrOsqxfW6gkOYVXHGk+W+i"
                      "/8d3xDxrMwEPygEBhoA8A/gjQC0N2M4Lkw==")
PARSE_INVALID_EMPTY = ("$6$o+53eGXtmlfHeYrg$FY7X9DNQ4uU1j0NiPmGOOSU05ZSzhqNmNhXIof/0nLpVb1zDhcRH"
                       "daC72E3YryH7dtTiG/r6jH6C8J+30cZBgA==")
# mosquitto 2.1 (libcommon/password_common.c) writes Argon2id with t=1, m=47104 KiB, p=1 and
# a 64-byte salt and hash, and `$7$` with a 64-byte salt. Its tests make those lines with
# mosquitto_passwd at run time (test/apps/passwd/passwd-changes.py), so these two were made
# with the same parameters by independent reference implementations, password "mosquitto":
#   argon2 'outpost-test-salt-of-64-bytes-like-mosquitto-2.1-writes-them-ok!' \
#       -id -t 1 -k 47104 -p 1 -l 64 -e          (Debian's argon2, libargon2 as mosquitto)
#   openssl kdf -keylen 64 -kdfopt digest:SHA512 -kdfopt pass:mosquitto -binary \
#       -kdfopt hexsalt:000102...3f -kdfopt iter:1000 PBKDF2          (OpenSSL 3.0, as mosquitto)
ARGON2ID_2_1 = ("$argon2id$v=19$m=47104,t=1,p=1$b3V0cG9zdC10ZXN0LXNhbHQtb2YtNjQtYnl0ZXMtbGlrZ"
                "S1tb3NxdWl0dG8tMi4xLXdyaXRlcy10aGVtLW9rIQ$5cd/SBgGGLKwS1Zu88QtuuUHf5AzUxeEpDFcU"
                "x46ceo4Fn1QnL2vc8L1XNLlAIJCQwKHTEvMUwXKM4ZmhOXcEQ")
PBKDF2_1000_SALT64 = ("$7$1000$AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8gISIjJCUmJygpKissLS4vM"
                      "DEyMzQ1Njc4OTo7PD0+Pw==$Sy4D8FZS0KqCBjWTXYDj3bMMpKLo5PpWudcAGd37/kaRsahWPm"
                      "sUSGoy92k0e4pC0+BAU+REXYKaQB5npW1hXw==")

FILE_OF_EVERY_FORMAT = f"""\
# mosquitto 2.1
argon:{ARGON2ID_2_1}
salt64:{PBKDF2_1000_SALT64}
# mosquitto 2.0
admin:{DYNSEC_ADMIN}
# mosquitto 1.x
test:{PARSE_INVALID_TEST}
empty:{PARSE_INVALID_EMPTY}
"""


@pytest.mark.parametrize(("stored", "password", "scheme", "weak"), [
    (ARGON2ID_2_1, b"mosquitto", "argon2id", False),
    (PBKDF2_1000_SALT64, b"mosquitto", "pbkdf2-sha512", True),
    (DYNSEC_ADMIN, b"admin", "pbkdf2-sha512", True),
    (PARSE_INVALID_TEST, b"test", "sha512", True),
    (PARSE_INVALID_EMPTY, b"", "sha512", True),
], ids=["argon2id", "7-salt64", "7-2.0", "6-test", "6-empty"])
def test_mosquitto_vectors_verify(stored: str, password: bytes, scheme: str, weak: bool) -> None:
    entry = parse_hash("u", stored)
    assert (entry.scheme, entry.weak) == (scheme, weak)
    assert verify(entry, password)
    assert not verify(entry, password + b"x")
    assert not verify(entry, b"wrong")


def test_argon2id_parameters_are_read_from_the_line() -> None:
    entry = parse_hash("u", ARGON2ID_2_1)
    assert (entry.iterations, entry.memory_kib, len(entry.salt), len(entry.digest)) == (
        1, 47104, 64, 64)
    assert len(parse_hash("u", PBKDF2_1000_SALT64).salt) == 64


def test_a_file_of_every_format_parses() -> None:
    entries = parse_password_text(FILE_OF_EVERY_FORMAT)
    assert list(entries) == ["argon", "salt64", "admin", "test", "empty"]
    assert verify(entries["argon"], b"mosquitto") and verify(entries["admin"], b"admin")


def test_lines_of_debian_mosquitto_passwd(tmp_path: Path) -> None:
    """This machine's `mosquitto_passwd` (2.0): its default `$7$` and `-H sha512`'s `$6$`."""
    tool = mosquitto_tool("mosquitto_passwd")
    path = tmp_path / "passwd"
    assert run_tool(tool, "-c", "-b", str(path), "pbkdf2", "first secret").returncode == 0
    assert run_tool(tool, "-H", "sha512", "-b", str(path), "sha", "second").returncode == 0
    entries = parse_password_text(path.read_text())
    assert entries["pbkdf2"].scheme == "pbkdf2-sha512" and entries["sha"].scheme == "sha512"
    assert verify(entries["pbkdf2"], b"first secret") and verify(entries["sha"], b"second")
    assert not verify(entries["pbkdf2"], b"second") and not verify(entries["sha"], b"first")


_ARGON_TAIL = ARGON2ID_2_1.split("$", 4)[4]  # salt$hash


@pytest.mark.parametrize(("line", "fragment"), [
    (f"$argon2id$v=19$m={MAX_ARGON2_MEMORY_KIB + 1},t=1,p=1${_ARGON_TAIL}", "memory cost"),
    (f"$argon2id$v=16$m=47104,t=1,p=1${_ARGON_TAIL}", "version 16"),
    ("$argon2id$v=19$m=47104,t=1,p=1$!!!!$AAAA", "not a valid $argon2id$"),
    ("$argon2id$v=19$m=47104,t=1$AAAAAAAAAAA$AAAAAAAAAAA", "not a valid $argon2id$"),
    (f"$argon2id$v=19$m=47104,t=1,p=1$AAAA${_ARGON_TAIL.split('$')[1]}", "salt under 8"),
    (f"$argon2i$v=19$m=47104,t=1,p=1${_ARGON_TAIL}", "not a $argon2id$"),
])
def test_bad_argon2_lines_are_named(line: str, fragment: str) -> None:
    with pytest.raises(PasswordFileError) as info:
        parse_password_text(f"# users\nalice:{line}\n")
    assert info.value.line == 2
    assert "alice" in str(info.value) and fragment in str(info.value)


@pytest.fixture
def broker_with_every_format(tmp_path: Path) -> Iterator[SecureBroker]:
    passwd = tmp_path / "passwd"
    passwd.write_text(FILE_OF_EVERY_FORMAT)
    passwd.chmod(0o600)
    proc = start_secure_broker(
        tmp_path, "[limits]\nlogin_delay = 0.01\n[[listeners]]\nbind = \"127.0.0.1:0\"\n"
        f"allow_anonymous = false\npassword_file = \"{passwd}\"\n", 1)
    yield proc
    proc.stop()


def test_a_broker_logs_in_users_of_every_format(broker_with_every_format: SecureBroker) -> None:
    address = broker_with_every_format.of("tcp")
    for username, password, code in [
        ("argon", b"mosquitto", 0), ("argon", b"mosquittO", 4), ("salt64", b"mosquitto", 0),
        ("admin", b"admin", 0), ("test", b"test", 0), ("test", b"tset", 4),
    ]:
        with tcp_client(address) as client:
            connack = client.connect(f"c-{username}", username=username, password=password)
            assert connack == bytes([0x20, 0x02, 0x00, code]), (username, password)
