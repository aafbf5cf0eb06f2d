"""Field updates: install a signed RAUC bundle, report the root slots, decide a boot's health.

How this works: RAUC (`rauc`, configured by the image's /etc/rauc/system.conf) does the update
itself: it checks the bundle's signature against the keyring and its compatible against the
device, writes the root file system into the inactive slot and makes that slot the one the next
boot tries (image/README.md, "Updating devices"). This module is outpost's side of it:

- `install`: a bundle from a file or an HTTPS URL (checked against a CA file; a download goes
  to a `.part` file on the data partition, is refused when it cannot fit or stops short of its
  announced length, and is checked against a sha256 when one is given). Before RAUC touches a
  slot, `rauc info` with the device's keyring must accept the signature and the bundle's
  compatible must be the device's, so a wrong, corrupt or foreign bundle leaves both slots
  as they are. Then `rauc install` (its progress lines go to the caller) and the reboot: with
  the Raspberry Pi firmware's tryboot flag when the boot selection is tryboot. The outcome of
  the last install is kept in a small JSON file next to RAUC's status file.
- `read_status`: `rauc status --detailed --output-format=json`, summarised: the booted slot,
  the version in each slot, whether the booted slot is committed, the last install.
- `self_check` / `health_check`: after boot, outpost.service is active (it reported READY),
  the store opens, a listener answers an MQTT CONNECT, and the configured uplink's broker is
  reachable or reported unreachable; within the deadline the booted slot is marked good,
  otherwise bad and the device reboots, and the boot selection falls back to the previous
  slot (outpost-health.service runs this).
"""

from __future__ import annotations

import configparser
import json
import os
import socket
import sqlite3
import ssl
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from gateway.base.hostport import parse_host_port
from gateway.broker.codec import decode, encode
from gateway.broker.codec.packets import ConnAck, Connect
from outpost.config import Config
from outpost.update_fetch import Progress, UpdateError, fetch, file_sha256
from storage.sqlite import admin

__all__ = ["BundleInfo", "Check", "Device", "Progress", "SlotStatus", "UpdateError",
           "UpdateStatus", "bundle_info", "check_bundle", "check_not_older", "fetch",
           "file_sha256", "format_status", "health_check", "install", "read_status",
           "reboot_into_new_slot", "release_version", "running_version", "self_check",
           "summarise", "version_key"]

RELEASE_FILE = Path("/usr/lib/outpost/release")  # the image's version (image/build.sh)



@dataclass(frozen=True)
class Device:
    """Where RAUC and the update's own files are on this machine (the image's defaults)."""

    rauc: str = "rauc"
    system_conf: Path = Path("/etc/rauc/system.conf")
    download_dir: Path = Path("/var/cache/outpost-update")
    download_attempts: int = 6  # connections per download before giving up (the part stays)
    retry_delay: float = 2.0  # seconds before the first retry, doubling
    release_file: Path = RELEASE_FILE
    last_install: Path = Path("/var/lib/rauc/outpost-last-install.json")

    def system(self) -> configparser.ConfigParser:
        """RAUC's system.conf (a GLib key file; configparser reads that syntax)."""
        parser = configparser.ConfigParser(interpolation=None)
        try:
            with self.system_conf.open(encoding="utf-8") as f:
                parser.read_file(f)
        except OSError as exc:
            raise UpdateError(f"cannot read RAUC's {self.system_conf}: {exc.strerror}") from None
        return parser

    def compatible(self) -> str:
        return self.system().get("system", "compatible", fallback="")

    def keyring(self) -> Path:
        return Path(self.system().get("keyring", "path", fallback="/etc/rauc/keyring.pem"))

    def uses_tryboot(self) -> bool:
        backend = self.system().get("handlers", "bootloader-custom-backend", fallback="")
        return backend.endswith("rauc-tryboot")


@dataclass(frozen=True)
class BundleInfo:
    compatible: str
    version: str
    build: str


# -- checking and installing ---------------------------------------------------------------

def bundle_info(path: Path, device: Device) -> BundleInfo:
    """The bundle's manifest, after `rauc info` verified its signature with the keyring."""
    result = subprocess.run(
        [device.rauc, "info", f"--keyring={device.keyring()}", "--output-format=json", str(path)],
        capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise UpdateError(f"{path}: refused: {_rauc_error(result.stderr)}")
    data = json.loads(result.stdout)
    return BundleInfo(str(data.get("compatible", "")), str(data.get("version", "")),
                      str(data.get("build", "")))


def check_bundle(path: Path, device: Device) -> BundleInfo:
    """Raise UpdateError unless the bundle is signed for this device and made for it."""
    info = bundle_info(path, device)
    ours = device.compatible()
    if info.compatible != ours:
        raise UpdateError(f"{path}: refused: the bundle is for '{info.compatible}', "
                          f"this device is '{ours}'")
    return info


def _rauc_error(stderr: str) -> str:
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    errors = [line for line in lines if "rror" in line or "failed" in line.lower()]
    return (errors or lines or ["rauc failed without a message"])[-1]


def install(source: str, device: Device, progress: Progress, ca_file: Path | None = None,
            sha256: str | None = None, reboot: bool = True,
            allow_downgrade: bool = False) -> BundleInfo:
    """Fetch (if a URL), check, install into the inactive slot and (by default) reboot into it.

    A bundle older than the running version is refused unless `allow_downgrade`.
    Raises UpdateError with the reason; the booted slot is never touched.
    """
    record: dict[str, Any] = {"source": source, "started": _now(), "result": "failed"}
    downloaded = False
    try:
        if "://" in source:
            path = fetch(source, device.download_dir, ca_file, sha256, progress,
                         attempts=device.download_attempts, retry_delay=device.retry_delay)
            downloaded = True
        else:
            path = Path(source)
            if not path.is_file():
                raise UpdateError(f"{source}: no such file")
            if sha256 is not None and file_sha256(path) != sha256.lower():
                raise UpdateError(f"{source}: sha256 is not the expected {sha256}")
        info = check_bundle(path, device)
        record["version"] = info.version
        check_not_older(info.version, running_version(device), allow_downgrade, progress)
        progress(f"installing {info.version} ({info.compatible})")
        _run_rauc_install(path, device, progress)
        record["result"] = "installed"
        record["slot"] = _installed_slot(device)
    except UpdateError as exc:
        record["error"] = str(exc)
        raise
    finally:
        record["finished"] = _now()
        if device.system_conf.exists():  # a device with RAUC, not a machine trying the command
            _write_record(device.last_install, record)
        if downloaded:
            path.unlink(missing_ok=True)
    if reboot:
        reboot_into_new_slot(device, progress)
    return info


def version_key(version: str) -> tuple[tuple[tuple[int, int | str], ...], str] | None:
    """`0.2.0+20261125143620.69e5662` -> ((0, 2, 0), "20261125143620.69e5662") for comparing
    (numbers as numbers; the build, a UTC time stamp first, as text); None when empty."""
    release, _, build = version.strip().partition("+")
    if not release:
        return None
    parts = tuple((0, int(p)) if p.isdigit() else (1, p)
                  for p in release.replace("-", ".").split("."))
    return parts, build


def running_version(device: Device) -> str:
    """The version running now: the booted slot's bundle, else the image's release file
    (a freshly flashed slot has no bundle); "" when neither says."""
    try:
        status = read_status(device)
        booted = next((s for s in status.slots if s.state == "booted"), None)
        if booted is not None and booted.version:
            return booted.version
    except (UpdateError, ValueError, OSError):
        pass
    return release_version(device.release_file) or ""


def release_version(path: Path = RELEASE_FILE) -> str | None:
    """The image's version (VERSION+BUILD of its release file), None off the image."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return None
    facts = dict(line.split("=", 1) for line in text.splitlines() if "=" in line)
    version = facts.get("VERSION", "")
    build = facts.get("BUILD", "")
    return f"{version}+{build}" if version and build else version or None


def check_not_older(bundle: str, running: str, allow_downgrade: bool,
                    progress: Progress) -> None:
    """Refuse a bundle older than the running version unless the downgrade is allowed."""
    new, old = version_key(bundle), version_key(running)
    if new is None or old is None:
        progress(f"cannot compare the bundle's version {bundle!r} with the running "
                 f"{running!r}: installing")
        return
    if new >= old:
        return
    if not allow_downgrade:
        raise UpdateError(f"refused: the bundle's version {bundle} is older than the running "
                          f"{running}; a downgrade must be allowed explicitly "
                          "(allow_downgrade in the command, --allow-downgrade)")
    progress(f"downgrade from {running} to {bundle}: allowed by the command")


def reboot_into_new_slot(device: Device, progress: Progress) -> None:
    """Reboot after an install (with the firmware's tryboot flag where that selects the slot)."""
    progress("rebooting into the new slot")
    argument = ["0 tryboot"] if device.uses_tryboot() else []
    subprocess.run(["systemctl", "reboot", *argument], check=False)


def _run_rauc_install(path: Path, device: Device, progress: Progress) -> None:
    process = subprocess.Popen([device.rauc, "install", str(path)], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
    assert process.stdout is not None
    lines: list[str] = []
    for raw in process.stdout:
        if line := raw.strip():
            lines.append(line)
            progress(line)
    if process.wait() != 0:
        raise UpdateError(f"rauc install failed: {_rauc_error(chr(10).join(lines))}")


def _installed_slot(device: Device) -> str:
    """The boot name of the slot the next boot tries (the one just written), or "" when RAUC
    cannot say: it only labels the record, so it never fails an install."""
    try:
        status = read_status(device)
    except (UpdateError, ValueError, OSError):
        return ""
    return next((s.bootname for s in status.slots if s.name == status.primary), "")


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _write_record(path: Path, record: dict[str, Any]) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(record, sort_keys=True) + "\n", encoding="utf-8")
        tmp.replace(path)
    except OSError:
        pass  # the record is informative; a failed write must not hide the install's outcome


# -- status ------------------------------------------------------------------------------------

@dataclass
class SlotStatus:
    name: str
    bootname: str
    state: str  # booted | active | inactive
    boot_status: str  # good | bad | ""
    version: str  # the version of the bundle last installed into it ("" for the flashed slot)


@dataclass
class UpdateStatus:
    compatible: str
    booted: str
    primary: str
    committed: bool
    slots: list[SlotStatus] = field(default_factory=list)
    last_install: dict[str, Any] | None = None
    # What became of the last installed slot: "booted" (running from it), "pending" (not
    # booted yet), "failed" (it failed its trial boot and the device fell back), "" (unknown).
    last_install_boot: str = ""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def summarise(data: dict[str, Any], last_install: dict[str, Any] | None) -> UpdateStatus:
    """`rauc status --detailed --output-format=json` as an UpdateStatus."""
    slots: list[SlotStatus] = []
    for entry in data.get("slots", []):
        for name, slot in entry.items():
            bundle = (slot.get("slot_status") or {}).get("bundle") or {}
            slots.append(SlotStatus(name, str(slot.get("bootname") or ""),
                                    str(slot.get("state") or ""),
                                    str(slot.get("boot_status") or ""),
                                    str(bundle.get("version") or "")))
    # The slot whose state is "booted": the top-level "booted" field is a boot name in some
    # RAUC versions and a device path in others.
    booted_slot = next((s for s in slots if s.state == "booted"), None)
    booted = booted_slot.bootname if booted_slot else str(data.get("booted") or "")
    primary = str(data.get("boot_primary") or "")
    committed = (booted_slot is not None and booted_slot.boot_status == "good"
                 and primary == booted_slot.name)
    return UpdateStatus(str(data.get("compatible") or ""), booted, primary, committed, slots,
                        last_install, _last_install_boot(slots, booted, last_install))


def _last_install_boot(slots: list[SlotStatus], booted: str,
                       last_install: dict[str, Any] | None) -> str:
    if not last_install or last_install.get("result") != "installed":
        return ""
    target = next((s for s in slots if s.bootname and s.bootname == last_install.get("slot")),
                  None)
    if target is None:
        return ""
    if target.bootname == booted:
        return "booted"
    # The slot is marked bad after it was written (its health check failed, or the boot
    # selection used up its one try): the device runs the previous slot.
    return "failed" if target.boot_status == "bad" else "pending"


def format_status(status: UpdateStatus, as_json: bool = False) -> str:
    """`outpost update status` output: JSON, or a few lines for people."""
    if as_json:
        return json.dumps(status.as_dict(), indent=2, sort_keys=True)
    lines = [f"booted slot: {status.booted or '?'} "
             f"({'committed' if status.committed else 'NOT committed: on trial or marked bad'})",
             f"next boot:   {status.primary or '?'}   compatible: {status.compatible}"]
    for slot in status.slots:
        health = slot.boot_status or "-"
        lines.append(f"  {slot.bootname or slot.name}: {slot.state:<8} {health:<4} "
                     f"{slot.version or '(as flashed)'}")
    last = status.last_install
    if last:
        outcome = last.get("result", "?") + (f": {last['error']}" if last.get("error") else "")
        if last.get("slot"):
            outcome += f" into {last['slot']}"
        outcome += {"booted": ", booted",
                    "pending": ", not booted yet",
                    "failed": f", FAILED its trial boot: back on {status.booted}"}.get(
                        status.last_install_boot, "")
        lines.append(f"last install: {last.get('finished', '?')} {last.get('version', '')} "
                     f"from {last.get('source', '?')}: {outcome}")
    else:
        lines.append("last install: none")
    return "\n".join(lines)


def read_status(device: Device) -> UpdateStatus:
    result = subprocess.run([device.rauc, "status", "--detailed", "--output-format=json"],
                            capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise UpdateError(f"rauc status failed: {_rauc_error(result.stderr)}")
    try:
        last = json.loads(device.last_install.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        last = None
    return summarise(json.loads(result.stdout), last)


# -- health ------------------------------------------------------------------------------------

@dataclass
class Check:
    name: str
    ok: bool
    detail: str


def self_check(config: Config, state_dir: Path | None, timeout: float = 5.0) -> list[Check]:
    """The store opens, a listener answers an MQTT CONNECT, the uplink's broker is reachable
    (or reported unreachable, which is not a failure: the outbox holds the data)."""
    return [_check_store(config, state_dir), _check_listener(config, timeout),
            _check_uplink(config, timeout)]


def _check_store(config: Config, state_dir: Path | None) -> Check:
    directory = state_dir or config.storage.state_dir
    if config.storage.durability == "memory" or directory is None:
        return Check("store", True, "in memory (nothing on disk to open)")
    try:
        with admin.reading(directory) as conn:
            row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    except (OSError, sqlite3.Error) as exc:
        return Check("store", False, f"{admin.db_path(directory)}: {exc}")
    return Check("store", True, f"{admin.db_path(directory)} schema {row[0] if row else '?'}")


def _check_listener(config: Config, timeout: float) -> Check:
    tcp = [listener for listener in config.listeners if listener.type in ("tcp", "tls")]
    if not tcp:
        return Check("mqtt", False, "no TCP or TLS listener to ask")
    listener = tcp[0]
    host, port = parse_host_port(listener.bind)
    host = {"0.0.0.0": "127.0.0.1", "": "127.0.0.1", "::": "::1"}.get(host, host)
    try:
        with _connected(host, port, timeout, tls=listener.type == "tls") as sock:
            sock.sendall(encode(Connect(client_id=f"outpost-health-{os.getpid()}",
                                        keep_alive=10), 4))
            ack = _read_packet(sock)
    except (OSError, ValueError) as exc:
        return Check("mqtt", False, f"{listener.bind}: {exc}")
    if not isinstance(ack, ConnAck):
        return Check("mqtt", False, f"{listener.bind}: answered {type(ack).__name__}")
    # Any CONNACK, even "not authorized", proves the broker is up and answering.
    return Check("mqtt", True, f"{listener.bind}: CONNACK {ack.reason_code}")


def _check_uplink(config: Config, timeout: float) -> Check:
    if not config.uplink.enabled or not config.uplink.remotes:
        return Check("uplink", True, "not configured")
    errors = []
    for remote in config.uplink.remotes:
        for address in remote.addresses:
            host, port = parse_host_port(address)
            try:
                with socket.create_connection((host, port), timeout=timeout):
                    return Check("uplink", True, f"{remote.name} {address}: connects")
            except OSError as exc:
                errors.append(f"{address}: {exc.strerror or exc}")
    return Check("uplink", True, "unreachable (the outbox keeps the data): " + "; ".join(errors))


@contextmanager
def _connected(host: str, port: int, timeout: float, tls: bool) -> Iterator[socket.socket]:
    sock = socket.create_connection((host, port), timeout=timeout)
    try:
        if tls:  # a local self-check: the listener's certificate is not what is being checked
            context = ssl.create_default_context()
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
            sock = context.wrap_socket(sock, server_hostname=host)
        yield sock
    finally:
        sock.close()


def _read_packet(sock: socket.socket) -> object:
    buf = b""
    while True:
        got = decode(buf, 4)
        if isinstance(got, tuple):
            return got[0]
        chunk = sock.recv(4096)
        if not chunk:
            raise ValueError("connection closed before CONNACK")
        buf += chunk


def _check_service(unit: str = "outpost.service") -> Check:
    """The unit is active: with Type=notify, it reported READY (and has not failed since)."""
    result = subprocess.run(["systemctl", "is-active", unit], capture_output=True, text=True,
                            check=False)
    state = result.stdout.strip() or result.stderr.strip()
    return Check("service", result.returncode == 0, f"{unit}: {state}")


def health_check(config: Config, state_dir: Path | None, device: Device, deadline: float,
                 progress: Progress, reboot: bool = True) -> bool:
    """Repeat the self-check until it passes, `deadline` seconds pass, or the service has
    failed for good (systemd stopped restarting it); then mark the booted slot good, or bad and
    reboot (the boot selection then falls back to the other slot)."""
    end = time.monotonic() + deadline
    while True:
        service = _check_service()
        checks = [service, *self_check(config, state_dir)]
        if all(check.ok for check in checks) or time.monotonic() >= end:
            break
        if service.detail.endswith(": failed"):
            break  # systemd gave up restarting it (start limit): waiting changes nothing
        time.sleep(1.0)  # the service may still be opening its listeners
    for check in checks:
        progress(f"{check.name}: {'ok' if check.ok else 'FAILED'}: {check.detail}")
    good = all(check.ok for check in checks)
    mark = "mark-good" if good else "mark-bad"
    result = subprocess.run([device.rauc, "status", mark, "booted"], capture_output=True,
                            text=True, check=False)
    if result.returncode != 0:
        progress(f"rauc status {mark} failed: {_rauc_error(result.stderr)}")
    else:
        progress(f"booted slot marked {'good' if good else 'bad'}")
    if not good and reboot:
        progress("rebooting: the boot selection falls back to the previous slot")
        subprocess.run(["systemctl", "reboot"], check=False)
    return good
