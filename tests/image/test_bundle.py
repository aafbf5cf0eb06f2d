"""Update bundles with the real RAUC: what `outpost update install` refuses before RAUC touches
a slot (a foreign signature, a bundle for another board, a truncated file), the image's
system.conf as RAUC parses it, the built amd64 bundle, the bundle's hook on the built root's
files, and the Raspberry Pi's tryboot backend driven through its state machine on a boot
directory.

Small bundles are made here with the image's own scripts (image/rauc/dev-keys.sh,
make-bundle.sh, system-conf.sh) from a few-MiB ext4 file system, so these tests take seconds.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from outpost import update
from tests.image.conftest import REPO, BuiltImage

pytestmark = pytest.mark.image

RAUC_DIR = REPO / "image" / "rauc"
TRYBOOT = REPO / "image" / "overlay" / "usr" / "libexec" / "outpost" / "rauc-tryboot"
X86 = "outpost-x86-64"
PI = "outpost-raspberrypi-arm64"


def _tools() -> None:
    missing = [t for t in ("rauc", "mksquashfs", "openssl", "mke2fs") if shutil.which(t) is None]
    if missing:
        pytest.skip(f"missing {', '.join(missing)}: run 'make image-packages'")


@dataclass(frozen=True)
class Keys:
    dir: Path

    @property
    def ca(self) -> Path:
        return self.dir / "ca.cert.pem"


@dataclass(frozen=True)
class Kit:
    trusted: Keys
    foreign: Keys
    work: Path

    def bundle(self, name: str, compatible: str, keys: Keys | None = None) -> Path:
        keys = keys or self.trusted
        src = self.work / f"{name}-src"
        (src / "root").mkdir(parents=True)
        (src / "root" / "payload").write_bytes(os.urandom(300_000))  # squashfs needs > 4 KiB
        (src / "dir").mkdir()
        subprocess.run(["mke2fs", "-q", "-t", "ext4", "-d", str(src / "root"),
                        str(src / "dir" / "rootfs.ext4"), "8M"], check=True)
        out = self.work / f"{name}.raucb"
        subprocess.run([str(RAUC_DIR / "make-bundle.sh"), str(src / "dir"), str(out), compatible,
                        "0.1.0+test", "test", "test bundle", str(keys.dir / "signing.cert.pem"),
                        str(keys.dir / "signing.key.pem"), str(keys.ca)], check=True)
        return out

    def device(self, arch: str, compatible: str) -> update.Device:
        conf = subprocess.run([str(RAUC_DIR / "system-conf.sh"), arch, compatible, "0123abcd",
                               "test"], check=True, capture_output=True, text=True).stdout
        path = self.work / f"system-{arch}.conf"
        path.write_text(conf.replace("/etc/rauc/keyring.pem", str(self.trusted.ca)))
        return update.Device(system_conf=path, download_dir=self.work / "download",
                             last_install=self.work / "last.json")


@pytest.fixture(scope="module")
def kit(tmp_path_factory: pytest.TempPathFactory) -> Kit:
    _tools()
    work = tmp_path_factory.mktemp("bundles")
    keys = []
    for name in ("trusted", "foreign"):
        subprocess.run([str(RAUC_DIR / "dev-keys.sh"), str(work / name), f"outpost {name}"],
                       check=True)
        keys.append(Keys(work / name))
    return Kit(keys[0], keys[1], work)


def test_a_bundle_signed_for_this_device_is_accepted(kit: Kit) -> None:
    info = update.check_bundle(kit.bundle("good", X86), kit.device("amd64", X86))
    assert (info.compatible, info.version, info.build) == (X86, "0.1.0+test", "test")


def test_a_bundle_with_a_foreign_signature_is_refused(kit: Kit) -> None:
    bundle = kit.bundle("foreign", X86, kit.foreign)
    with pytest.raises(update.UpdateError, match=r"refused: .*(signature|certificate|verif)"):
        update.check_bundle(bundle, kit.device("amd64", X86))


def test_a_bundle_for_another_board_is_refused(kit: Kit) -> None:
    bundle = kit.bundle("pi", PI)
    with pytest.raises(update.UpdateError,
                       match=f"the bundle is for '{PI}', this device is '{X86}'"):
        update.check_bundle(bundle, kit.device("amd64", X86))


def test_a_truncated_bundle_is_refused(kit: Kit) -> None:
    good = kit.bundle("whole", X86)
    cut = kit.work / "cut.raucb"
    cut.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    with pytest.raises(update.UpdateError, match=r"refused: .*(bundle|size|format)"):
        update.check_bundle(cut, kit.device("amd64", X86))


def test_install_refuses_before_rauc_installs(kit: Kit) -> None:
    """A refused bundle never reaches `rauc install` (nothing on the host could take it)."""
    device = kit.device("amd64", X86)
    bundle = kit.bundle("other-board", PI)
    with pytest.raises(update.UpdateError, match="the bundle is for"):
        update.install(str(bundle), device, lambda line: None, reboot=False)
    record = json.loads(device.last_install.read_text())
    assert record["result"] == "failed" and "the bundle is for" in record["error"]


@pytest.mark.parametrize("arch", ["amd64", "arm64"])
def test_system_conf_is_what_rauc_reads(kit: Kit, arch: str) -> None:
    compatible = X86 if arch == "amd64" else PI
    device = kit.device(arch, compatible)
    bundle = kit.bundle(f"conf-{arch}", compatible)
    result = subprocess.run(["rauc", f"--conf={device.system_conf}", "info", str(bundle)],
                            capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    system = device.system()
    assert system.get("slot.rootfs.0", "device") == "/dev/disk/by-partuuid/0123abcd-02"
    assert system.get("slot.rootfs.1", "bootname") == "B"
    assert device.uses_tryboot() == (arch == "arm64")
    if arch == "amd64":  # RAUC's grub backend, on the grubenv next to the image's GRUB
        assert system.get("system", "bootloader") == "grub"
        assert system.get("system", "grubenv") == "/boot/firmware/EFI/BOOT/grubenv"


# -- the built image's bundle ------------------------------------------------------------------

@pytest.mark.timeout(2400)  # may be the first test to need the session's image build
def test_the_image_build_writes_a_signed_bundle_of_its_root(amd64_image: BuiltImage) -> None:
    _tools()
    bundle = amd64_image.image.with_suffix(".raucb")
    keyring = REPO / "image" / "keys" / "ca.cert.pem"
    result = subprocess.run(["rauc", f"--keyring={keyring}", "info", str(bundle)],
                            capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert "Bundle Format: \tverity" in result.stdout
    info = json.loads(subprocess.run(
        ["rauc", f"--keyring={keyring}", "info", "--output-format=json", str(bundle)],
        capture_output=True, text=True, check=True).stdout)
    release = dict(line.split("=", 1) for line in
                   (amd64_image.root / "usr/lib/outpost/release").read_text().splitlines())
    assert info["compatible"] == X86 == release["COMPATIBLE"]
    assert info["version"] == f"{release['VERSION']}+{release['BUILD']}"
    assert (amd64_image.root / "etc/rauc/keyring.pem").read_bytes() == keyring.read_bytes()
    conf = (amd64_image.root / "etc/rauc/system.conf").read_text()
    assert f"compatible={X86}" in conf and f"{release['DISK_ID']}-03" in conf
    size = bundle.stat().st_size
    print(f"\namd64 bundle: {size / (1 << 20):.1f} MiB ({info['version']})")


# -- the Raspberry Pi's tryboot backend -------------------------------------------------------

@dataclass
class PiBoot:
    dir: Path
    cmdline: Path

    def run(self, *args: str, booted: str = "A") -> subprocess.CompletedProcess[str]:
        self.cmdline.write_text(f"root=PARTUUID=0123abcd-0{2 if booted == 'A' else 3} ro "
                                f"rauc.slot={booted} console=ttyS1\n")
        env = {**os.environ, "OUTPOST_BOOT_DIR": str(self.dir),
               "OUTPOST_CMDLINE": str(self.cmdline)}
        return subprocess.run([str(TRYBOOT), *args], env=env, capture_output=True, text=True,
                              check=False)

    def ok(self, *args: str, booted: str = "A") -> str:
        result = self.run(*args, booted=booted)
        assert result.returncode == 0, result.stderr
        return result.stdout.strip()

    def prefix(self, name: str) -> str | None:
        path = self.dir / name
        if not path.exists():
            return None
        lines = [x for x in path.read_text().splitlines() if x.startswith("os_prefix=")]
        return lines[-1]


@pytest.fixture
def pi_boot(tmp_path: Path) -> PiBoot:
    boot = tmp_path / "boot"
    (boot / "slot-a").mkdir(parents=True)
    (boot / "slot-b").mkdir()
    (boot / "config.txt").write_text("arm_64bit=1\nkernel=vmlinuz\nos_prefix=slot-a/\n[all]\n"
                                     "include usercfg.txt\n")
    return PiBoot(boot, tmp_path / "cmdline")


def test_tryboot_update_commits_after_mark_good(pi_boot: PiBoot) -> None:
    assert pi_boot.ok("get-primary") == "A"
    assert (pi_boot.ok("get-state", "A"), pi_boot.ok("get-state", "B")) == ("good", "bad")
    # RAUC installing into B: B bad while written, then B primary (tried on the next boot).
    pi_boot.ok("set-state", "B", "bad")
    pi_boot.ok("set-primary", "B")
    assert pi_boot.ok("get-primary") == "B"
    assert pi_boot.prefix("tryboot.txt") == "os_prefix=slot-b/"
    assert pi_boot.prefix("config.txt") == "os_prefix=slot-a/"  # a normal boot still takes A
    assert "include usercfg.txt" in (pi_boot.dir / "tryboot.txt").read_text()
    # Booted B with the tryboot flag; the health check marks it good: B is committed.
    pi_boot.ok("set-state", "B", "good", booted="B")
    assert pi_boot.prefix("config.txt") == "os_prefix=slot-b/"
    assert pi_boot.prefix("tryboot.txt") is None
    assert pi_boot.ok("get-primary", booted="B") == "B"


def test_tryboot_failed_health_check_falls_back(pi_boot: PiBoot) -> None:
    pi_boot.ok("set-primary", "B")
    # B booted on trial fails its health check: marked bad, tryboot.txt goes; config.txt
    # (slot A) was never changed, and is what the reboot (or any reset) starts.
    pi_boot.ok("set-state", "B", "bad", booted="B")
    assert pi_boot.prefix("tryboot.txt") is None
    assert pi_boot.prefix("config.txt") == "os_prefix=slot-a/"
    assert pi_boot.ok("get-primary", booted="A") == "A"
    assert pi_boot.ok("get-state", "B") == "bad"


def test_tryboot_refuses_what_it_cannot_do(pi_boot: PiBoot) -> None:
    assert "unknown slot" in pi_boot.run("set-primary", "C").stderr
    assert "good or bad" in pi_boot.run("set-state", "A", "maybe").stderr
    # The committed slot cannot be marked bad while the other is not good.
    result = pi_boot.run("set-state", "A", "bad")
    assert result.returncode != 0 and "keeping A" in result.stderr
    assert pi_boot.prefix("config.txt") == "os_prefix=slot-a/"
    shutil.rmtree(pi_boot.dir / "slot-b")
    assert "slot-b/ is missing" in pi_boot.run("set-primary", "B").stderr


# -- the bundle's hook, on the built root ------------------------------------------------------

@pytest.mark.timeout(2400)  # may be the first test to need the session's image build
def test_bundle_hook_fits_the_new_slot_to_the_device(amd64_image: BuiltImage,
                                                     tmp_path: Path) -> None:
    """What RAUC runs after writing slot B, on a copy of the files of the built root: the
    device's disk id goes into the slot's fstab and system.conf, and the slot's kernel, initrd
    and command line into slot-b/ on the boot partition."""
    built = dict(line.split("=", 1) for line in
                 (amd64_image.root / "usr/lib/outpost/release").read_text().splitlines())
    slot = tmp_path / "slot"
    for rel in ("etc/fstab", "etc/rauc/system.conf", "usr/lib/outpost/release",
                "usr/lib/outpost/boot/cmdline.txt.in"):
        (slot / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(amd64_image.root / rel, slot / rel)
    shutil.copytree(amd64_image.root / "boot", slot / "boot", symlinks=True)
    boot = tmp_path / "fat"
    shutil.copytree(amd64_image.boot, boot)
    device = "0badcafe"
    cmdline = tmp_path / "cmdline"
    cmdline.write_text(f"root=PARTUUID={device}-02 ro rootwait rauc.slot=A console=hvc0\n")
    env = {**os.environ, "RAUC_SLOT_CLASS": "rootfs", "RAUC_SLOT_BOOTNAME": "B",
           "RAUC_SLOT_MOUNT_POINT": str(slot), "OUTPOST_BOOT_DIR": str(boot),
           "OUTPOST_CMDLINE": str(cmdline)}
    result = subprocess.run([str(RAUC_DIR / "bundle-hook.sh"), "slot-post-install"], env=env,
                            capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert f"disk {device}" in result.stdout
    fstab = (slot / "etc/fstab").read_text()
    assert f"PARTUUID={device}-02" in fstab and built["DISK_ID"] not in fstab
    conf = (slot / "etc/rauc/system.conf").read_text()
    assert f"/dev/disk/by-partuuid/{device}-03" in conf and f"{built['DISK_ID']}-0" not in conf
    new = (boot / "slot-b" / "cmdline.txt").read_text().split()
    assert f"root=PARTUUID={device}-03" in new and "rauc.slot=B" in new and "ro" in new
    for name in ("vmlinuz", "initrd.img"):
        assert (boot / "slot-b" / name).read_bytes() == (boot / "slot-a" / name).read_bytes()
    # amd64: the same command line for GRUB (EFI/BOOT/grub.cfg sources it).
    assert (boot / "slot-b" / "cmdline.cfg").read_text() == f'set cmdline="{" ".join(new)}"\n'
    assert (boot / "slot-a" / "cmdline.cfg").exists() and (boot / "EFI/BOOT/grubenv").exists()
    # Another hook call (a class other than rootfs, another hook type) changes nothing.
    before = sorted(p.name for p in (boot / "slot-b").iterdir())
    env["RAUC_SLOT_CLASS"] = "appfs"
    subprocess.run([str(RAUC_DIR / "bundle-hook.sh"), "slot-post-install"], env=env, check=True)
    assert sorted(p.name for p in (boot / "slot-b").iterdir()) == before
