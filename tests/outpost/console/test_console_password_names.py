"""A password file the console (or `outpost passwd`: both write through `set_password`) writes
always passes `outpost check-config`, whatever the name it was given: a name the file cannot
hold is refused with a message, and nothing is written."""

from __future__ import annotations

import io
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.broker.contracts.passwords import parse_password_text
from gateway.broker.net.security_files import set_password
from outpost.cli import main

# Names drawn from all of Unicode, with the characters that matter to the file's format
# (every line break and control character, ':', '#', spaces) made frequent.
SPECIAL = st.sampled_from(["\n", "\r", "\v", "\f", "\x1c", "\x1d", "\x1e", "\x85", "\u2028",
                           "\u2029", "\x00", "\t", "\x7f", "\u200b", "\ufeff", ":", "#", " ",
                           "\u3000"])
NAMES = st.lists(st.one_of(st.characters(), SPECIAL), max_size=12).map("".join)
CONFIG = """
[[listeners]]
bind = "127.0.0.1:1883"
password_file = "users"
"""


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=NAMES)
def test_a_written_password_file_always_passes_check_config(name: str) -> None:
    with tempfile.TemporaryDirectory() as folder:
        users = Path(folder) / "users"
        set_password(users, "admin", b"secret", iterations=1)
        before = users.read_bytes()
        try:
            set_password(users, name, b"pw", iterations=1)
        except ValueError as exc:
            assert str(exc).startswith("a user name must not"), exc  # says why
            assert users.read_bytes() == before  # and writes nothing
            return
        assert set(parse_password_text(users.read_text(encoding="utf-8"))) == {"admin", name}
        config = Path(folder) / "outpost.toml"
        config.write_text(CONFIG, encoding="utf-8")
        assert main(["check-config", str(config)]) == 0


def test_outpost_passwd_refuses_a_line_break_in_a_name(tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str],
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO("pw\n"))
    assert main(["passwd", "--stdin", "--iterations", "1", str(tmp_path / "users"),
                 "evil\rline"]) == 1
    assert "U+000D" in capsys.readouterr().err
    assert not (tmp_path / "users").exists()
