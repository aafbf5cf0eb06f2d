"""systemd/: the unit passes `systemd-analyze verify` silently and scores <= 2.0 in
`systemd-analyze security`; sysusers.d and tmpfiles.d apply to a root directory; the journald
drop-in caps the journal.

`verify` resolves ExecStart= and every unit it pulls in, so it runs against a small root
(`--root`): the unit at /etc/systemd/system, a stub executable at the ExecStart path, `kill`
for ExecReload=, and the host's own system units (targets, sockets)."""

from __future__ import annotations

import configparser
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import require

ROOT = Path(__file__).resolve().parents[2]  # the repository
SYSTEMD = ROOT / "systemd"
UNIT = SYSTEMD / "outpost.service"
HOST_UNITS = Path("/usr/lib/systemd/system")


def unit_settings() -> dict[str, list[str]]:
    """Every `Key=value` of the unit (repeated keys in order)."""
    settings: dict[str, list[str]] = {}
    for line in UNIT.read_text(encoding="utf-8").splitlines():
        if not line or line.startswith(("#", ";", "[")):
            continue
        key, _, value = line.partition("=")
        settings.setdefault(key.strip(), []).append(value.strip())
    return settings


@pytest.fixture
def unit_root(tmp_path: Path) -> Path:
    """A root directory holding the unit and what it refers to."""
    if not HOST_UNITS.is_dir():
        pytest.skip("no systemd units on this machine (apt-get install systemd)")
    root = tmp_path / "root"
    (root / "etc/systemd/system").mkdir(parents=True)
    (root / "usr/bin").mkdir(parents=True)
    (root / "bin").symlink_to("usr/bin")
    (root / "usr/lib/systemd").mkdir(parents=True)
    shutil.copytree(HOST_UNITS, root / "usr/lib/systemd/system", symlinks=True)
    shutil.copy(UNIT, root / "etc/systemd/system/outpost.service")
    settings = unit_settings()
    for key in ("ExecStart", "ExecReload"):
        executable = shlex.split(settings[key][0])[0]
        target = root / executable.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        if not target.exists():
            target.write_text("#!/bin/sh\nexit 0\n", encoding="utf-8")
            target.chmod(0o755)
    return root


def test_verify_prints_nothing(unit_root: Path) -> None:
    analyze = require("systemd-analyze")
    result = subprocess.run(
        [analyze, "verify", f"--root={unit_root}", "outpost.service"],
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout + result.stderr == ""


def test_verify_would_catch_a_mistake(unit_root: Path) -> None:
    """The check above can fail: an unknown key and an unknown syscall group are reported."""
    analyze = require("systemd-analyze")
    unit = unit_root / "etc/systemd/system/outpost.service"
    unit.write_text(unit.read_text().replace(
        "UMask=0027", "UMask=0027\nWatchdogSecs=5\nSystemCallFilter=@no-such-group"))
    result = subprocess.run(
        [analyze, "verify", f"--root={unit_root}", "outpost.service"],
        capture_output=True, text=True, timeout=60, check=False,
    )
    output = result.stdout + result.stderr
    assert "WatchdogSecs" in output
    assert "@no-such-group" in output


def test_security_exposure_at_most_2(unit_root: Path) -> None:
    analyze = require("systemd-analyze")
    result = subprocess.run(
        [analyze, "security", "--offline=true", f"--root={unit_root}", "--no-pager",
         "outpost.service"],
        capture_output=True, text=True, timeout=60, check=False,
    )
    match = re.search(r"Overall exposure level for outpost\.service: ([0-9.]+)", result.stdout)
    assert match, result.stdout + result.stderr
    assert float(match.group(1)) <= 2.0, result.stdout


def test_unit_has_what_the_appliance_needs() -> None:
    settings = unit_settings()

    def one(key: str) -> str:
        assert key in settings, f"{key}= missing"
        return settings[key][-1]

    assert one("Type") == "notify"
    assert one("NotifyAccess") == "main"
    assert one("WatchdogSec")
    assert one("Restart") == "on-failure"
    assert one("StartLimitIntervalSec") and one("StartLimitBurst")
    assert one("ExecReload").endswith("kill -HUP $MAINPID")
    assert one("StateDirectory") == "outpost"
    assert one("User") == "outpost"
    assert "dialout" in one("SupplementaryGroups").split()
    assert any(v.startswith("char-ttyUSB") for v in settings["DeviceAllow"])
    assert "PrivateDevices" not in settings  # it would hide the serial ports
    assert one("ProtectSystem") == "strict"
    assert one("NoNewPrivileges") == "yes"
    assert one("CapabilityBoundingSet") == ""
    assert set(one("RestrictAddressFamilies").split()) <= {
        "AF_INET", "AF_INET6", "AF_UNIX", "AF_NETLINK"}
    assert "@system-service" in settings["SystemCallFilter"]
    assert one("MemoryMax")
    assert one("UMask") == "0027"
    # The daemon's own deadline (outpost/daemon.py) must end before systemd's SIGKILL.
    from outpost.daemon import STOP_TIMEOUT

    assert int(one("TimeoutStopSec").rstrip("s")) > STOP_TIMEOUT
    exec_start = shlex.split(one("ExecStart"))
    assert exec_start[1:3] == ["run", "--config"]
    assert "--state-dir" in exec_start and "/var/lib/outpost" in exec_start


def test_low_port_drop_in_grants_only_bind_service() -> None:
    drop_in = configparser.ConfigParser()
    drop_in.optionxform = str  # type: ignore[assignment,method-assign]
    drop_in.read(SYSTEMD / "examples/low-ports.conf")
    service = drop_in["Service"]
    assert service["CapabilityBoundingSet"] == "CAP_NET_BIND_SERVICE"
    assert service["AmbientCapabilities"] == "CAP_NET_BIND_SERVICE"
    assert service["PrivateUsers"] == "no"


def test_sysusers_and_tmpfiles_apply_to_a_root(tmp_path: Path) -> None:
    sysusers = require("systemd-sysusers")
    tmpfiles = require("systemd-tmpfiles")
    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    (root / "etc/passwd").write_text("root:x:0:0:root:/root:/bin/sh\n")
    (root / "etc/group").write_text("root:x:0:\ndialout:x:20:\n")  # as Debian's base-passwd
    subprocess.run([sysusers, f"--root={root}", str(SYSTEMD / "sysusers.d/outpost.conf")],
                   check=True, capture_output=True, timeout=30)
    passwd = {line.split(":")[0]: line.split(":") for line in
              (root / "etc/passwd").read_text().splitlines()}
    groups = {line.split(":")[0]: line.split(":") for line in
              (root / "etc/group").read_text().splitlines()}
    user = passwd["outpost"]
    assert user[5] == "/var/lib/outpost" and user[6].endswith("nologin")
    assert int(user[2]) < 1000  # a system user
    assert "outpost" in groups["dialout"][3].split(",")
    subprocess.run([tmpfiles, "--create", f"--root={root}",
                    str(SYSTEMD / "tmpfiles.d/outpost.conf")],
                   check=True, capture_output=True, timeout=30)
    etc = (root / "etc/outpost").stat()
    state = (root / "var/lib/outpost").stat()
    gid = int(groups["outpost"][2])
    assert (etc.st_uid, etc.st_gid, etc.st_mode & 0o777) == (0, gid, 0o750)
    assert (state.st_uid, state.st_gid, state.st_mode & 0o777) == (int(user[2]), gid, 0o750)


def test_journald_drop_in_caps_the_journal() -> None:
    parser = configparser.ConfigParser()
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read(SYSTEMD / "journald.conf.d/outpost.conf")
    journal = parser["Journal"]
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    size = journal["SystemMaxUse"]
    assert int(size[:-1]) * units[size[-1]] <= 128 << 20
    assert journal["RuntimeMaxUse"]
    assert journal["ForwardToSyslog"] == "no"
    known = {"Storage", "SystemMaxUse", "SystemKeepFree", "SystemMaxFileSize", "RuntimeMaxUse",
             "MaxRetentionSec", "Compress", "SyncIntervalSec", "RateLimitIntervalSec",
             "RateLimitBurst", "ForwardToSyslog", "ForwardToWall"}
    assert set(journal) <= known, set(journal) - known


def test_update_units_verify_and_run_the_runner_as_root(unit_root: Path) -> None:
    """outpost-update.path starts outpost-update.service (root: RAUC's D-Bus API is root's)
    when the gateway spooled a request; both pass `systemd-analyze verify` silently."""
    analyze = require("systemd-analyze")
    for name in ("outpost-update.path", "outpost-update.service"):
        shutil.copy(SYSTEMD / name, unit_root / "etc/systemd/system" / name)
    result = subprocess.run(
        [analyze, "verify", f"--root={unit_root}", "outpost-update.path",
         "outpost-update.service"],
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout + result.stderr == ""
    path = configparser.ConfigParser(strict=False)
    path.optionxform = str  # type: ignore[assignment,method-assign]
    path.read(SYSTEMD / "outpost-update.path")
    assert path["Path"]["PathExists"] == "/var/lib/outpost/update-request.json"
    assert path["Path"]["Unit"] == "outpost-update.service"
    service = configparser.ConfigParser(strict=False, interpolation=None)
    service.optionxform = str  # type: ignore[assignment,method-assign]
    service.read(SYSTEMD / "outpost-update.service")
    assert "User" not in service["Service"]  # root
    exec_start = shlex.split(service["Service"]["ExecStart"])
    assert exec_start[1:3] == ["update", "run-request"]
    assert "/var/lib/outpost" in exec_start


def test_the_device_starts_the_appliance_only_through_its_console_script() -> None:
    """Every unit and boot script runs `outpost` (the console script in the bundle's venv),
    never a Python module path: a bundle that moves modules brings its own entry point, and
    nothing left on the data or boot partition names a module the new root no longer has."""
    started = [*SYSTEMD.glob("*.service"), *(ROOT / "image/overlay").rglob("*")]
    module_run = re.compile(r"python3?\s+-m\s+(?!venv\b|pip\b)([\w.]+)")
    offenders = [f"{path.relative_to(ROOT)}: -m {match.group(1)}"
                 for path in started if path.is_file()
                 for match in module_run.finditer(path.read_text("utf-8", errors="replace"))]
    assert offenders == []
    commands = [line for path in SYSTEMD.glob("*.service")
                for line in path.read_text("utf-8").splitlines() if line.startswith("ExecStart=")]
    assert commands and all(re.match(r"ExecStart=/opt/outpost/venv/bin/outpost ", line)
                            for line in commands), commands
