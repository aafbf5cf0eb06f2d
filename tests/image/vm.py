"""Boot the image for the tests: its root tree in systemd-nspawn, its disk image in QEMU.

Only loopback addresses are used: the container has a private network (the tests reach it
with `nsenter -n`), and QEMU's user network is `restrict=on` with host forwards on 127.0.0.1
to the guest's ports 1883 and 22, and, on request, guest forwards: a connection of the guest
to one address and port of its network is handed to `socat`, which connects to a port on the
host's 127.0.0.1 (the guest reaches nothing else).
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, cast

from tests.support.mosquitto import free_port

CONTAINER_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"
BOOT_PARTITION_OFFSET = 4 << 20  # image/build.sh: ALIGN_MIB
# UEFI firmware for the amd64 image (Debian's ovmf): the code read-only, a copy of the variable
# store per machine (the image needs no boot entry in it: it boots EFI/BOOT/BOOTX64.EFI).
OVMF_CODE = Path("/usr/share/OVMF/OVMF_CODE_4M.fd")
OVMF_VARS = Path("/usr/share/OVMF/OVMF_VARS_4M.fd")


def _children(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == pid:
            found.append(int(entry))
    return found


@dataclass
class Container:
    """The image's root booted with `systemd-nspawn -b`: read-only root, the data tree on /var.

    nspawn runs in a private mount namespace with its own tmpfs on /run (it keeps its state
    there), so nothing of the host's /run is touched.
    """

    root: Path
    data: Path
    log_path: Path
    process: subprocess.Popen[bytes] | None = None
    leader: int = 0

    def start(self, timeout: float = 60.0) -> None:
        script = 'mount -t tmpfs -o mode=0755 tmpfs /run && exec "$@"'
        command = [
            "unshare", "--mount", "--propagation", "private", "--", "sh", "-c", script, "sh",
            "systemd-nspawn", "--quiet", "--boot", "--register=no", "--keep-unit",
            "--directory", str(self.root),
            "--read-only", f"--bind={self.data}:/var", "--private-network",
            "--console=read-only", "--machine=outpost-image-test",
        ]
        log = self.log_path.open("ab")
        self.process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log,
                                        stderr=subprocess.STDOUT)
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"systemd-nspawn exited ({self.process.returncode}):\n"
                                   + self.log_path.read_text(errors="replace")[-3000:])
            leader = self._find_leader()
            if leader:
                self.leader = leader
                return
            time.sleep(0.2)
        raise TimeoutError("no systemd inside the container")

    def _find_leader(self) -> int:
        assert self.process is not None
        todo = [self.process.pid]
        while todo:
            pid = todo.pop()
            for child in _children(pid):
                try:
                    comm = Path(f"/proc/{child}/comm").read_text().strip()
                except OSError:
                    continue
                if comm == "systemd":
                    return child
                todo.append(child)
        return 0

    def run(self, *args: str, check: bool = True, timeout: float = 60.0,
            namespaces: str = "all") -> subprocess.CompletedProcess[str]:
        """A command inside the container (all its namespaces, or only `net`)."""
        if namespaces == "all":
            prefix = ["nsenter", f"--target={self.leader}", "--all", "--",
                      "env", "-i", f"PATH={CONTAINER_PATH}"]
        else:
            prefix = ["nsenter", f"--target={self.leader}", "--net", "--"]
        return subprocess.run([*prefix, *args], check=check, capture_output=True, text=True,
                              timeout=timeout)

    def show(self, unit: str, *properties: str) -> dict[str, str]:
        """`systemctl show` properties of a unit."""
        out = self.run("systemctl", "show", unit, "-p", ",".join(properties)).stdout
        return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)

    def wait_active(self, unit: str, timeout: float = 120.0) -> dict[str, str]:
        """Wait until `unit` is active (for Type=notify: READY=1 came); fail on failed."""
        deadline = time.monotonic() + timeout
        props: dict[str, str] = {}
        while time.monotonic() < deadline:
            result = self.run("systemctl", "show", unit, "-p",
                              "ActiveState,SubState,MainPID,NRestarts,StatusText,Type",
                              check=False)
            props = dict(line.split("=", 1) for line in result.stdout.splitlines() if "=" in line)
            if props.get("ActiveState") == "active":
                return props
            time.sleep(0.5)
        journal = self.run("journalctl", "--no-pager", "-n", "80", check=False).stdout
        raise TimeoutError(f"{unit} is not active: {props}\n{journal}")

    def stop(self, timeout: float = 60.0) -> int:
        """Power the container off cleanly (SIGKILL past `timeout`)."""
        if self.process is None:
            return 0
        if self.process.poll() is None:
            self.run("systemctl", "poweroff", check=False)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.send_signal(signal.SIGKILL)
                self.process.wait(10)
        return int(self.process.returncode)


_REPORT = re.compile(r"OUTPOST-REPORT (.*)")
KERNEL_START = "Linux version "
GRUB_SLOT = "outpost: root slot "  # image/grub/grub.cfg, just before it loads the kernel
USER_SPACE = "Run /init as init process"  # the initramfs: from here on the image is at fault
EARLY_STALL = 90.0  # seconds without a line from the kernel
MAX_EARLY_STALLS = 2


@dataclass
class Qemu:
    """The amd64 disk image in qemu-system-x86_64 with UEFI firmware (OVMF; TCG, KVM on request,
    see `accel`), results read from its virtio console.

    The guest writes `OUTPOST-REPORT key=value ...` lines to /dev/hvc0 (the image's
    outpost-boot-report.service); the serial port is only a debugging log.
    """

    image: Path
    workdir: Path
    memory_mib: int = 1024
    port: int = field(default_factory=free_port)
    ssh_port: int = field(default_factory=free_port)  # the guest's sshd (authorized_keys import)
    # One vCPU: with two, TCG's unsynchronised TSCs now and then stall the guest kernel early
    # in its boot (seen after "IP idents hash table entries", before any user space).
    cpus: int = 1
    process: subprocess.Popen[bytes] | None = None
    early_stalls: int = 0  # boots restarted by `wait_report` because the kernel stalled
    started: float = 0.0  # time.monotonic() when `start` launched the machine
    # arm64: qemu-system-aarch64 -M virt with the kernel and initrd of the image's boot
    # partition (a Pi's firmware is not emulated) and this command line.
    arm64_cmdline: str | None = None
    # (address in the guest's 10.0.2.0/24, port there, port on the host's 127.0.0.1)
    guest_forwards: list[tuple[str, int, int]] = field(default_factory=list)

    @property
    def console_log(self) -> Path:
        return self.workdir / "hvc0.log"

    @property
    def serial_log(self) -> Path:
        return self.workdir / "serial.log"

    @property
    def monitor(self) -> Path:
        return self.workdir / "monitor.sock"

    def start(self) -> None:
        if self.arm64_cmdline is None:
            variables = self.workdir / "OVMF_VARS.fd"
            if not variables.exists():
                shutil.copyfile(OVMF_VARS, variables)
            machine = ["qemu-system-x86_64", "-machine", "pc",
                       "-drive", f"if=pflash,format=raw,unit=0,readonly=on,file={OVMF_CODE}",
                       "-drive", f"if=pflash,format=raw,unit=1,file={variables}"]
        else:
            for name in ("vmlinuz", "initrd.img"):  # root slot A's, as the Pi's config.txt says
                fat_get(self.image, f"slot-a/{name}", self.workdir / name)
            machine = ["qemu-system-aarch64", "-machine", "virt", "-cpu", "cortex-a72",
                       "-kernel", str(self.workdir / "vmlinuz"),
                       "-initrd", str(self.workdir / "initrd.img"),
                       "-append", self.arm64_cmdline]
        command = [
            *machine, *self.accel(), "-smp", str(self.cpus),
            "-m", str(self.memory_mib), "-display", "none", "-nodefaults", "-no-user-config",
            # bootindex and no option ROM on the network card: the firmware starts the disk
            # without trying a network boot first.
            "-drive", f"file={self.image},format=raw,if=none,id=disk0,cache=unsafe",
            "-device", "virtio-blk-pci,drive=disk0,bootindex=0",
            "-netdev", f"user,id=net0,restrict=on,hostfwd=tcp:127.0.0.1:{self.port}-:1883,"
                       f"hostfwd=tcp:127.0.0.1:{self.ssh_port}-:22"
                       + "".join(f",guestfwd=tcp:{address}:{port}-cmd:socat STDIO "
                                 f"TCP:127.0.0.1:{host_port}"
                                 for address, port, host_port in self.guest_forwards),
            "-device", "virtio-net-pci,netdev=net0,romfile=",
            "-device", "virtio-serial-pci",
            "-chardev", f"file,id=hvc0,path={self.console_log}",
            "-device", "virtconsole,chardev=hvc0",
            "-serial", f"file:{self.serial_log}",
            "-monitor", f"unix:{self.monitor},server=on,wait=off",
        ]
        self.started = time.monotonic()
        self.process = subprocess.Popen(command, stdin=subprocess.DEVNULL,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def accel(self) -> list[str]:
        """TCG, or KVM with OUTPOST_QEMU_ACCEL=kvm on a host that gives it to this guest (same
        architecture, /dev/kvm usable). Not the default: on the nested-virtualisation CI
        machine /dev/kvm exists but fails this guest ("failed to set MSR 0x10a" with
        `-cpu host`, a KVM emulation failure in real-mode boot code without it)."""
        same_arch = (self.arm64_cmdline is None) == (platform.machine() == "x86_64")
        if (os.environ.get("OUTPOST_QEMU_ACCEL") == "kvm" and same_arch
                and os.access("/dev/kvm", os.R_OK | os.W_OK)):
            return ["-accel", "kvm", "-cpu", "host"]
        return ["-accel", "tcg"]

    def reports(self) -> list[dict[str, str]]:
        """Every boot report so far, oldest first."""
        if not self.console_log.exists():
            return []
        text = self.console_log.read_text(errors="replace")
        return [dict(item.split("=", 1) for item in m.group(1).split() if "=" in item)
                for m in _REPORT.finditer(text)]

    def wait_report(self, count: int, timeout: float) -> dict[str, str]:
        """Wait for the `count`-th boot report and return it.

        A kernel that stops printing for EARLY_STALL seconds before it has started user
        space (the emulator's fault, not the image's) is reset, at most MAX_EARLY_STALLS
        times per machine; a stall after that point is the image's and fails the test.
        """
        deadline = time.monotonic() + timeout
        size, changed = -1, time.monotonic()
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise RuntimeError(f"qemu exited: {self.process.stderr.read().decode()[-2000:]}"
                                   if self.process.stderr else "qemu exited")
            found = self.reports()
            if len(found) >= count:
                return found[count - 1]
            log = self._current_boot_log()
            if len(log) != size:
                size, changed = len(log), time.monotonic()
            elif (time.monotonic() - changed > EARLY_STALL and USER_SPACE not in log
                  and self.early_stalls < MAX_EARLY_STALLS):
                self.early_stalls += 1
                print(f"\nkernel stalled early in boot ({log[-200:]!r}): resetting the VM")
                self.command("system_reset")
                size, changed = -1, time.monotonic()
            time.sleep(1.0)
        tail = self.serial_log.read_text(errors="replace")[-4000:] if self.serial_log.exists() \
            else ""
        raise TimeoutError(f"no boot report #{count} in {timeout:.0f} s; serial log:\n{tail}")

    def wait_report_where(self, after: int, wanted: Callable[[dict[str, str]], bool],
                          timeout: float) -> tuple[int, dict[str, str]]:
        """Wait for a boot report past the first `after` ones that `wanted` accepts; returns its
        number and the report. For boots that may end before their report (a slot that fails
        its health check reboots at once), so reports cannot be counted in advance."""
        deadline = time.monotonic() + timeout
        while True:
            found = self.reports()
            for number, report in enumerate(found[after:], start=after + 1):
                if wanted(report):
                    return number, report
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no wanted boot report past #{after} in {timeout:.0f} s; "
                                   f"reports: {found[after:]}")
            self.wait_report(len(found) + 1, remaining)

    def wait_serial(self, text: str, offset: int, timeout: float) -> int:
        """Wait until `text` appears in the serial log past byte `offset`; returns where."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise RuntimeError("qemu exited")
            if self.serial_log.exists():
                with self.serial_log.open("rb") as log:
                    log.seek(offset)
                    found = log.read().find(text.encode())
                if found >= 0:
                    return offset + found
            time.sleep(0.5)
        raise TimeoutError(f"no {text!r} on the serial port in {timeout:.0f} s")

    def _current_boot_log(self) -> str:
        """The serial log since the current boot's latest start: GRUB's slot line, or the
        kernel's first line after it. From GRUB's line, a machine that stalls before the
        kernel prints anything is seen as stalled early too (TCG has hung there after a
        reboot, with the previous boot's user space the last thing in the log)."""
        if not self.serial_log.exists():
            return ""
        text = self.serial_log.read_text(errors="replace")
        return text[max(text.rfind(KERNEL_START), text.rfind(GRUB_SLOT), 0):]

    def ssh(self, key: Path, command: str, stdin: IO[bytes] | None = None,
            timeout: float = 1200.0) -> subprocess.CompletedProcess[str]:
        """Run `command` as root in the guest (its sshd, with the key the test put on the boot
        partition as authorized_keys)."""
        return subprocess.run(
            self.ssh_command(key, command),
            stdin=stdin if stdin is not None else subprocess.DEVNULL, capture_output=True,
            timeout=timeout, check=False, text=True)

    def ssh_command(self, key: Path, command: str) -> list[str]:
        return ["ssh", "-i", str(key), "-p", str(self.ssh_port), "-o", "BatchMode=yes",
                "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
                "-o", "ConnectTimeout=120", "-o", "LogLevel=ERROR", "root@127.0.0.1", command]

    def upload(self, key: Path, path: Path, name: str) -> str:
        """Copy a file into the guest's /var/cache/outpost-update/; returns its path there."""
        target = f"/var/cache/outpost-update/{name}"
        with path.open("rb") as source:
            result = self.ssh(key, f"mkdir -p /var/cache/outpost-update && cat > {target}",
                              stdin=source)
        if result.returncode != 0:
            raise RuntimeError(f"upload of {path} failed: {result.stderr}")
        return target

    def update_status(self, key: Path) -> dict[str, Any]:
        """`outpost update status --json` in the guest."""
        result = self.ssh(key, "outpost update status --json")
        if result.returncode != 0:
            raise RuntimeError(f"outpost update status failed: {result.stderr}")
        return cast(dict[str, Any], json.loads(result.stdout))

    def command(self, line: str) -> None:
        """One human-monitor command (system_reset, system_powerdown, quit)."""
        with socket.socket(socket.AF_UNIX) as sock:
            sock.connect(str(self.monitor))
            sock.sendall(line.encode() + b"\n")
            time.sleep(0.5)

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        try:
            self.command("quit")
            self.process.wait(20)
        except (OSError, subprocess.TimeoutExpired):
            self.process.kill()
            self.process.wait(10)


def prepare_disk(image: Path, work: Path, config: str | None, grow_mib: int) -> Path:
    """A copy of `image` in `work` (disk.img), `grow_mib` larger (the data partition grows into
    it), with `config` (unless None) as outpost.toml and a new SSH key (`work`/key) as root's
    authorized_keys on its boot partition, both imported on the first boot. Returns the disk."""
    disk = work / "disk.img"
    subprocess.run(["cp", "--sparse=always", str(image), str(disk)], check=True)
    with disk.open("r+b") as handle:
        handle.truncate(disk.stat().st_size + (grow_mib << 20))
    if config is not None:
        (work / "outpost.toml").write_text(config)
        fat_put(disk, work / "outpost.toml", "outpost.toml")
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(work / "key")],
                   check=True)
    fat_put(disk, work / "key.pub", "authorized_keys")
    return disk


def fat_put(image: Path, source: Path, name: str) -> None:
    """Copy a file onto the image's boot partition (mtools, no mount)."""
    subprocess.run(["mcopy", "-o", "-i", f"{image}@@{BOOT_PARTITION_OFFSET}", str(source),
                    f"::/{name}"], check=True)


def fat_mkdir(image: Path, name: str) -> None:
    """Make a folder on the image's boot partition."""
    subprocess.run(["mmd", "-i", f"{image}@@{BOOT_PARTITION_OFFSET}", f"::/{name}"], check=True)


def fat_get(image: Path, name: str, target: Path) -> None:
    """Copy a file off the image's boot partition."""
    subprocess.run(["mcopy", "-o", "-i", f"{image}@@{BOOT_PARTITION_OFFSET}", f"::/{name}",
                    str(target)], check=True)


def fat_list(image: Path) -> list[str]:
    """The file names in the boot partition's top directory."""
    out = subprocess.run(["mdir", "-b", "-i", f"{image}@@{BOOT_PARTITION_OFFSET}", "::/"],
                         check=True, capture_output=True, text=True).stdout
    return [line.rstrip("/").rsplit("/", 1)[-1] for line in out.split()]


def fat_read(image: Path, name: str) -> str:
    """A file of the boot partition as text."""
    return subprocess.run(["mtype", "-i", f"{image}@@{BOOT_PARTITION_OFFSET}", f"::/{name}"],
                          check=True, capture_output=True, text=True).stdout
