"""Enrollment on first contact against a real mosquitto with TLS and client certificates
(`require_certificate true`, `use_identity_as_username true`): a card with only the batch's
provisioning file gets its own certificate and then connects with it; every refusal (a wrong,
expired or used-up token, an id off the allow list, a CSR for another gateway's id, an id
enrolled with another key) is clear and changes nothing; the cloud unreachable in the middle
is retried."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from cloud_spark.fleet.broker import CloudSession
from outpost.enroll import (
    CloudUnavailableError,
    EnrollmentRefusedError,
    enroll,
    exchange,
    load_provisioning,
    tls_context,
)
from outpost.enroll_identity import Identity, derive_gateway_id, make_csr, new_key
from tests.conftest import require
from tests.outpost.fleet_support import (
    FleetCloud,
    fleet_cloud,
    gateway_template,
    provisioning,
)
from tests.support.broker_proc import ROOT, launch
from tests.support.waiting import wait_for


@pytest.fixture
def cloud(tmp_path: Path) -> Iterator[FleetCloud]:
    require("mosquitto")
    require("openssl")
    with fleet_cloud(tmp_path / "cloud") as c:
        yield c


def outpost_enroll(path: Path, state: Path, config: Path | None = None,
                   *extra: str) -> subprocess.CompletedProcess[str]:
    args = [sys.executable, "-m", "outpost", "enroll", "--provisioning", str(path),
            "--state-dir", str(state), *extra]
    if config is not None:
        args += ["--config", str(config)]
    return subprocess.run(args, capture_output=True, text=True, cwd=ROOT, timeout=120,
                          check=False)


def test_a_card_enrolls_then_connects_with_its_own_certificate(cloud: FleetCloud,
                                                               tmp_path: Path) -> None:
    cloud.add_token("batch-token", uses=5, allow=["plant-*"])
    path = provisioning(cloud, tmp_path / "boot", "batch-token", gateway_id="plant-1",
                        template=gateway_template(cloud))
    # As in the image: the configuration path is a symlink into a writable folder, and a
    # first-boot configuration is already there.
    state, config = tmp_path / "state", tmp_path / "etc" / "outpost.toml"
    writable = tmp_path / "data" / "outpost.toml"
    writable.parent.mkdir()
    writable.write_text('gateway_id = "unprovisioned"\n')
    config.parent.mkdir()
    config.symlink_to(writable)
    done = outpost_enroll(path, state, config)
    assert done.returncode == 0, done.stdout + done.stderr
    assert config.is_symlink() and 'gateway_id = "plant-1"' in writable.read_text()
    assert (writable.parent / "outpost.toml.before-enroll").read_text() == (
        'gateway_id = "unprovisioned"\n')
    assert "enrollment: enrolled as plant-1 (certificate until " in done.stdout
    identity = Identity(state / "identity")
    assert identity.key.stat().st_mode & 0o777 == 0o600
    enrolled = json.loads((state / "enrolled.json").read_text())
    assert enrolled["gateway_id"] == "plant-1" and enrolled["attempts"] == 1
    assert f'cert_file = "{identity.certificate}"' in config.read_text()
    assert cloud.registry.data["devices"]["plant-1"]["token"] == "batch-to"
    # Again: nothing changes.
    again = outpost_enroll(path, state, config)
    assert again.returncode == 0 and "already enrolled as plant-1" in again.stdout
    # The gateway runs with the configuration it was given and its own certificate: the
    # cloud sees it online under its id (the broker took the certificate's CN as its user).
    with CloudSession(cloud.options("deploy")) as session:
        session.subscribe("outpost-status/plant-1")
        process, _ = launch([sys.executable, "-m", "outpost", "run", "--config", str(config),
                             "--state-dir", str(state), "--listen", "127.0.0.1:0"],
                            tmp_path / "outpost.log", 30)
        try:
            assert session.wait(lambda m: m.get("outpost-status/plant-1") == b"online", 60), \
                process.log()
        finally:
            process.stop()


@pytest.mark.parametrize(("token", "allow", "uses", "days", "gateway", "reason"), [
    ("wrong", ["*"], 5, 1.0, "plant-1", "unknown token"),
    ("t", ["*"], 5, -1.0, "plant-1", "the token expired at "),
    ("t", ["farm-*"], 5, 1.0, "plant-1", "gateway id 'plant-1' is not on the token's allow "
     "list (farm-*)"),
])
def test_a_refused_enrollment_says_why_and_gets_nothing(
        cloud: FleetCloud, tmp_path: Path, token: str, allow: list[str], uses: int,
        days: float, gateway: str, reason: str) -> None:
    cloud.add_token("t", uses=uses, allow=allow, days=days)
    path = provisioning(cloud, tmp_path / "boot", token, gateway_id=gateway)
    out = outpost_enroll(path, tmp_path / "state")
    assert out.returncode == 3, out.stdout + out.stderr
    assert f"refused by the enrollment service: {reason}" in out.stderr
    assert not Identity(tmp_path / "state" / "identity").certificate.exists()
    assert cloud.registry.data["devices"] == {}


def test_a_used_up_token_and_a_taken_id_are_refused(cloud: FleetCloud, tmp_path: Path) -> None:
    cloud.add_token("t", uses=1)
    first = outpost_enroll(provisioning(cloud, tmp_path / "a", "t", gateway_id="plant-1"),
                           tmp_path / "state-a")
    assert first.returncode == 0, first.stderr
    second = outpost_enroll(provisioning(cloud, tmp_path / "b", "t", gateway_id="plant-2"),
                            tmp_path / "state-b")
    assert second.returncode == 3 and "the token is used up (1 of 1)" in second.stderr
    cloud.add_token("t2", uses=5)
    # Another card claiming plant-1 (its own key): the id is taken.
    taken = outpost_enroll(provisioning(cloud, tmp_path / "c", "t2", gateway_id="plant-1"),
                           tmp_path / "state-c")
    assert taken.returncode == 3
    assert "gateway id 'plant-1' is already enrolled with another key" in taken.stderr


def test_a_csr_for_another_gateways_id_is_refused(cloud: FleetCloud, tmp_path: Path) -> None:
    cloud.add_token("t", uses=5)
    prov = load_provisioning(provisioning(cloud, tmp_path / "boot", "t", gateway_id="plant-2"))
    context = tls_context(prov.ca_file, prov.batch_cert, prov.batch_key)
    host, port = cloud.address.split(":")
    csr = make_csr(new_key(), "plant-3").decode()
    with pytest.raises(EnrollmentRefusedError, match=r"the CSR is for \['plant-3'\], not for "
                       "gateway 'plant-2'"):
        exchange(host, int(port), context, "x", "outpost-enroll/request/plant-2",
                 "outpost-enroll/reply/plant-2", {"gateway_id": "plant-2", "csr": csr,
                                                  "token": "t", "nonce": "n1"}, 60, print)
    with pytest.raises(EnrollmentRefusedError, match="the request is for gateway 'plant-3' "
                       "but came on the topic of 'plant-2'"):
        exchange(host, int(port), context, "x", "outpost-enroll/request/plant-2",
                 "outpost-enroll/reply/plant-2", {"gateway_id": "plant-3", "csr": csr,
                                                  "token": "t", "nonce": "n2"}, 60, print)
    assert cloud.registry.data["devices"] == {}


def test_the_cloud_unreachable_mid_enrollment_is_retried(cloud: FleetCloud,
                                                         tmp_path: Path) -> None:
    """First the broker is down, then it is up but the service does not answer, then both."""
    cloud.add_token("t", uses=5)
    cloud.stop()
    cloud.broker.stop()
    path = provisioning(cloud, tmp_path / "boot", "t", gateway_id="plant-4")
    log = tmp_path / "enroll.log"
    with log.open("w") as out:
        child = subprocess.Popen([sys.executable, "-m", "outpost", "enroll", "--provisioning",
                                  str(path), "--state-dir", str(tmp_path / "state")],
                                 stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)
    try:
        wait_for(lambda: "cannot connect to" in log.read_text(), 60)
        cloud.broker.start()
        wait_for(lambda: "no answer within 5 s" in log.read_text(), 60)
        cloud.start_service()
        assert child.wait(120) == 0, log.read_text()
    finally:
        if child.poll() is None:
            child.kill()
    assert "enrolled as plant-4" in log.read_text()


def test_giving_up_is_clear(cloud: FleetCloud, tmp_path: Path) -> None:
    cloud.add_token("t", uses=5)
    cloud.stop()  # the enrollment service first: its thread may still be connecting
    cloud.broker.stop()
    prov = load_provisioning(provisioning(cloud, tmp_path / "boot", "t", gateway_id="plant-5"))
    with pytest.raises(CloudUnavailableError, match=r"not enrolled after .* attempt"):
        enroll(prov, tmp_path / "state", None, lambda line: None, give_up_after=1.0)


def test_the_gateway_id_comes_from_the_machine(tmp_path: Path) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nHardware\t: BCM2835\nSerial\t\t: 10000000a1b2c3d4\n")
    assert derive_gateway_id("pi-", cpuinfo, tmp_path / "none") == "pi-a1b2c3d4"
    machine = tmp_path / "machine-id"
    machine.write_text("0123456789abcdef0123456789abcdef\n")
    assert derive_gateway_id("gw-", tmp_path / "none", machine) == "gw-0123456789ab"
