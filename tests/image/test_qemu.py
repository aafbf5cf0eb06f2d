"""The amd64 disk image booted in QEMU (software emulation; KVM with OUTPOST_QEMU_ACCEL=kvm):
syslinux, the initramfs mounting the data partition, first-boot growth and import of
outpost.toml from the boot partition, MQTT from the host through a forwarded loopback port,
retained messages across a power cut, and RAUC's view of the booted slot after the health
check."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.image import mqtt_tool
from tests.image.conftest import BuiltImage
from tests.image.vm import Qemu, fat_list, fat_put, fat_read

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
    disk = work / "disk.img"
    subprocess.run(["cp", "--sparse=always", str(amd64_image.image), str(disk)], check=True)
    with disk.open("r+b") as handle:
        handle.truncate(disk.stat().st_size + (GROW_MIB << 20))
    config = work / "outpost.toml"
    config.write_text(CONFIG)
    fat_put(disk, config, "outpost.toml")
    machine = Qemu(disk, work)
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
    # (amd64's noop boot selection has no primary slot, so "committed" is RAUC's to say.)
    assert report["update"].startswith("A:") and "error" not in report["update"], report
    print(f"\nRAUC: {report['update']}; the health check finished {report['health_done_s']} s "
          f"after the kernel started ({vm.accel()[1]})")


def test_publish_subscribe_from_the_host(vm: Qemu) -> None:
    vm.wait_report(1, BOOT_TIMEOUT)
    got = mqtt_tool.roundtrip("127.0.0.1", vm.port, "image/qemu/hello", b"from the host")
    assert got == b"from the host"


def test_retained_messages_survive_a_power_cut(vm: Qemu) -> None:
    first = vm.wait_report(1, BOOT_TIMEOUT)
    mqtt_tool.publish_retained("127.0.0.1", vm.port, "image/qemu/retained", b"kept")
    vm.command("system_reset")  # no shutdown: the PUBACK came after the fsync
    second = vm.wait_report(2, BOOT_TIMEOUT)
    assert second["outpost"] == "active", second
    assert second["machine_id"] == first["machine_id"]
    assert "first_boot" not in second["firstboot"]
    got = mqtt_tool.read_retained("127.0.0.1", vm.port, "image/qemu/retained")
    assert got == b"kept"


def test_boot_partition_after_the_import(vm: Qemu, tmp_path: Path) -> None:
    vm.wait_report(2, BOOT_TIMEOUT)
    vm.stop()
    names = fat_list(vm.image)
    assert "outpost.toml" not in names  # it may hold passwords: moved to the data partition
    assert "outpost-import.txt" in names
    assert "imported" in fat_read(vm.image, "outpost-import.txt")
