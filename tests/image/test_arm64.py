"""The Raspberry Pi image (arm64) in qemu-system-aarch64 -M virt, when it was built.

`make image` (arm64) takes long under qemu-user and its boot under TCG takes long too, so the
image tests neither build nor boot it by default; after a `make image`,
`IMAGE_TEST_ARM64=1 make image-test` also boots it: Debian's arm64 kernel and initrd from the
image's boot partition, the image as a virtio disk, the command line of its cmdline.txt with
the consoles of the virt machine. The Pi's own firmware and device trees are not emulated.

The boot selection for A/B updates (config.txt's os_prefix, the slot's cmdline.txt, RAUC's
system.conf with the tryboot backend) is checked by file content whenever an arm64 image
exists, without booting: QEMU does not emulate the firmware that reads those files.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator

import pytest

from tests.image import mqtt_tool
from tests.image.conftest import REPO
from tests.image.test_qemu import CONFIG
from tests.image.vm import Qemu, fat_put, fat_read

pytestmark = [pytest.mark.image, pytest.mark.timeout(3600)]

BOOT_TIMEOUT = 1800.0  # aarch64 under TCG on two cores


@pytest.fixture(scope="module")
def vm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Qemu]:
    if os.environ.get("IMAGE_TEST_ARM64") != "1":
        pytest.skip("the arm64 image boots only with IMAGE_TEST_ARM64=1 (after make image)")
    images = sorted(REPO.glob("outpost-*-arm64.img"))
    if not images:
        pytest.skip("no outpost-*-arm64.img: run 'make image' first")
    work = tmp_path_factory.mktemp("qemu-arm64")
    disk = work / "disk.img"
    subprocess.run(["cp", "--sparse=always", str(images[-1]), str(disk)], check=True)
    config = work / "outpost.toml"
    config.write_text(CONFIG)
    fat_put(disk, config, "outpost.toml")
    pi_cmdline = fat_read(disk, "slot-a/cmdline.txt").split()
    kept = [arg for arg in pi_cmdline if not arg.startswith("console=")]
    machine = Qemu(disk, work, arm64_cmdline=" ".join([*kept, "console=ttyAMA0", "console=hvc0"]))
    machine.start()
    yield machine
    machine.stop()


def test_pi_boot_selection_files() -> None:
    images = sorted(REPO.glob("outpost-*-arm64.img"))
    root = REPO / "image" / ".cache" / "arm64" / "work" / "root"
    if not images or not (root / "usr/lib/outpost/release").exists():
        pytest.skip("no arm64 image of this tree: run 'make image' first")
    release = dict(line.split("=", 1) for line in
                   (root / "usr/lib/outpost/release").read_text().splitlines())
    disk = release["DISK_ID"]
    config = fat_read(images[-1], "config.txt").splitlines()
    assert "os_prefix=slot-a/" in config
    assert config.index("os_prefix=slot-a/") < config.index("include usercfg.txt")
    cmdline = fat_read(images[-1], "slot-a/cmdline.txt").split()
    assert f"root=PARTUUID={disk}-02" in cmdline and "rauc.slot=A" in cmdline
    assert "ro" in cmdline
    conf = (root / "etc/rauc/system.conf").read_text()
    assert "bootloader=custom" in conf
    assert "bootloader-custom-backend=/usr/libexec/outpost/rauc-tryboot" in conf
    assert "compatible=outpost-raspberrypi-arm64" in conf
    assert (root / "usr/libexec/outpost/rauc-tryboot").stat().st_mode & 0o111
    bundle = images[-1].with_suffix(".raucb")
    assert bundle.exists()
    print(f"\narm64 bundle: {bundle.stat().st_size / (1 << 20):.1f} MiB")


def test_arm64_boots_and_serves_mqtt(vm: Qemu, capsys: pytest.CaptureFixture[str]) -> None:
    report = vm.wait_report(1, BOOT_TIMEOUT)
    with capsys.disabled():
        print(f"\narm64 boot report: {report}")
    assert report["outpost"] == "active", report
    assert report["root"] == "ro"
    assert report["var"].endswith("4")
    assert "outpost.toml:_imported" in report["firstboot"]
    got = mqtt_tool.roundtrip("127.0.0.1", vm.port, "image/arm64/hello", b"from the host")
    assert got == b"from the host"
