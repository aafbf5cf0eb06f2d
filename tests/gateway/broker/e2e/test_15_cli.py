"""15 cli: `outpost check-config` (exit 0, or 2 with every error and its key path) and
`outpost run` with a configuration file."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.gateway.broker.e2e.helpers import RawClient

ROOT = Path(__file__).resolve().parents[4]
OUTPOST = [sys.executable, "-m", "outpost"]


def outpost(*args: str, timeout: float = 20) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*OUTPOST, *args], capture_output=True, text=True, timeout=timeout,
                          cwd=ROOT, check=False)


def check(tmp_path: Path, text: str) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "outpost.toml"
    path.write_text(text, encoding="utf-8")
    return outpost("check-config", str(path))


VALID = """\
gateway_id = "site-7"

[[listeners]]
bind = "127.0.0.1:1883"

[[listeners]]
bind = "0.0.0.0:8883"
allow_anonymous = false

[limits]
max_connections = 100
max_packet_size = 65536
max_queued_messages = 500
max_queued_bytes = 1048576
queue_overflow = "drop-newest"
queue_qos0 = true
receive_maximum = 32
max_inflight = 16
topic_alias_maximum = 8
max_keepalive = 300
connect_timeout = 5.0

[sys]
interval = 30
"""


@pytest.mark.parametrize("text", [VALID, "", "[limits]\n", "[sys]\ninterval = 0\n"])
def test_01_check_config_valid(tmp_path, text):
    result = check(tmp_path, text)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"{tmp_path / 'outpost.toml'}: OK"


@pytest.mark.parametrize(("text", "expected"), [
    ("[limits]\nmax_packet_sise = 10\n", ["limits.max_packet_sise: Extra inputs"]),
    ("[limtis]\n", ["limtis: Extra inputs"]),
    ("[limits]\nmax_connections = 0\n", ["limits.max_connections: ", "greater than or equal to 1"]),
    ("[limits]\nmax_packet_size = 10\n", ["limits.max_packet_size: ", "64"]),
    ('[limits]\nqueue_overflow = "drop-all"\n',
     ["limits.queue_overflow: ", "'drop-oldest'", "'drop-newest'", "'drop-all'"]),
    ('[limits]\nmax_keepalive = "ten"\n', ["limits.max_keepalive: "]),
    ("[sys]\ninterval = -1\n", ["sys.interval: "]),
    ('[[listeners]]\nbind = "127.0.0.1:99999"\n', ["listeners.0.bind: ", "99999"]),
    ('[[listeners]]\nbind = ":1883"\n', ["listeners.0.bind: ", "missing host"]),
    ("[[listeners]]\nallow_anonymous = true\n", ["listeners.0.bind: Field required"]),
])
def test_02_check_config_bad_key_or_value(tmp_path, text, expected):
    result = check(tmp_path, text)
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.startswith(f"{tmp_path / 'outpost.toml'}: invalid configuration\n")
    for fragment in expected:
        assert fragment in result.stderr, result.stderr


def test_03_check_config_reports_every_error(tmp_path):
    result = check(tmp_path, (
        "[limits]\nmax_connections = 0\nqueue_overflow = \"x\"\nbogus = 1\n"
        "[sys]\ninterval = -5\n"
    ))
    assert result.returncode == 2
    paths = re.findall(r"^  (\S+): ", result.stderr, re.MULTILINE)
    assert sorted(paths) == [
        "limits.bogus", "limits.max_connections", "limits.queue_overflow", "sys.interval"]


@pytest.mark.parametrize("text", ["[limits\n", "max_connections = \n", "a = 1\na = 2\n"])
def test_04_check_config_bad_toml(tmp_path, text):
    result = check(tmp_path, text)
    assert result.returncode == 2
    assert "not valid TOML" in result.stderr


def test_05_check_config_missing_file(tmp_path):
    result = outpost("check-config", str(tmp_path / "absent.toml"))
    assert result.returncode == 2
    assert "cannot read file" in result.stderr


def test_06_console_script_is_installed(tmp_path):
    script = shutil.which("outpost", path=str(Path(sys.executable).parent))
    if script is None:
        pytest.skip("the outpost console script is not installed in this environment")
    path = tmp_path / "outpost.toml"
    path.write_text("[limits]\nmax_connections = 0\n", encoding="utf-8")
    bad = subprocess.run([script, "check-config", str(path)], capture_output=True, text=True,
                         timeout=20, check=False)
    assert bad.returncode == 2 and "limits.max_connections" in bad.stderr


def test_07_run_applies_config_file(broker_factory):
    broker = broker_factory("[limits]\nmax_connections = 1\n")
    with RawClient.to(broker) as first, RawClient.to(broker) as second:
        assert first.connect("c15-07a") == bytes.fromhex("20020000")
        assert second.connect("c15-07b") == bytes.fromhex("20020003")


def test_08_run_with_bad_config_exits_2(tmp_path):
    path = tmp_path / "outpost.toml"
    path.write_text('[limits]\nqueue_overflow = "sometimes"\n', encoding="utf-8")
    result = outpost("run", "--config", str(path), "--listen", "127.0.0.1:0")
    assert result.returncode == 2
    assert "limits.queue_overflow" in result.stderr
    assert "listening" not in result.stdout


def test_09_run_uses_configured_listeners_and_stops_on_sigterm(tmp_path):
    path = tmp_path / "outpost.toml"
    path.write_text('[[listeners]]\nbind = "127.0.0.1:0"\n', encoding="utf-8")
    process = subprocess.Popen(
        [*OUTPOST, "run", "--config", str(path)], stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL, text=True, cwd=ROOT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        match = re.fullmatch(r"outpost: listening on 127\.0\.0\.1:(\d+)\n", line)
        assert match, line
        with RawClient("127.0.0.1", int(match.group(1))) as client:
            assert client.connect("c15-09") == bytes.fromhex("20020000")
            process.send_signal(signal.SIGTERM)
            assert client.expect_closed() == b""  # 3.1.1: closed on shutdown
        assert process.wait(10) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        if process.stdout is not None:
            process.stdout.close()
