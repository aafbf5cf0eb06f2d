"""The image's root booted with `systemd-nspawn -b`: the service, the read-only root, the
watchdog, and data that survives a restart of the whole system."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.image.conftest import REPO, BuiltImage
from tests.image.vm import Container

pytestmark = [pytest.mark.image, pytest.mark.timeout(2400)]

WATCHDOG_DROPIN = """[Service]
WatchdogSec=6s
TimeoutStopSec=6s
RestartSec=1s
"""


@pytest.fixture(scope="module")
def trees(amd64_image: BuiltImage, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Copies of the staged root and data trees (the root stays read-only when booted)."""
    base = tmp_path_factory.mktemp("nspawn")
    for name, source in (("root", amd64_image.root), ("data", amd64_image.data)):
        subprocess.run(["cp", "-a", "--reflink=auto", str(source), str(base / name)], check=True)
    return base


@pytest.fixture(scope="module")
def container(trees: Path) -> Iterator[Container]:
    box = Container(trees / "root", trees / "data", trees / "nspawn.log")
    box.start()
    yield box
    box.stop()


def mqtt(box: Container, *args: str) -> subprocess.CompletedProcess[str]:
    """tests/image/mqtt_tool.py in the container's network namespace (its loopback)."""
    return box.run("env", f"PYTHONPATH={REPO}", sys.executable, "-m", "tests.image.mqtt_tool",
                   "127.0.0.1", "1883", *args,
                   namespaces="net", check=False, timeout=90)


def test_service_reaches_active_through_ready(container: Container) -> None:
    props = container.wait_active("outpost.service")
    assert props["Type"] == "notify"  # active only once READY=1 came
    assert props["SubState"] == "running"
    assert container.show("outpost-firstboot.service", "Result")["Result"] == "success"
    user = container.run("stat", "-c", "%U", "/var/lib/outpost").stdout.strip()
    assert user == "outpost"


def test_root_is_read_only(container: Container) -> None:
    options = container.run("findmnt", "-no", "OPTIONS", "/").stdout
    assert "ro" in options.strip().split(",")
    attempt = container.run("touch", "/etc/outpost-write-test", check=False)
    assert attempt.returncode != 0
    assert "Read-only file system" in attempt.stderr
    # The writable bits of /etc resolve into /var (the data partition).
    assert container.run("readlink", "/etc/machine-id").stdout.strip() == \
        "/var/lib/outpost-etc/machine-id"
    assert len(container.run("cat", "/etc/machine-id").stdout.strip()) == 32
    assert container.run("test", "-s", "/var/lib/outpost-etc/ssh/ssh_host_ed25519_key",
                         check=False).returncode == 0


def test_publish_and_subscribe_inside(container: Container) -> None:
    container.wait_active("outpost.service")
    result = mqtt(container, "roundtrip", "image/nspawn/hello", "hello")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "hello"


def test_watchdog_restarts_a_hung_daemon(container: Container) -> None:
    container.run("mkdir", "-p", "/run/systemd/system/outpost.service.d")
    container.run("sh", "-c", f"printf '{WATCHDOG_DROPIN}' > "
                  "/run/systemd/system/outpost.service.d/zz-watchdog-test.conf")
    container.run("systemctl", "daemon-reload")
    container.run("systemctl", "restart", "outpost.service", timeout=120)
    before = container.wait_active("outpost.service")
    assert container.show("outpost.service", "WatchdogUSec")["WatchdogUSec"] == "6s"
    hung = before["MainPID"]
    container.run("kill", "-STOP", hung)  # the event loop stops: no more WATCHDOG=1
    deadline = time.monotonic() + 90
    after = before
    while time.monotonic() < deadline:
        after = container.show("outpost.service", "ActiveState", "MainPID", "NRestarts")
        if after["ActiveState"] == "active" and after["MainPID"] not in ("0", hung):
            break
        time.sleep(1)
    assert after["MainPID"] not in ("0", hung), after
    assert int(after["NRestarts"]) >= int(before["NRestarts"]) + 1
    journal = container.run("journalctl", "-u", "outpost.service", "--no-pager", "-n", "200").stdout
    assert "Watchdog timeout" in journal
    container.run("rm", "/run/systemd/system/outpost.service.d/zz-watchdog-test.conf")
    container.run("systemctl", "daemon-reload")
    container.run("systemctl", "restart", "outpost.service", timeout=120)
    container.wait_active("outpost.service")


def test_data_survives_a_restart(container: Container, trees: Path) -> None:
    container.wait_active("outpost.service")
    published = mqtt(container, "publish-retained", "image/nspawn/retained", "kept")
    assert published.returncode == 0, published.stderr
    machine_id = container.run("cat", "/etc/machine-id").stdout.strip()
    assert container.stop() == 0

    again = Container(trees / "root", trees / "data", trees / "nspawn-2.log")
    again.start()
    try:
        again.wait_active("outpost.service")
        assert again.run("cat", "/etc/machine-id").stdout.strip() == machine_id
        got = mqtt(again, "read-retained", "image/nspawn/retained")
        assert got.returncode == 0, got.stderr
        assert got.stdout == "kept"
        boots = again.run("journalctl", "--list-boots", "--no-pager").stdout.strip().splitlines()
        assert len(boots) >= 2  # the journal is persistent, on /var
    finally:
        again.stop()

