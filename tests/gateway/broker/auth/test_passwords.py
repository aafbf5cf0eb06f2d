"""Password hashes and files: outpost's $7$ entries, mosquitto's $7$ and $6$ read as they are."""

from __future__ import annotations

import unicodedata

import pytest

from gateway.broker.contracts.passwords import (
    DEFAULT_ITERATIONS,
    PasswordFileError,
    check_username,
    hash_password,
    parse_hash,
    parse_password_text,
    update_password_text,
    verify,
)

# Written by Debian 12's `mosquitto_passwd` 2.0.11: `-c -b pw alice secret` ($7$, 101 rounds)
# and `-H sha512 -b pw bob pw2` ($6$, one SHA-512 of password + salt).
MOSQUITTO_FILE = """\
alice:$7$101$3zARuTcHuu/2ZP3X$3yerQ8MO35ps/5vRIen9rLgqN8h9rtXpU/7bWSAkFcADTj7kpRyuaPddmkTlt5x0In9qI7l4UJm9l2hmceyq0A==
bob:$6$l2sl+uN2/Qz49Wjd$/JVAliYnvMUbgAfw+bvoGaX4fUJXcq9YaQ0UxzQm7wBpOieqIRHNPgPTo9QPyXyjrH/p2RBd5cdlTKll5AlbDA==
"""


def test_mosquitto_entries_are_verified_as_they_are() -> None:
    entries = parse_password_text(MOSQUITTO_FILE)
    alice, bob = entries["alice"], entries["bob"]
    assert (alice.scheme, alice.iterations, len(alice.salt)) == ("pbkdf2-sha512", 101, 12)
    assert bob.scheme == "sha512"
    assert verify(alice, b"secret") and not verify(alice, b"Secret")
    assert verify(bob, b"pw2") and not verify(bob, b"pw")
    assert alice.weak and bob.weak  # 101 rounds / unsalted-speed SHA-512


def test_new_hashes_are_strong_salted_and_round_trip() -> None:
    first = hash_password(b"correct horse", iterations=1000)
    second = hash_password(b"correct horse", iterations=1000)
    assert first != second  # random salt
    assert first.startswith("$7$1000$")
    entry = parse_hash("u", first)
    assert len(entry.salt) == 12 and len(entry.digest) == 64
    assert verify(entry, b"correct horse") and not verify(entry, b"correct horse ")
    assert not parse_hash("u", hash_password(b"x", salt=b"s" * 16)).weak
    assert DEFAULT_ITERATIONS >= 210_000


def test_known_vector_pbkdf2_sha512() -> None:
    # PBKDF2-HMAC-SHA512("password", "salt", 1 round), RFC 6070 style vector
    stored = hash_password(b"password", iterations=1, salt=b"salt")
    # 867f70cf1ade02cff375...
    assert stored.split("$")[4].startswith("hn9wzxreAs/zdSWZo6U9xK80x6Zp")


@pytest.mark.parametrize(("text", "line", "fragment"), [
    ("alice\n", 1, "USERNAME:HASH"),
    ("# c\n\nalice:plain\n", 3, "not a $argon2id$"),
    ("alice:$7$x$AAAA$AAAA\n", 1, "alice"),
    ("alice:$7$0$AAAA$" + "A" * 88 + "\n", 1, "out of range"),
    ("alice:$6$!!!!$AAAA\n", 1, "base64"),
    ("alice:$6$AAAA$AAAA\n", 1, "64 bytes"),
    (MOSQUITTO_FILE + "alice:" + MOSQUITTO_FILE.split(":", 1)[1].splitlines()[0] + "\n",
     3, "twice"),
])
def test_bad_lines_are_named(text: str, line: int, fragment: str) -> None:
    with pytest.raises(PasswordFileError) as info:
        parse_password_text(text)
    assert info.value.line == line
    assert fragment in str(info.value)


def test_comments_blank_lines_and_spaces() -> None:
    text = "# users\n\n  alice : " + MOSQUITTO_FILE.splitlines()[0].split(":", 1)[1] + "  \n"
    assert list(parse_password_text(text)) == ["alice"]


def test_update_keeps_other_lines_and_deletes() -> None:
    text = "# header\n" + MOSQUITTO_FILE
    new, existed = update_password_text(text, "carol", "$7$1$c2FsdA==$" + "A" * 88)
    assert not existed
    assert new.startswith("# header\nalice:") and new.endswith("carol:$7$1$c2FsdA==$" + "A" * 88
                                                               + "\n")
    new2, existed = update_password_text(new, "alice", "$7$2$c2FsdA==$" + "B" * 88)
    assert existed and new2.count("alice:") == 1 and "alice:$7$2$" in new2
    new3, existed = update_password_text(new2, "bob", None)
    assert existed and "bob:" not in new3 and "# header" in new3
    with pytest.raises(ValueError):
        update_password_text(text, "a:b", None)


# Every character at which the reader (`str.splitlines`) ends a line, and every other control,
# format or separator character: a name holding one is refused, naming the character.
REFUSED = [chr(c) for c in range(0x110000)
           if unicodedata.category(chr(c)) in ("Cc", "Cf", "Cs", "Zl", "Zp")]


def test_every_line_break_and_control_character_is_refused_in_a_name() -> None:
    breaks = {char for char in REFUSED if len(f"a{char}b".splitlines()) > 1}
    assert breaks == set("\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029")  # all of splitlines' own
    for char in REFUSED:
        with pytest.raises(ValueError, match=f"U\\+{ord(char):04X}"):
            update_password_text("", f"evil{char}line", "$7$1$c2FsdA==$" + "A" * 88)


@pytest.mark.parametrize(("name", "why"), [
    ("", "empty"), ("#hidden", "comment"), (" alice", "space"), ("alice\u3000", "space"),
    ("a:b", "':'"),
])
def test_a_name_the_file_cannot_hold_is_refused(name: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        check_username(name)
