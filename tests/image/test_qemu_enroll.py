"""A freshly flashed amd64 image with nothing on its boot partition but a batch's provisioning
files (no outpost.toml) enrolls on its first boot and then takes a configuration from the cloud.

The cloud is on the host (tests/outpost/fleet_support.py): a real mosquitto with TLS that
requires client certificates and takes their CN as the user name, the fleet's ACL, and the
enrollment service; the guest reaches the broker at GUEST_ADDRESS through the VM's `guestfwd`.
On the card: `outpost/provision.toml` naming the fleet CA, the batch certificate and key, the
claim token and the template of the gateway's configuration, and the key the cloud signs
configurations with. The gateway's id is made from its machine id (`gateway_id_prefix`).

The test waits for the gateway's id online at the cloud (first boot -> enrolled and running on
its own certificate), then signs and sends a configuration with a new forward rule, waits for
the gateway's report that it was applied, and proves the rule works: a message published on the
gateway's broker reaches the cloud. Prints both times.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from cloud_spark.fleet.broker import CloudSession
from cloud_spark.fleet.config_send import send_config
from cloud_spark.fleet.signing import generate_key
from tests.conftest import require
from tests.image import mqtt_tool
from tests.image.cloud import GUEST_ADDRESS
from tests.image.conftest import BuiltImage
from tests.image.vm import Qemu, fat_mkdir, fat_put, prepare_disk
from tests.outpost.fleet_support import FleetCloud, fleet_cloud

pytestmark = [pytest.mark.image, pytest.mark.timeout(2400)]

BOOT_TIMEOUT = 600.0  # TCG on a loaded two-core machine: a boot takes one to three minutes
CLOUD_PORT = 8883  # the cloud broker, on GUEST_ADDRESS
TOKEN = "qemu-batch-token"
PREFIX = "plant-"
IDENTITY = "/var/lib/outpost/identity"  # where `outpost enroll` keeps the device's identity

PROVISION = f"""\
cloud = "{GUEST_ADDRESS}:{CLOUD_PORT}"
ca_file = "fleet-ca.pem"
batch_cert = "batch.pem"
batch_key = "batch.key"
token = "{TOKEN}"
gateway_id_prefix = "{PREFIX}"
template = "outpost.toml.in"
retry_initial = 2.0
retry_max = 10.0
"""

# The batch's template: `outpost enroll` fills in the placeholders.
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
addresses = ["{GUEST_ADDRESS}:{CLOUD_PORT}"]
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
"""

# What the cloud sends later: the same file (the identity where enrollment put it) and a
# forward rule to the cloud.
FORWARD = """
[[uplink.forward]]
filter = "fleet/#"
remote = "cloud"
topic = { strip = "fleet/", prefix = "fleet/{gateway_id}/" }
"""


@pytest.fixture(scope="module")
def cloud(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FleetCloud]:
    require("mosquitto")
    require("openssl")
    with fleet_cloud(tmp_path_factory.mktemp("cloud"), server_ips=(GUEST_ADDRESS,)) as running:
        running.add_token(TOKEN, uses=1, allow=[f"{PREFIX}*"])
        yield running


@pytest.fixture(scope="module")
def signing_key(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return generate_key(tmp_path_factory.mktemp("keys"), "fleet-1")


@pytest.fixture(scope="module")
def vm(amd64_image: BuiltImage, cloud: FleetCloud, signing_key: tuple[Path, Path],
       tmp_path_factory: pytest.TempPathFactory) -> Iterator[Qemu]:
    """The image with only the provisioning files on its boot partition, booted."""
    work = tmp_path_factory.mktemp("qemu-enroll")
    disk = prepare_disk(amd64_image.image, work, None, 64)
    files = work / "provisioning"
    files.mkdir()
    batch_cert, batch_key = cloud.pki.clients["batch-1"]
    (files / "provision.toml").write_text(PROVISION)
    (files / "outpost.toml.in").write_text(TEMPLATE)
    shutil.copy(cloud.pki.ca, files / "fleet-ca.pem")
    shutil.copy(batch_cert, files / "batch.pem")
    shutil.copy(batch_key, files / "batch.key")
    fat_mkdir(disk, "outpost")
    fat_mkdir(disk, "outpost/keyring")
    for path in sorted(files.iterdir()):
        fat_put(disk, path, f"outpost/{path.name}")
    fat_put(disk, signing_key[1], f"outpost/keyring/{signing_key[1].name}")
    machine = Qemu(disk, work, guest_forwards=[(GUEST_ADDRESS, CLOUD_PORT, cloud.broker.port)])
    machine.start()
    yield machine
    machine.stop()


def test_a_fresh_card_enrolls_and_applies_a_remote_configuration(
        vm: Qemu, cloud: FleetCloud, signing_key: tuple[Path, Path]) -> None:
    started = time.monotonic()
    with CloudSession(cloud.options("deploy")) as session:
        session.subscribe("outpost-status/+", "fleet/#")

        def online(latest: dict[str, bytes]) -> list[str]:
            return [topic.rsplit("/", 1)[1] for topic, payload in latest.items()
                    if topic.startswith(f"outpost-status/{PREFIX}") and payload == b"online"]

        # 1. First boot: enrolled, and outpost back on the configuration made for it.
        assert session.wait(lambda m: bool(online(m)), BOOT_TIMEOUT * 2), (
            f"not online at the cloud; boot reports: {vm.reports()}; cloud saw "
            f"{sorted(session.latest)}")
        enrolled_s = time.monotonic() - started
        [gateway] = online(session.latest)
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
        [result] = send_config(session, [gateway], config, signing_key[0], 1, "qemu-forward",
                               BOOT_TIMEOUT)
        assert result.state == "applied", (result.line(), vm.ssh(
            key, "journalctl -u outpost --no-pager -o cat | tail -40").stdout)
        running = vm.ssh(key, "cat /etc/outpost/outpost.toml").stdout
        assert 'filter = "fleet/#"' in running

        # 3. The new rule carries a message from the gateway's broker to the cloud.
        mqtt_tool.publish("127.0.0.1", vm.port, "fleet/line-1/temperature", [b"21.5"])
        topic = f"fleet/{gateway}/line-1/temperature"
        assert session.wait(lambda m: m.get(topic) == b"21.5", BOOT_TIMEOUT), sorted(
            session.latest)
    print(f"\nfirst boot -> enrolled and online at the cloud: {enrolled_s:.0f} s "
          f"(enrollment itself {facts['seconds']:.1f} s, {facts['attempts']} attempt(s)); "
          f"configuration sent -> applied: {result.finished_s:.1f} s ({vm.accel()[1]})")
