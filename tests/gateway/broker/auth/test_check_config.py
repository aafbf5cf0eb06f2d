"""`outpost check-config` lists every error at once: the file's own (TOML, keys, values), then
every password file, ACL file and certificate problem of the listeners whose section is valid,
each with its key path; `read_policies` (run, reload) also lists every bad file."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gateway.base.settings import ConfigError
from gateway.broker.contracts.passwords import hash_password
from gateway.broker.net.security_files import read_policies
from outpost.cli import main
from outpost.config import load_config

ROOT = Path(__file__).resolve().parents[4]
PLAIN = "alice:plaintext\n"  # not a hash
BAD_ACL = "user alice\ntopic bogus plant/#\n"


def check(tmp_path: Path, text: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str]]:
    """Exit code and the error lines of `outpost check-config`."""
    path = tmp_path / "outpost.toml"
    path.write_text(text, encoding="utf-8")
    code = main(["check-config", str(path)])
    captured = capsys.readouterr()
    if code == 0:
        assert captured.out.strip() == f"{path}: OK"
        return code, []
    assert captured.err.startswith(f"{path}: invalid configuration\n"), captured.err
    return code, [line.strip() for line in captured.err.splitlines()[1:] if line.strip()]


@pytest.fixture
def files(tmp_path: Path) -> Path:
    (tmp_path / "plain").write_text(PLAIN, encoding="utf-8")
    (tmp_path / "bad.acl").write_text(BAD_ACL, encoding="utf-8")
    (tmp_path / "passwd").write_text(f"alice:{hash_password(b'pw', 1000)}\n", encoding="utf-8")
    (tmp_path / "good.acl").write_text("user alice\ntopic readwrite plant/#\n", encoding="utf-8")
    (tmp_path / "garbage.pem").write_text("not a certificate\n", encoding="utf-8")
    (tmp_path / "passwd").chmod(0o600)
    return tmp_path


BAD_FILES = """
[[listeners]]
bind = "127.0.0.1:0"

[[listeners]]
bind = "127.0.0.1:0"
password_file = "plain"
acl_file = "bad.acl"
"""


def test_value_errors_and_every_file_problem_together(files, capsys):
    code, lines = check(files, "[limits]\nmax_connections = 0\n" + BAD_FILES, capsys)
    assert code == 2
    assert len(lines) == 3, lines
    assert lines[0].startswith("limits.max_connections: ")
    assert lines[1].startswith(f"listeners.1.password_file: {files / 'plain'}: line 1: ")
    assert lines[2].startswith(f"listeners.1.acl_file: {files / 'bad.acl'}: line 2: ")


def test_every_file_problem_without_other_errors(files, capsys):
    code, lines = check(files, BAD_FILES, capsys)
    assert code == 2
    assert [line.split(":")[0] for line in lines] == [
        "listeners.1.password_file", "listeners.1.acl_file"]


def test_files_of_valid_listeners_are_checked_when_another_listener_is_invalid(files, capsys):
    code, lines = check(files, """
gateway_id = 7

[[listeners]]
bind = "127.0.0.1:not-a-port"
password_file = "plain"

[[listeners]]
bind = "127.0.0.1:0"
password_file = "plain"

[[listeners]]
bind = "127.0.0.1:0"
password_file = "passwd"
acl_file = "bad.acl"

[[listeners]]
bind = "127.0.0.1:0"
acl_file = "missing.acl"
""", capsys)
    assert code == 2
    keys = [line.split(":")[0] for line in lines]
    assert keys == [
        "gateway_id", "listeners.0.bind", "listeners.3.acl_file",  # pydantic, in its order
        "listeners.1.password_file", "listeners.2.acl_file",  # then the files
    ], lines
    # listener 0 did not validate: its (also bad) password file is not reported twice over
    assert not any(line.startswith("listeners.0.password_file") for line in lines)


def test_a_file_shared_by_listeners_is_reported_for_each(files, capsys):
    code, lines = check(files, """
[[listeners]]
bind = "127.0.0.1:0"
acl_file = "bad.acl"

[[listeners]]
bind = "127.0.0.1:0"
acl_file = "bad.acl"
""", capsys)
    assert code == 2
    assert [line.split(":")[0] for line in lines] == [
        "listeners.0.acl_file", "listeners.1.acl_file"]


def test_unreadable_files_and_bad_certificates(files, capsys):
    (files / "latin1").write_bytes(b"alice:\xff\n")
    code, lines = check(files, """
[limits]
max_packet_size = 1

[[listeners]]
bind = "127.0.0.1:0"
password_file = "latin1"

[[listeners]]
type = "tls"
bind = "127.0.0.1:0"
certfile = "garbage.pem"
keyfile = "garbage.pem"
cafile = "garbage.pem"
""", capsys)
    assert code == 2
    assert [line.split(":")[0] for line in lines] == [
        "limits.max_packet_size", "listeners.0.password_file", "listeners.1.certfile",
        "listeners.1.cafile"], lines
    assert f"cannot read {files / 'latin1'}" in lines[1]
    assert "cannot load the certificate" in lines[2]


def test_bad_toml_is_one_error(files, capsys):
    code, lines = check(files, "[[listeners]\nbind = 1\n", capsys)
    assert code == 2 and len(lines) == 1 and lines[0].startswith("not valid TOML")


def test_a_config_that_is_not_utf8_is_one_error(files, capsys):
    path = files / "outpost.toml"
    path.write_bytes(b'gateway_id = "k\xfcche"\n')  # Latin-1
    assert main(["check-config", str(path)]) == 2
    err = capsys.readouterr().err
    assert "not UTF-8 text (byte 15)" in err and "Traceback" not in err


def test_valid_files_pass(files, capsys):
    code, lines = check(files, """
[[listeners]]
bind = "127.0.0.1:0"
password_file = "passwd"
acl_file = "good.acl"
""", capsys)
    assert (code, lines) == (0, [])


def test_read_policies_lists_every_bad_file(files):
    path = files / "outpost.toml"
    path.write_text(BAD_FILES + """
[[listeners]]
bind = "127.0.0.1:0"
password_file = "passwd"
acl_file = "bad.acl"
""", encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        read_policies(load_config(path))
    assert [line.split(":")[0] for line in info.value.errors] == [
        "listeners.1.password_file", "listeners.1.acl_file", "listeners.2.acl_file"]
    assert info.value.source == "listener files"  # more than one file


def test_run_refuses_to_start_listing_every_bad_file(files):
    path = files / "outpost.toml"
    path.write_text("[status]\nenabled = false\n" + BAD_FILES, encoding="utf-8")
    run = subprocess.run([sys.executable, "-m", "outpost", "run", "--config", str(path)],
                         cwd=ROOT, capture_output=True, text=True, timeout=30, check=False)
    assert run.returncode == 2, run.stderr
    assert "listeners.1.password_file" in run.stderr and "listeners.1.acl_file" in run.stderr
    assert "listening" not in run.stdout
