"""Updates that survive a fleet's links and its attackers: a download over a link that drops
resumes where it stopped (HTTP Range, then checked against the sha256), and a bundle older
than the running version is refused unless the signed command allows the downgrade.

`rauc` here is a small script standing in for RAUC's `info`, `status` and `install` (this
machine has no RAUC system configuration); the real RAUC is driven in tests/image/."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from outpost import update
from outpost.update_command import CommandError, parse_command
from outpost.update_fetch import FetchStats
from tests.conftest import require
from tests.support.https_server import FlakyFile, serve_https

BUNDLE = os.urandom(3 << 20)  # 3 MiB
SHA = hashlib.sha256(BUNDLE).hexdigest()


@pytest.fixture
def flaky(tmp_path: Path) -> Iterator[tuple[FlakyFile, str, Path]]:
    """(the file, its URL, the CA file): the link drops three times, at 10 %, 45 % and 80 %."""
    require("openssl")
    size = len(BUNDLE)
    served = FlakyFile("/bundle.raucb", BUNDLE, [size // 10, size * 45 // 100, size * 8 // 10])
    with serve_https(served.handler(), tmp_path / "https") as (port, ca_file):
        yield served, f"https://127.0.0.1:{port}/bundle.raucb", ca_file


def test_a_download_whose_link_drops_three_times_resumes_and_fetches_it_once(
        flaky: tuple[FlakyFile, str, Path], tmp_path: Path) -> None:
    served, url, ca_file = flaky
    lines: list[str] = []
    stats = FetchStats()
    got = update.fetch(url, tmp_path / "dl", ca_file, SHA, lines.append, retry_delay=0.01,
                       stats=stats)
    assert got.read_bytes() == BUNDLE
    assert stats.connections == 4 and len(served.requests) == 4
    assert served.requests[0] is None and all(r is not None for r in served.requests[1:])
    # Every byte crossed the link once: nothing was fetched again.
    assert stats.received == served.sent == len(BUNDLE)
    assert sum("download interrupted" in line for line in lines) == 3
    assert lines[-1] == (f"downloaded {len(BUNDLE)} bytes: {len(BUNDLE)} received over "
                         "4 connections")
    assert sorted(p.name for p in got.parent.iterdir()) == ["bundle.raucb"]


def test_a_part_left_by_an_earlier_command_is_resumed_by_the_next(
        flaky: tuple[FlakyFile, str, Path], tmp_path: Path) -> None:
    served, url, ca_file = flaky
    with pytest.raises(update.UpdateError, match="bytes are kept"):
        update.fetch(url, tmp_path, ca_file, SHA, lambda line: None, attempts=2,
                     retry_delay=0.01)
    kept = (tmp_path / "bundle.raucb.part").stat().st_size
    assert kept == len(BUNDLE) * 45 // 100
    stats = FetchStats()
    got = update.fetch(url, tmp_path, ca_file, SHA, lambda line: None, retry_delay=0.01,
                       stats=stats)
    assert got.read_bytes() == BUNDLE
    assert served.requests[2] == f"bytes={kept}-"
    assert served.sent == len(BUNDLE)


def test_a_resumed_download_that_does_not_match_its_sha256_is_deleted(
        flaky: tuple[FlakyFile, str, Path], tmp_path: Path) -> None:
    _, url, ca_file = flaky
    folder = tmp_path / "dl"
    with pytest.raises(update.UpdateError, match="bytes are kept"):
        update.fetch(url, folder, ca_file, SHA, lambda line: None, attempts=1)
    part = folder / "bundle.raucb.part"
    part.write_bytes(b"X" * part.stat().st_size)  # what arrived was corrupted on the card
    with pytest.raises(update.UpdateError, match="is not the expected"):
        update.fetch(url, folder, ca_file, SHA, lambda line: None, retry_delay=0.01)
    assert list(folder.iterdir()) == []


def test_a_part_of_another_bundle_is_not_resumed(flaky: tuple[FlakyFile, str, Path],
                                                 tmp_path: Path) -> None:
    served, url, ca_file = flaky
    with pytest.raises(update.UpdateError, match="bytes are kept"):
        update.fetch(url, tmp_path, ca_file, "0" * 64, lambda line: None, attempts=1)
    update.fetch(url, tmp_path, ca_file, SHA, lambda line: None, retry_delay=0.01)
    assert served.requests[1] is None  # another sha256: started over


# -- downgrades ------------------------------------------------------------------------------

FAKE_RAUC = """#!/bin/sh
case "$1" in
  info) printf '{"compatible": "outpost-x86-64", "version": "%s"}' "$BUNDLE_VERSION" ;;
  status) cat "$RAUC_STATUS" ;;
  install) echo "installing"; echo "$2" > "$RAUC_INSTALLED" ;;
esac
"""


@pytest.fixture
def device(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> update.Device:
    rauc = tmp_path / "rauc"
    rauc.write_text(FAKE_RAUC)
    rauc.chmod(0o755)
    (tmp_path / "system.conf").write_text("[system]\ncompatible=outpost-x86-64\n"
                                          "[keyring]\npath=/dev/null\n")
    status = {"compatible": "outpost-x86-64", "booted": "A", "boot_primary": "rootfs.0",
              "slots": [{"rootfs.0": {"bootname": "A", "state": "booted", "boot_status": "good",
                                      "slot_status": {"bundle": {
                                          "version": "0.3.0+20261120120000.abc"}}}},
                        {"rootfs.1": {"bootname": "B", "state": "inactive",
                                      "boot_status": "good"}}]}
    (tmp_path / "status.json").write_text(json.dumps(status))
    monkeypatch.setenv("RAUC_STATUS", str(tmp_path / "status.json"))
    monkeypatch.setenv("RAUC_INSTALLED", str(tmp_path / "installed"))
    return update.Device(rauc=str(rauc), system_conf=tmp_path / "system.conf",
                         download_dir=tmp_path / "dl", last_install=tmp_path / "last.json")


def test_an_older_bundle_is_refused_unless_the_downgrade_is_allowed(
        device: update.Device, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bundle = tmp_path / "old.raucb"
    bundle.write_bytes(b"bundle")
    monkeypatch.setenv("BUNDLE_VERSION", "0.2.9+20261201000000.def")
    with pytest.raises(update.UpdateError, match=r"refused: the bundle's version "
                       r"0\.2\.9\+20261201000000\.def is older than the running "
                       r"0\.3\.0\+20261120120000\.abc; a downgrade must be allowed"):
        update.install(str(bundle), device, lambda line: None, reboot=False)
    assert not (tmp_path / "installed").exists()
    assert json.loads(device.last_install.read_text())["result"] == "failed"
    lines: list[str] = []
    update.install(str(bundle), device, lines.append, reboot=False, allow_downgrade=True)
    assert (tmp_path / "installed").read_text().strip() == str(bundle)
    assert any("downgrade from 0.3.0+20261120120000.abc to 0.2.9" in line for line in lines)


@pytest.mark.parametrize(("bundle", "running", "older"), [
    ("0.3.0+20261120120000.abc", "0.3.0+20261120120000.abc", False),  # the same: reinstall
    ("0.3.1+20261101000000.a", "0.3.0+20261120120000.abc", False),
    ("0.10.0+1", "0.9.9+9", False),  # numbers as numbers
    ("0.3.0+20261119000000.x", "0.3.0+20261120120000.abc", True),  # an older build
    ("0.2.0", "0.3.0+20261120120000.abc", True),
])
def test_versions_compare_as_releases_then_builds(bundle: str, running: str,
                                                  older: bool) -> None:
    if older:
        with pytest.raises(update.UpdateError, match="older than the running"):
            update.check_not_older(bundle, running, False, lambda line: None)
    else:
        update.check_not_older(bundle, running, False, lambda line: None)


def test_the_command_carries_the_downgrade_permission() -> None:
    base = {"url": "https://u/b.raucb", "sha256": "a" * 64, "id": "r1"}
    assert parse_command(json.dumps(base).encode()).allow_downgrade is False
    allowed = parse_command(json.dumps({**base, "allow_downgrade": True}).encode())
    assert allowed.allow_downgrade is True
    with pytest.raises(CommandError, match="allow_downgrade"):
        parse_command(json.dumps({**base, "allow_downgrade": "yes please"}).encode())
