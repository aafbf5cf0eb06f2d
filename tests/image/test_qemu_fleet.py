"""A device's life with its fleet, in one QEMU machine (amd64 image, software emulation): a
freshly flashed card with nothing on its boot partition but a batch's provisioning files (no
outpost.toml) enrolls on its first boot, takes a configuration from the cloud, is updated by
the cloud into slot B and keeps it, and comes back by itself from a broken update.

The cloud is on the host (tests/outpost/fleet_support.py, tests/image/cloud.py): a real
mosquitto with TLS that requires client certificates and takes their CN as the user name, the
fleet's ACL, the enrollment service, and an HTTPS server of the update bundles; the guest reaches
the broker and the server at GUEST_ADDRESS through the VM's `guestfwd` rules. On the card:
`outpost/provision.toml` naming the fleet CA, the batch certificate and key, the claim token and
the template of the gateway's configuration, the key the cloud signs configurations with, and the
CA of the update server. The gateway's id is made from its machine id (`gateway_id_prefix`).

The tests run in order on the one machine, each on its own assertions (the boots are what cost:
chaining the scenarios spares one first boot per scenario):
1. first boot -> enrolled and online at the cloud on its own certificate; a signed configuration
   with a new forward rule is applied, and the rule carries a message to the cloud;
2. the remote trigger: the cloud publishes an update command, the gateway takes it through the
   uplink, the root runner fetches the bundle over HTTPS, installs it into slot B and reboots;
   the cloud sees the request's progress and the new slot, committed;
3. a broken update (installed with `outpost update install` on the device; its gateway never
   starts) fails its health check and the device comes back on the previous slot by itself.
The broker's retained messages and a persistent session's queued QoS 1 messages survive both
updates. Each test prints what it measured.

The update bundles are made from the built image's root (tests/image/bundles.py): one with a
new build id, one that also carries a drop-in making outpost.service fail.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from cloud_spark.fleet.broker import CloudSession
from cloud_spark.fleet.config_send import send_config
from cloud_spark.fleet.signing import generate_key
from tests.conftest import require
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
from tests.outpost.fleet_support import FleetCloud, fleet_cloud

# One machine for the module: `make image-test` hands a whole file to one worker (loadfile).
pytestmark = [pytest.mark.image, pytest.mark.timeout(3600)]

BOOT_TIMEOUT = 600.0  # TCG on a loaded two-core machine: a boot takes one to three minutes
ROLLBACK_TIMEOUT = 1500.0  # the broken slot's boot, its failed health check, the good slot's boot
TOKEN = "qemu-batch-token"
PREFIX = "plant-"
IDENTITY = "/var/lib/outpost/identity"  # where `outpost enroll` keeps the device's identity
NEW_BUILD = "20990101000000.next"
BROKEN_BUILD = "20990101000001.broken"
BROKEN_DROP_IN = "/usr/lib/systemd/system/outpost.service.d/zz-broken.conf"
QUEUE_CLIENT = "image-test-queue"
QUEUE_TOPIC = "image/update/queue"
RETAINED_TOPIC = "image/update/retained"
REQUEST_ID = "image-test-next"

PROVISION = f"""\
cloud = "{GUEST_ADDRESS}:{MQTT_PORT}"
ca_file = "fleet-ca.pem"
batch_cert = "batch.pem"
batch_key = "batch.key"
token = "{TOKEN}"
gateway_id_prefix = "{PREFIX}"
template = "outpost.toml.in"
retry_initial = 2.0
retry_max = 10.0
"""

# The batch's template: `outpost enroll` fills in the placeholders. Updates come in through
# the uplink's inbound rule; the update server's CA is one of the provisioning files.
TEMPLATE = f"""\
gateway_id = "{{gateway_id}}"

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
client_id = "{{gateway_id}}"
backoff_initial = 1.0
backoff_max = 10.0
tls = {{ ca_file = "{{ca_file}}", cert_file = "{{cert_file}}", key_file = "{{key_file}}" }}

[[uplink.inbound]]
filter = "outpost-cmd/{{gateway_id}}/#"

[certificate]
cert_file = "{{cert_file}}"
key_file = "{{key_file}}"
ca_file = "{{ca_file}}"

[remote_config]
enabled = true
keyring = "keyring"
health_deadline = 300

[remote_update]
enabled = true
ca_file = "update-ca.pem"
"""

# What the cloud sends later: the same file (the identity where enrollment put it) and a
# forward rule to the cloud.
FORWARD = """
[[uplink.forward]]
filter = "fleet/#"
remote = "cloud"
topic = { strip = "fleet/", prefix = "fleet/{gateway_id}/" }
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
def cloud(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FleetCloud]:
    require("mosquitto")
    require("openssl")
    with fleet_cloud(tmp_path_factory.mktemp("cloud"), server_ips=(GUEST_ADDRESS,)) as running:
        running.add_token(TOKEN, uses=1, allow=[f"{PREFIX}*"])
        yield running


@pytest.fixture(scope="module")
def server(update_bundles: Bundles,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[BundleServer]:
    """The HTTPS server of the bundles, on the host."""
    with bundle_server(update_bundles.new.parent, tmp_path_factory.mktemp("https")) as running:
        yield running


@pytest.fixture(scope="module")
def signing_key(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return generate_key(tmp_path_factory.mktemp("keys"), "fleet-1")


@pytest.fixture(scope="module")
def reports() -> Reports:
    """Every update report the cloud receives (one gateway in this module)."""
    return Reports("outpost-status/+/update")


@pytest.fixture(scope="module")
def deploy(cloud: FleetCloud, reports: Reports) -> Iterator[CloudSession]:
    """Connected as the fleet's deploy user, subscribed to the gateways' status (their update
    reports included) and to what the forward rule sends."""
    with CloudSession(cloud.options("deploy"), on_message=reports.add) as session:
        session.subscribe("outpost-status/+", "outpost-status/+/update", "fleet/#")
        yield session


@pytest.fixture(scope="module")
def vm(amd64_image: BuiltImage, cloud: FleetCloud, server: BundleServer,
       signing_key: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Qemu]:
    """The image with only the provisioning files on its boot partition, booted."""
    work = tmp_path_factory.mktemp("qemu-fleet")
    disk = prepare_disk(amd64_image.image, work, None, 64)
    files = work / "provisioning"
    files.mkdir()
    batch_cert, batch_key = cloud.pki.clients["batch-1"]
    (files / "provision.toml").write_text(PROVISION)
    (files / "outpost.toml.in").write_text(TEMPLATE)
    shutil.copy(cloud.pki.ca, files / "fleet-ca.pem")
    shutil.copy(batch_cert, files / "batch.pem")
    shutil.copy(batch_key, files / "batch.key")
    shutil.copy(server.ca_file, files / "update-ca.pem")
    fat_mkdir(disk, "outpost")
    fat_mkdir(disk, "outpost/keyring")
    for path in sorted(files.iterdir()):
        fat_put(disk, path, f"outpost/{path.name}")
    fat_put(disk, signing_key[1], f"outpost/keyring/{signing_key[1].name}")
    machine = Qemu(disk, work, guest_forwards=[(GUEST_ADDRESS, MQTT_PORT, cloud.broker.port),
                                               (GUEST_ADDRESS, HTTPS_PORT, server.port)])
    machine.start()
    yield machine
    machine.stop()


def _online(latest: dict[str, bytes]) -> list[str]:
    return [topic.rsplit("/", 1)[1] for topic, payload in latest.items()
            if topic.startswith(f"outpost-status/{PREFIX}") and payload == b"online"]


@pytest.fixture(scope="module")
def gateway(vm: Qemu, deploy: CloudSession) -> str:
    """The enrolled gateway's id, once it is online at the cloud (first boot)."""
    assert deploy.wait(lambda m: bool(_online(m)), BOOT_TIMEOUT * 2), (
        f"not online at the cloud; boot reports: {vm.reports()}; cloud saw "
        f"{sorted(deploy.latest)}")
    [found] = _online(deploy.latest)
    return found


def test_a_fresh_card_enrolls_and_applies_a_remote_configuration(
        vm: Qemu, cloud: FleetCloud, deploy: CloudSession, gateway: str,
        signing_key: tuple[Path, Path]) -> None:
    # 1. First boot: enrolled, and outpost back on the configuration made for it.
    enrolled_s = time.monotonic() - vm.started
    report = vm.wait_report(1, BOOT_TIMEOUT)
    assert gateway == PREFIX + report["machine_id"][:12], report
    assert "outpost/:_imported" in report["firstboot"], report
    assert cloud.registry.data["devices"][gateway]["token"] == TOKEN[:8]
    key = vm.workdir / "key"
    facts = json.loads(vm.ssh(key, "cat /var/lib/outpost/enrolled.json").stdout)
    assert facts["gateway_id"] == gateway and facts["attempts"] >= 1
    assert vm.ssh(key, "systemctl is-active outpost-enroll").stdout.strip() == "active"
    # The batch's files left the boot partition; the device key never left the device.
    assert vm.ssh(key, "ls /boot/firmware/outpost").returncode != 0
    mode = vm.ssh(key, f"stat -c %a:%U {IDENTITY}/device.key").stdout.strip()
    assert mode == "600:outpost"
    # The first boot's health check still marked the slot good (outpost restarted in it).
    assert (report["health"], report["update"]) == ("active", "A:committed"), report

    # 2. A configuration from the cloud: the same file and a forward rule.
    config = TEMPLATE.replace("{gateway_id}", gateway).replace(
        "{cert_file}", f"{IDENTITY}/device.pem").replace(
        "{key_file}", f"{IDENTITY}/device.key").replace(
        "{ca_file}", f"{IDENTITY}/fleet-ca.pem") + FORWARD
    [result] = send_config(deploy, [gateway], config, signing_key[0], 1, "qemu-forward",
                           BOOT_TIMEOUT)
    assert result.state == "applied", (result.line(), vm.ssh(
        key, "journalctl -u outpost --no-pager -o cat | tail -40").stdout)
    running = vm.ssh(key, "cat /etc/outpost/outpost.toml").stdout
    assert 'filter = "fleet/#"' in running

    # 3. The new rule carries a message from the gateway's broker to the cloud.
    mqtt_tool.publish("127.0.0.1", vm.port, "fleet/line-1/temperature", [b"21.5"])
    topic = f"fleet/{gateway}/line-1/temperature"
    assert deploy.wait(lambda m: m.get(topic) == b"21.5", BOOT_TIMEOUT), sorted(deploy.latest)
    print(f"\nfirst boot -> enrolled and online at the cloud: {enrolled_s:.0f} s "
          f"(enrollment itself {facts['seconds']:.1f} s, {facts['attempts']} attempt(s)); "
          f"configuration sent -> applied: {result.finished_s:.1f} s ({vm.accel()[1]})")


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
        vm: Qemu, gateway: str, deploy: CloudSession, reports: Reports,
        update_bundles: Bundles, server: BundleServer) -> None:
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
    # The health check records the running slot after the boot: the report then has it.
    _, before = reports.wait(lambda r: (r["running"]["slot"] == "A"
                                        and r["running"]["committed"] is True),
                             BOOT_TIMEOUT, "of slot A running")
    assert before["gateway_id"] == gateway and before["request"] is None, before
    # The command is not retained: the uplink's inbound subscription must be in place (the
    # configuration applied by the test before restarted outpost: its latest start's).
    subscribed = vm.ssh(key, "timeout 600 sh -c 'until journalctl -u outpost.service -o cat"
                        " --since \"$(systemctl show -p ActiveEnterTimestamp --value "
                        "outpost.service)\" | grep -q \"inbound subscribed\"; do sleep 1; done'")
    assert subscribed.returncode == 0, subscribed
    serial_before = vm.serial_log.stat().st_size

    sha256 = hashlib.sha256(update_bundles.new.read_bytes()).hexdigest()
    command = {"url": server.url(update_bundles.new.name), "sha256": sha256, "id": REQUEST_ID}
    published = time.monotonic()
    deploy.publish(f"outpost-cmd/{gateway}/update", json.dumps(command).encode())
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
    boot_log = vm.serial_log.read_text(errors="replace")[serial_before:]
    assert "outpost: root slot B" in boot_log
    runner = vm.ssh(key, "journalctl -b -1 -u outpost-update.service --no-pager -o cat").stdout
    assert f"request {REQUEST_ID}: installed {update_bundles.new_version}" in runner, runner

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
    # The enrolled identity and the applied configuration live on the data partition: the
    # gateway is back online at the cloud under the same id from the new slot.
    assert deploy.wait(lambda m: m.get(f"outpost-status/{gateway}") == b"online", BOOT_TIMEOUT)
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
