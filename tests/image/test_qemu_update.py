"""A/B updates of the amd64 image in QEMU, through GRUB and RAUC's grub backend: an update to a
newer build, sent by the cloud (the remote trigger: a command through the uplink, the bundle
from an HTTPS server on the host), reboots into slot B and is kept after its health check,
and the cloud sees the request's progress and the new slot; a broken update (installed with
`outpost update install` on the device; its gateway never starts) fails its health check, and
the device comes back on the previous slot by itself. The broker's retained messages and a
persistent session's queued QoS 1 messages survive both.

The bundles are made here from the built image's root (tests/image/bundles.py): one with a new
build id, one that also carries a drop-in making outpost.service fail. The tests run in order on
one VM; each prints what it measured (install, reboot to marked good, rollback).
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.image import bundles, mqtt_tool
from tests.image.cloud import (
    GUEST_ADDRESS,
    HTTPS_PORT,
    MQTT_PORT,
    BundleServer,
    Reports,
    bundle_server,
)
from tests.image.conftest import BuiltImage
from tests.image.vm import Qemu, fat_mkdir, fat_put, prepare_disk
from tests.support.mosquitto import Mosquitto, start_mosquitto

pytestmark = [pytest.mark.image, pytest.mark.timeout(3600)]

BOOT_TIMEOUT = 600.0  # TCG on a loaded two-core machine: a boot takes one to three minutes
ROLLBACK_TIMEOUT = 1500.0  # the broken slot's boot, its failed health check, the good slot's boot
NEW_BUILD = "20990101000000.next"
BROKEN_BUILD = "20990101000001.broken"
QUEUE_CLIENT = "image-test-queue"
QUEUE_TOPIC = "image/update/queue"
RETAINED_TOPIC = "image/update/retained"
BROKEN_DROP_IN = "/usr/lib/systemd/system/outpost.service.d/zz-broken.conf"

GATEWAY_ID = "image-update-test"
COMMAND_TOPIC = f"outpost-cmd/{GATEWAY_ID}/update"
REPORT_TOPIC = f"outpost-status/{GATEWAY_ID}/update"
REQUEST_ID = "image-test-next"
# The cloud broker and the bundles' CA are the host's (tests/image/cloud.py); the CA file is
# put on the boot partition's outpost/ folder, imported beside outpost.toml.
CONFIG = f"""\
gateway_id = "{GATEWAY_ID}"

[[listeners]]
bind = "0.0.0.0:1883"
allow_anonymous = true

[storage]
durability = "full"

[uplink]
enabled = true

[[uplink.remotes]]
name = "cloud"
addresses = ["{GUEST_ADDRESS}:{MQTT_PORT}"]
client_id = "uplink-{GATEWAY_ID}"
backoff_initial = 1.0
backoff_max = 10.0

[[uplink.inbound]]
filter = "{COMMAND_TOPIC}"

[remote_update]
enabled = true
ca_file = "update-ca.pem"
"""


@dataclass(frozen=True)
class Bundles:
    new: Path
    new_version: str
    broken: Path
    broken_version: str


@pytest.fixture(scope="module")
def update_bundles(amd64_image: BuiltImage,
                   tmp_path_factory: pytest.TempPathFactory) -> Bundles:
    """A bundle of a newer build, and a broken one, from the image's root slot."""
    work = tmp_path_factory.mktemp("bundles")
    release = dict(line.split("=", 1) for line in
                   (amd64_image.root / "usr/lib/outpost/release").read_text().splitlines())
    made = []
    for name, build in (("new", NEW_BUILD), ("broken", BROKEN_BUILD)):
        root = bundles.root_partition(amd64_image.image, work / f"{name}.ext4")
        bundles.with_build(root, work, build)
        if name == "broken":  # the gateway exits at once, every time systemd starts it
            bundles.put_file(root, work, BROKEN_DROP_IN,
                             "[Service]\nExecStart=\nExecStart=/bin/false\n")
        version = f"{release['VERSION']}+{build}"
        made.append((bundles.sign(root, work / f"{name}.raucb", version, build,
                                  f"outpost {name} (test)"), version))
    return Bundles(made[0][0], made[0][1], made[1][0], made[1][1])


@pytest.fixture(scope="module")
def cloud(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mosquitto]:
    """The cloud broker, on the host."""
    with start_mosquitto(tmp_path_factory.mktemp("cloud"), persistence=True) as broker:
        yield broker


@pytest.fixture(scope="module")
def server(update_bundles: Bundles,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[BundleServer]:
    """The HTTPS server of the bundles, on the host."""
    with bundle_server(update_bundles.new.parent, tmp_path_factory.mktemp("https")) as running:
        yield running


@pytest.fixture(scope="module")
def vm(amd64_image: BuiltImage, cloud: Mosquitto, server: BundleServer,
       tmp_path_factory: pytest.TempPathFactory) -> Iterator[Qemu]:
    work = tmp_path_factory.mktemp("qemu-update")
    disk = prepare_disk(amd64_image.image, work, CONFIG, 64)
    fat_mkdir(disk, "outpost")
    fat_put(disk, server.ca_file, "outpost/update-ca.pem")
    machine = Qemu(disk, work, guest_forwards=[(GUEST_ADDRESS, MQTT_PORT, cloud.port),
                                               (GUEST_ADDRESS, HTTPS_PORT, server.port)])
    machine.start()
    yield machine
    machine.stop()


def _install_and_reboot(vm: Qemu, bundle: Path, name: str) -> tuple[float, float, str]:
    """`outpost update install` (with its reboot) of an uploaded bundle; returns the seconds
    the install took, the monotonic time it started the reboot, and its output."""
    key = vm.workdir / "key"
    target = vm.upload(key, bundle, name)
    started = time.monotonic()
    install = subprocess.Popen(vm.ssh_command(key, f"outpost update install {target}"),
                               stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
    assert install.stdout is not None
    lines = []
    rebooting = 0.0
    for line in install.stdout:
        lines.append(line)
        if "rebooting into the new slot" in line:
            rebooting = time.monotonic()
            break
    # The guest goes down under the SSH session: nothing more to read from it.
    install.kill()
    install.wait()
    output = "".join(lines)
    assert rebooting, f"the install did not reboot:\n{output}"
    return rebooting - started, rebooting, output


def _queue(vm: Qemu, *payloads: bytes) -> None:
    mqtt_tool.publish("127.0.0.1", vm.port, QUEUE_TOPIC, list(payloads))


def _grubenv(vm: Qemu) -> list[str]:
    result = vm.ssh(vm.workdir / "key", "grub-editenv /boot/firmware/EFI/BOOT/grubenv list")
    assert result.returncode == 0, result.stderr
    return result.stdout.split()


def _request_state(report: dict[str, Any], *states: str) -> bool:
    request = report.get("request") or {}
    return request.get("id") == REQUEST_ID and request.get("state") in states


def test_the_cloud_updates_the_device_into_slot_b_and_it_is_kept(
        vm: Qemu, update_bundles: Bundles, cloud: Mosquitto, server: BundleServer) -> None:
    """The remote trigger: the cloud publishes an update command on its broker, the gateway in
    the guest takes it through the uplink, the root runner (outpost-update.path/.service)
    fetches the bundle over HTTPS from the host, installs it into slot B and reboots; the
    cloud sees accepted, downloading, installing, installed, then slot B running, committed."""
    first = vm.wait_report(1, BOOT_TIMEOUT)
    assert first["outpost"] == "active" and first["update"] == "A:committed", first
    mqtt_tool.publish_retained("127.0.0.1", vm.port, RETAINED_TOPIC, b"before the updates")
    mqtt_tool.subscribe_persistent("127.0.0.1", vm.port, QUEUE_CLIENT, QUEUE_TOPIC)
    _queue(vm, b"queued-1", b"queued-2", b"queued-3")
    key = vm.workdir / "key"
    reports = Reports(cloud.port, REPORT_TOPIC)
    try:
        # The health check records the running slot after the boot: the report then has it.
        _, before = reports.wait(lambda r: (r["running"]["slot"] == "A"
                                            and r["running"]["committed"] is True),
                                 BOOT_TIMEOUT, "of slot A running")
        assert before["gateway_id"] == GATEWAY_ID and before["request"] is None, before
        # The command is not retained: the uplink's inbound subscription must be in place.
        subscribed = vm.ssh(key, "timeout 600 sh -c 'until journalctl -u outpost.service -o cat"
                            " | grep -q \"inbound subscribed\"; do sleep 1; done'")
        assert subscribed.returncode == 0, subscribed
        serial_before = vm.serial_log.stat().st_size

        sha256 = hashlib.sha256(update_bundles.new.read_bytes()).hexdigest()
        command = {"url": server.url(update_bundles.new.name), "sha256": sha256,
                   "id": REQUEST_ID}
        published = time.monotonic()
        mqtt_tool.publish("127.0.0.1", cloud.port, COMMAND_TOPIC,
                          [json.dumps(command).encode()])
        installed_at, done = reports.wait(lambda r: _request_state(r, "installed", "failed"),
                                          BOOT_TIMEOUT, f"of {REQUEST_ID} settled")
        assert done["request"]["state"] == "installed", done
        assert done["request"]["version"] == update_bundles.new_version, done
        assert reports.states(REQUEST_ID) == ["accepted", "downloading", "installing",
                                              "installed"], reports.all()

        number, report = vm.wait_report_where(
            1, lambda r: r["update"].startswith("B:"), BOOT_TIMEOUT)
        assert report["update"] == "B:committed", report
        assert report["outpost"] == "active" and report["health"] == "active", report
        assert number == 2, vm.reports()  # straight into B: no boot of A in between
        good_at, after = reports.wait(lambda r: (r["running"]["slot"] == "B"
                                                 and r["running"]["committed"] is True),
                                      BOOT_TIMEOUT, "of slot B running, committed")
        assert after["running"]["version"] == update_bundles.new_version, after
        assert _request_state(after, "installed"), after
        # Before slot B's health check the new version was never shown with slot A's record.
        assert all(r["running"]["slot"] in (None, "B") for r in reports.all()
                   if r["running"]["version"] == update_bundles.new_version), reports.all()
    finally:
        reports.stop()
    boot_log = vm.serial_log.read_text(errors="replace")[serial_before:]
    assert "outpost: root slot B" in boot_log
    runner = vm.ssh(key, "journalctl -b -1 -u outpost-update.service --no-pager -o cat").stdout
    assert f"request {REQUEST_ID}: installed {update_bundles.new_version}" in runner, runner

    key = vm.workdir / "key"
    running = vm.ssh(key, "cat /proc/cmdline /usr/lib/outpost/release").stdout.split()
    assert "rauc.slot=B" in running and f"BUILD={NEW_BUILD}" in running, running
    status = vm.update_status(key)
    versions = {slot["bootname"]: slot for slot in status["slots"]}
    assert status["booted"] == "B" and status["committed"], status
    assert versions["B"]["version"] == update_bundles.new_version
    assert versions["B"]["boot_status"] == "good"
    assert status["last_install"]["slot"] == "B" and status["last_install_boot"] == "booted"
    env = _grubenv(vm)
    assert "ORDER=B" in env and "B_OK=1" in env and "B_TRY=0" in env, env

    assert mqtt_tool.read_retained("127.0.0.1", vm.port, RETAINED_TOPIC) == b"before the updates"
    got = mqtt_tool.receive_queued("127.0.0.1", vm.port, QUEUE_CLIENT, 3)
    assert got == [b"queued-1", b"queued-2", b"queued-3"]
    print(f"\nremote update to {update_bundles.new_version} in QEMU ({vm.accel()[1]}, "
          f"{update_bundles.new.stat().st_size >> 20} MiB bundle over HTTPS): from the "
          f"command to 'installed' {installed_at - published:.0f} s, to slot B running and "
          f"marked good {good_at - published:.0f} s")


def test_a_broken_update_falls_back_to_the_previous_slot(vm: Qemu,
                                                         update_bundles: Bundles) -> None:
    """The broken slot (A now) boots once, its gateway never comes up, the health check marks
    it bad and reboots, and GRUB starts slot B again, which is marked good."""
    vm.wait_report(2, BOOT_TIMEOUT)
    _queue(vm, b"queued-4", b"queued-5")
    serial_before = vm.serial_log.stat().st_size
    seen = len(vm.reports())

    _, rebooted, output = _install_and_reboot(vm, update_bundles.broken, "broken.raucb")
    assert f"installing {update_bundles.broken_version}" in output, output
    _, report = vm.wait_report_where(
        seen, lambda r: r["update"].startswith("B:") and r["health"] == "active",
        ROLLBACK_TIMEOUT)
    rollback_s = time.monotonic() - rebooted
    assert report["update"] == "B:committed" and report["outpost"] == "active", report
    # GRUB started the new slot once, then the previous one.
    boot_log = vm.serial_log.read_text(errors="replace")[serial_before:]
    tried, back = boot_log.find("outpost: root slot A"), boot_log.find("outpost: root slot B")
    assert 0 <= tried < back, boot_log[-3000:]
    assert "rauc.slot=A" in boot_log[tried:back]  # the broken slot's kernel did start

    key = vm.workdir / "key"
    running = vm.ssh(key, "cat /proc/cmdline /usr/lib/outpost/release").stdout.split()
    assert "rauc.slot=B" in running and f"BUILD={NEW_BUILD}" in running, running
    status = vm.update_status(key)
    slots = {slot["bootname"]: slot for slot in status["slots"]}
    assert status["booted"] == "B" and status["committed"], status
    assert slots["A"]["boot_status"] == "bad", status
    assert slots["A"]["version"] == update_bundles.broken_version
    assert status["last_install"]["slot"] == "A" and status["last_install_boot"] == "failed"
    text = vm.ssh(key, "outpost update status").stdout
    assert "FAILED its trial boot: back on B" in text, text
    env = _grubenv(vm)
    assert "A_OK=0" in env and "B_OK=1" in env, env
    health = vm.ssh(key, "journalctl -b -1 -u outpost-health.service --no-pager -o cat").stdout
    assert "service: FAILED" in health and "booted slot marked bad" in health, health

    assert mqtt_tool.read_retained("127.0.0.1", vm.port, RETAINED_TOPIC) == b"before the updates"
    got = mqtt_tool.receive_queued("127.0.0.1", vm.port, QUEUE_CLIENT, 2)
    assert got == [b"queued-4", b"queued-5"]
    print(f"\nbroken update in QEMU ({vm.accel()[1]}): from its reboot to slot B booted and "
          f"marked good again {rollback_s:.0f} s")
