"""The device certificate's lifetime with certificates that expire within a minute: its
expiry in the status page's JSON, /metrics and the status topic; renewal before expiry
(configurable margin) over the cloud broker, authenticated by the old certificate, while the
uplink goes on and loses nothing; a revoked and an expired certificate reported as such."""

from __future__ import annotations

import datetime
import json
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
import pytest
from paho.mqtt.enums import CallbackAPIVersion

from cloud_spark.fleet.broker import CloudSession
from tests.conftest import require
from tests.outpost.fleet_support import FleetCloud, fleet_cloud, gateway_template, provisioning
from tests.outpost.support import Outpost, start_outpost
from tests.support.broker_proc import ROOT
from tests.support.waiting import wait_for

TOPIC = "outpost-status/plant-1/certificate"


@pytest.fixture
def cloud(tmp_path: Path) -> Iterator[FleetCloud]:
    require("mosquitto")
    require("openssl")
    with fleet_cloud(tmp_path / "cloud", lifetime=40.0) as c:
        c.add_token("t", uses=5)
        yield c


def enrolled_gateway(cloud: FleetCloud, tmp_path: Path, certificate: str
                     ) -> tuple[Path, Path]:
    """(the configuration `outpost enroll` wrote, the state dir)."""
    path = provisioning(cloud, tmp_path / "boot", "t", gateway_id="plant-1",
                        template=gateway_template(cloud, certificate))
    state, config = tmp_path / "state", tmp_path / "enrolled.toml"
    out = subprocess.run([sys.executable, "-m", "outpost", "enroll", "--provisioning",
                          str(path), "--state-dir", str(state), "--config", str(config)],
                         capture_output=True, text=True, cwd=ROOT, timeout=120, check=False)
    assert out.returncode == 0, out.stdout + out.stderr
    return config, state


def get(gateway: Outpost, path: str) -> str:
    with urllib.request.urlopen(gateway.url(path), timeout=10) as response:
        return str(response.read().decode())


def certificate_report(session: CloudSession) -> dict[str, Any]:
    raw = session.latest.get(TOPIC)
    return json.loads(raw) if raw else {}


def test_renewed_before_expiry_without_dropping_data(cloud: FleetCloud, tmp_path: Path
                                                     ) -> None:
    config, state = enrolled_gateway(cloud, tmp_path, "renew_before = 30\ncheck_interval = 1\n")
    first = json.loads((state / "enrolled.json").read_text())
    with CloudSession(cloud.options("deploy")) as session:
        session.subscribe(TOPIC, "fleet/plant-1/#")
        gateway = start_outpost(tmp_path / "run", config.read_text(), "--state-dir", str(state))
        publisher = mqtt.Client(CallbackAPIVersion.VERSION2, protocol=mqtt.MQTTv311)
        publisher.connect(gateway.host, gateway.port)
        publisher.loop_start()
        try:
            for n in range(10):
                publisher.publish(f"fleet/n{n}", str(n), qos=1).wait_for_publish(10)
            assert session.wait(lambda m: certificate_report(session).get("renewed"), 60), \
                gateway.log()
            renewed = certificate_report(session)
            assert renewed["serial"] != first["serial"] and renewed["state"] == "valid"
            assert renewed["not_after"] > first["not_after"]
            status = json.loads(get(gateway, "/status"))["certificate"]
            assert status["renewals"] >= 1 and status["subject"] == "plant-1"
            assert 0 < status["expires_in_s"] <= 40
            metrics = get(gateway, "/metrics")
            assert "outpost_certificate_expires_in_seconds " in metrics
            assert "outpost_certificate_valid 1.0" in metrics
            for n in range(10, 20):
                publisher.publish(f"fleet/n{n}", str(n), qos=1).wait_for_publish(10)
            # Every message arrived, and the uplink's connection was never dropped for it.
            wait_for(lambda: all(f"fleet/plant-1/n{n}" in session.latest for n in range(20)),
                     60, message=str(sorted(session.latest)))
            assert gateway.log().count("uplink cloud: connected to") == 1
            assert "certificate: renewed: serial" in gateway.log()
        finally:
            publisher.loop_stop()
            publisher.disconnect()
            gateway.stop()
        # Once the first certificate has expired, a new connection works only with the
        # renewed one.
        first_expiry = datetime.datetime.strptime(first["not_after"], "%Y-%m-%dT%H:%M:%SZ"
                                                  ).replace(tzinfo=datetime.UTC)
        wait_for(lambda: datetime.datetime.now(datetime.UTC) > first_expiry, 60)
        again = start_outpost(tmp_path / "run2", config.read_text(), "--state-dir", str(state))
        try:
            wait_for(lambda: "uplink cloud: connected to" in again.log(), 60)
        finally:
            again.stop()


def test_a_revoked_certificate_is_reported(cloud: FleetCloud, tmp_path: Path) -> None:
    config, state = enrolled_gateway(cloud, tmp_path, "renew_before = 60\ncheck_interval = 1\n")
    assert cloud.registry.revoke("plant-1")
    with CloudSession(cloud.options("deploy")) as session:
        session.subscribe(TOPIC)
        gateway = start_outpost(tmp_path / "run", config.read_text(), "--state-dir", str(state))
        try:
            assert session.wait(lambda m: certificate_report(session).get("state") == "revoked",
                                60), gateway.log()
            report = certificate_report(session)
            assert "renewal failed: gateway 'plant-1' was revoked at " in report["error"]
            assert "outpost_certificate_valid 0.0" in get(gateway, "/metrics")
            text = subprocess.run([sys.executable, "-m", "outpost", "status", "--url",
                                   gateway.url("")], capture_output=True, text=True,
                                  cwd=ROOT, check=True).stdout
            assert "certificate plant-1 until " in text and "revoked: renewal failed" in text
        finally:
            gateway.stop()


def test_an_expired_certificate_is_reported(cloud: FleetCloud, tmp_path: Path) -> None:
    cloud.ca.lifetime = 8.0
    config, state = enrolled_gateway(cloud, tmp_path, "renew = false\ncheck_interval = 1\n")
    with CloudSession(cloud.options("deploy")) as session:
        session.subscribe(TOPIC)
        gateway = start_outpost(tmp_path / "run", config.read_text(), "--state-dir", str(state))
        try:
            assert session.wait(lambda m: certificate_report(session).get("state") == "expired",
                                60), gateway.log()
            assert json.loads(get(gateway, "/status"))["certificate"]["expired"] is True
            assert "expired at" in gateway.log()
        finally:
            gateway.stop()
