"""The amd64 disk image booted in QEMU (software emulation; KVM with OUTPOST_QEMU_ACCEL=kvm):
UEFI firmware and GRUB, the initramfs mounting the data partition, first-boot growth and import of
outpost.toml from the boot partition, MQTT from the host through a forwarded loopback port,
retained messages across power cuts (one of them while the good slot boots), and RAUC's view
of the booted slot after the health check; a power cut during an install, the install retried
without its reboot, and a refused bundle. (Enrollment, remote configuration, rebooting into the
new slot and rolling back: test_qemu_fleet.py.)

The tests run in order on one machine and share its boots: each boot under TCG costs one to
three minutes, so scenarios that can follow one another do (the two power cuts fall in one
boot, the retried install is the install whose result is checked), each on its own assertions.
"""
from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.image import mqtt_tool
from tests.image.conftest import REPO, BuiltImage
from tests.image.vm import Qemu, fat_list, fat_read, prepare_disk

# One machine for the module: `make image-test` hands a whole file to one worker (loadfile).
pytestmark = [pytest.mark.image, pytest.mark.timeout(2400)]

BOOT_TIMEOUT = 600.0  # TCG on two cores: a boot takes one to three minutes
GROW_MIB = 256

CONFIG = """\
# imported from the boot partition on the first boot (image/README.md)
gateway_id = "image-test"

[[listeners]]
bind = "0.0.0.0:1883"
allow_anonymous = true

[storage]
durability = "full"
"""


@pytest.fixture(scope="module")
def vm(amd64_image: BuiltImage, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Qemu]:
    """A copy of the image, 256 MiB larger (the data partition grows into it), with an
    outpost.toml on its boot partition, booted once."""
    work = tmp_path_factory.mktemp("qemu")
    # root's SSH key is imported like a user's (image/README.md): the update tests run commands
    machine = Qemu(prepare_disk(amd64_image.image, work, CONFIG, GROW_MIB), work)
    machine.start()
    yield machine
    machine.stop()


def test_first_boot(vm: Qemu) -> None:
    report = vm.wait_report(1, BOOT_TIMEOUT)
    assert report["outpost"] == "active", report
    assert report["root"] == "ro"
    assert report["var"].endswith("4")  # /dev/vda4: the data partition, mounted by the initramfs
    assert int(report["var_mib"]) > 384 + GROW_MIB // 2, "the data partition did not grow"
    assert report["state_dir"] == "outpost"
    assert "outpost.toml:_imported" in report["firstboot"]
    assert report["failed"] == "", report
    # A/B updates: RAUC sees slot A booted, and the health check passed and marked it.
    assert report["health"] == "active", report
    assert report["update"] == "A:committed", report
    print(f"\nRAUC: {report['update']}; the health check finished {report['health_done_s']} s "
          f"after the kernel started ({vm.accel()[1]})")


def test_publish_subscribe_from_the_host(vm: Qemu) -> None:
    vm.wait_report(1, BOOT_TIMEOUT)
    got = mqtt_tool.roundtrip("127.0.0.1", vm.port, "image/qemu/hello", b"from the host")
    assert got == b"from the host"


@dataclass
class PowerCuts:
    """Where the serial log stood when the second power cut came (GRUB had saved A_TRY=1)."""

    tried: int = -1


@pytest.fixture(scope="module")
def power_cuts() -> PowerCuts:
    return PowerCuts()


def test_retained_messages_survive_a_power_cut(vm: Qemu, power_cuts: PowerCuts) -> None:
    """Two power cuts in a row: one in the running system, then one while the kernel of the
    next boot loads (after GRUB used slot A's try, before its health check marked it good)."""
    first = vm.wait_report(1, BOOT_TIMEOUT)
    mqtt_tool.publish_retained("127.0.0.1", vm.port, "image/qemu/retained", b"kept")
    offset = vm.serial_log.stat().st_size
    vm.command("system_reset")  # no shutdown: the PUBACK came after the fsync
    power_cuts.tried = vm.wait_serial("outpost: root slot A", offset, BOOT_TIMEOUT)
    vm.command("system_reset")  # the second power cut, while the kernel loads
    second = vm.wait_report(2, BOOT_TIMEOUT)
    assert second["outpost"] == "active", second
    assert second["machine_id"] == first["machine_id"]
    assert "first_boot" not in second["firstboot"]
    got = mqtt_tool.read_retained("127.0.0.1", vm.port, "image/qemu/retained")
    assert got == b"kept"


def test_power_cut_while_the_good_slot_boots(vm: Qemu, power_cuts: PowerCuts) -> None:
    """The second power cut came after GRUB used slot A's try but before its health check
    marked it good: no slot is left untried, and GRUB starts A again rather than none."""
    report = vm.wait_report(2, BOOT_TIMEOUT)
    assert power_cuts.tried >= 0, "the power cuts of the test before did not happen"
    assert report["outpost"] == "active" and report["update"] == "A:committed", report
    vm.wait_serial("no untried good root slot; starting slot A again", power_cuts.tried, 10.0)
    assert mqtt_tool.read_retained("127.0.0.1", vm.port, "image/qemu/retained") == b"kept"


def test_power_lost_during_an_install(vm: Qemu, amd64_image: BuiltImage) -> None:
    """Power cut while RAUC writes slot B: the device boots slot A as before with its data.
    (The same install retried: the test after this one.)"""
    vm.wait_report(2, BOOT_TIMEOUT)
    key = vm.workdir / "key"
    vm.upload(key, amd64_image.image.with_suffix(".raucb"), "new.raucb")
    slot_b = vm.ssh(key, "readlink -f /dev/disk/by-partuuid/$(sed -n "
                         "'s/.*root=PARTUUID=\\([0-9a-f]*\\)-02.*/\\1/p' /proc/cmdline)-03")
    assert slot_b.returncode == 0 and slot_b.stdout.startswith("/dev/"), slot_b.stderr
    stat = f"/sys/class/block/{slot_b.stdout.strip().rsplit('/', 1)[-1]}/stat"

    def written_mib() -> int:  # sectors written to slot B's partition since boot
        result = vm.ssh(key, f"cat {stat}")
        return int(result.stdout.split()[6]) * 512 >> 20 if result.returncode == 0 else 0

    before = written_mib()
    seen = len(vm.reports())
    install = subprocess.Popen(
        vm.ssh_command(key, "outpost update install /var/cache/outpost-update/new.raucb "
                            "--no-reboot"),
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + BOOT_TIMEOUT
        while written_mib() < before + 64:  # the event: RAUC is writing the slot
            assert install.poll() is None, "the install ended before 64 MiB reached slot B"
            assert time.monotonic() < deadline, "RAUC never wrote slot B"
        vm.command("system_reset")  # the power cut
    finally:
        install.kill()
        install.wait()
    started = time.monotonic()
    report = vm.wait_report(seen + 1, BOOT_TIMEOUT)
    boot_s = time.monotonic() - started
    assert report["outpost"] == "active" and report["update"].startswith("A:"), report
    assert report["health"] == "active", report
    got = mqtt_tool.read_retained("127.0.0.1", vm.port, "image/qemu/retained")
    assert got == b"kept"
    print(f"\npower cut during the install: back on slot A and healthy {boot_s:.0f} s later "
          f"({vm.accel()[1]})")


def test_update_install_in_the_vm(vm: Qemu, amd64_image: BuiltImage, tmp_path: Path) -> None:
    """The install the power cut broke, retried: `outpost update install --no-reboot` of the
    built bundle writes slot B and makes it the slot the next boot tries; a bundle signed by
    another CA is refused on the device with both slots as they were."""
    vm.wait_report(3, BOOT_TIMEOUT)
    key = vm.workdir / "key"
    bundle = amd64_image.image.with_suffix(".raucb")
    version = json.loads(subprocess.run(
        ["rauc", f"--keyring={REPO / 'image/keys/ca.cert.pem'}", "info", "--output-format=json",
         str(bundle)], capture_output=True, text=True, check=True).stdout)["version"]

    started = time.monotonic()
    result = vm.ssh(key, "outpost update install /var/cache/outpost-update/new.raucb --no-reboot")
    install_s = time.monotonic() - started
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"installed {version}" in result.stdout
    after = vm.update_status(key)
    slots = {slot["bootname"]: slot for slot in after["slots"]}
    assert after["booted"] == "A" and slots["B"]["version"] == version, after
    assert after["last_install"]["result"] == "installed"
    # RAUC's grub backend made B the slot the next boot tries (ORDER in the grubenv).
    assert after["primary"] == slots["B"]["name"] and after["last_install_boot"] == "pending"
    env = vm.ssh(key, "grub-editenv /boot/firmware/EFI/BOOT/grubenv list").stdout.split()
    assert "ORDER=B" in env and "B_OK=1" in env and "B_TRY=0" in env, env
    # The hook put slot B's boot files on the boot partition, with the device's disk id.
    cmdline = vm.ssh(key, "cat /boot/firmware/slot-b/cmdline.txt && cat /proc/cmdline")
    slot_b, running = cmdline.stdout.splitlines()
    disk = running.split("root=PARTUUID=")[1][:8]
    assert f"root=PARTUUID={disk}-03" in slot_b.split() and "rauc.slot=B" in slot_b.split()

    foreign = tmp_path / "foreign"
    subprocess.run([str(REPO / "image/rauc/dev-keys.sh"), str(foreign / "keys"), "foreign"],
                   check=True)
    (foreign / "root").mkdir()
    (foreign / "root" / "payload").write_bytes(os.urandom(300_000))
    (foreign / "dir").mkdir()
    subprocess.run(["mke2fs", "-q", "-t", "ext4", "-d", str(foreign / "root"),
                    str(foreign / "dir" / "rootfs.ext4"), "8M"], check=True)
    subprocess.run([str(REPO / "image/rauc/make-bundle.sh"), str(foreign / "dir"),
                    str(foreign / "bad.raucb"), "outpost-x86-64", "9.9.9", "bad", "foreign",
                    str(foreign / "keys/signing.cert.pem"), str(foreign / "keys/signing.key.pem"),
                    str(foreign / "keys/ca.cert.pem")], check=True)
    vm.upload(key, foreign / "bad.raucb", "bad.raucb")
    refused = vm.ssh(key, "outpost update install /var/cache/outpost-update/bad.raucb --no-reboot")
    assert refused.returncode == 1 and "refused" in refused.stderr, refused.stderr
    again = vm.update_status(key)
    assert again["booted"] == "A"
    assert {s["bootname"]: s["version"] for s in again["slots"]} == {
        s["bootname"]: s["version"] for s in after["slots"]}
    assert again["last_install"]["result"] == "failed"
    print(f"\ninstall of the {bundle.stat().st_size >> 20} MiB bundle in QEMU ({vm.accel()[1]}): "
          f"{install_s:.0f} s")


def test_boot_partition_after_the_import(vm: Qemu, tmp_path: Path) -> None:
    vm.wait_report(3, BOOT_TIMEOUT)
    vm.stop()
    names = fat_list(vm.image)
    assert "outpost.toml" not in names  # it may hold passwords: moved to the data partition
    assert "outpost-import.txt" in names
    assert "imported" in fat_read(vm.image, "outpost-import.txt")
