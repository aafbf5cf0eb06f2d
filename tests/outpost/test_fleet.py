"""The fleet end to end (`make fleet-test`, marked `fleet`, not in the default run): twenty
gateway processes from one batch (each its own state directory, the same provisioning file)
enroll against a real mosquitto with TLS and client certificates, run with their own
certificates, all receive a new Modbus map, one receives a configuration that breaks its
uplink and rolls back by itself, and the fleet table built by the Spark jobs from what the
lander landed shows all of it. Prints: first start -> enrolled, configuration sent -> applied,
and sent -> rolled back."""

from __future__ import annotations

import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cloud_spark.cli import run_job
from cloud_spark.fleet.broker import CloudSession
from cloud_spark.fleet.config_send import send_config
from cloud_spark.fleet.signing import generate_key
from cloud_spark.jobs.fleet import FleetParams, fleet_rows
from cloud_spark.jobs.report import ReportParams
from cloud_spark.jobs.silver import SilverParams
from cloud_spark.spark import get_spark
from tests.conftest import require
from tests.outpost.fleet_support import fleet_cloud, gateway_template, provisioning
from tests.support.broker_proc import ROOT, BrokerProcess, launch
from tests.support.mosquitto import free_port

pytestmark = [pytest.mark.fleet, pytest.mark.timeout(1800)]

GATEWAYS = 20
REMOTE_CONFIG = """
[remote_config]
enabled = true
keyring = "{keyring}"
health_deadline = 20
"""
NEW_MAP = """
[[bridge.buses]]
name = "plc"
type = "tcp"
host = "127.0.0.1"
port = {modbus_port}

[[bridge.devices]]
name = "meter-1"
bus = "plc"
unit_id = 1
map = "profile:eastron-sdm630"
"""


def test_twenty_gateways_enroll_take_a_new_map_and_one_rolls_back(tmp_path: Path) -> None:
    require("mosquitto")
    require("openssl")
    keys = tmp_path / "keys"
    private, public = generate_key(keys, "fleet-1")
    keyring = tmp_path / "keyring"
    keyring.mkdir()
    shutil.copy(public, keyring)
    with fleet_cloud(tmp_path / "cloud") as cloud:
        cloud.add_token("batch-token", uses=GATEWAYS + 5, allow=["plant-*"])
        remote = REMOTE_CONFIG.format(keyring=keyring)
        base = gateway_template(cloud, remote)
        root = tmp_path / "gw"
        lander_root, out = tmp_path / "landing", tmp_path / "tables"
        cert, key = cloud.pki.clients["deploy"]
        lander = subprocess.Popen(
            [sys.executable, "-m", "cloud_spark", "land", "--broker", cloud.address,
             "--topic", "outpost-status/#", "--topic", "outpost-diagnostics/#", "--root",
             str(lander_root), "--roll-seconds", "1", "--tls-ca", str(cloud.pki.ca),
             "--tls-cert", str(cert), "--tls-key", str(key)],
            stdout=(tmp_path / "lander.log").open("w"), stderr=subprocess.STDOUT, cwd=ROOT)
        gateways: dict[str, BrokerProcess] = {}
        try:
            # 1. Every card boots with the same provisioning file: enroll, all at once.
            ids = [f"plant-{n:02d}" for n in range(GATEWAYS)]
            started = time.monotonic()
            children = {}
            for gateway in ids:
                folder = root / gateway
                path = provisioning(cloud, folder / "boot", "batch-token", gateway_id=gateway,
                                    template=base)
                children[gateway] = subprocess.Popen(
                    [sys.executable, "-m", "outpost", "enroll", "--provisioning", str(path),
                     "--state-dir", str(folder / "state"), "--config",
                     str(folder / "outpost.toml")], stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT, text=True, cwd=ROOT)
            enrolled_s = {}
            for gateway, child in children.items():
                output, _ = child.communicate(timeout=600)
                assert child.returncode == 0, output
                enrolled_s[gateway] = time.monotonic() - started
            assert len(cloud.registry.data["devices"]) == GATEWAYS

            # 2. They run with their own certificates; the cloud sees each one online.
            with CloudSession(cloud.options("deploy")) as session:
                session.subscribe("outpost-status/+")
                for gateway in ids:
                    folder = root / gateway
                    gateways[gateway] = launch(
                        [sys.executable, "-m", "outpost", "run", "--config",
                         str(folder / "outpost.toml"), "--state-dir", str(folder / "state"),
                         "--listen", "127.0.0.1:0"], folder / "outpost.log", 120)[0]
                assert session.wait(lambda m: all(
                    m.get(f"outpost-status/{g}") == b"online" for g in ids), 300), sorted(
                    session.latest)
                online_s = time.monotonic() - started

                # 3. A new Modbus map for all of them.
                # (the cloud's template: a gateway's file with its id made a placeholder)
                new_map = (root / ids[0] / "outpost.toml").read_text().replace(
                    ids[0], "{gateway_id}") + NEW_MAP.format(modbus_port=free_port())
                results = send_config(session, ids, new_map, private, 100, "new-map", 600)
                assert all(r.state == "applied" for r in results), [r.line() for r in results]
                applied_s = [r.finished_s for r in results if r.finished_s is not None]
                for gateway in ids:
                    assert "meter-1" in (root / gateway / "outpost.toml").read_text()

                # 4. One of them gets a configuration that breaks its uplink.
                broken = new_map.replace(cloud.address, f"127.0.0.1:{free_port()}")
                [rolled] = send_config(session, [ids[7]], broken, private, 101, "bad", 600)
                assert rolled.state == "rolled back", rolled.line()
                assert "uplink not connected" in rolled.reason
                assert (root / ids[7] / "outpost.toml").read_text() == new_map.replace(
                    "{gateway_id}", ids[7])
                time.sleep(3)  # the lander's last roll (1 s) of the final reports
        finally:
            for process in gateways.values():
                process.stop()
            lander.terminate()
            lander.wait(30)

    # 5. The fleet table, from what the lander landed.
    spark = get_spark("outpost-fleet-test", "local[2]", {"spark.ui.enabled": "false"})
    try:
        run_job("silver", spark, str(lander_root), str(out), SilverParams())
        run_job("fleet", spark, "", str(out), FleetParams())
        run_job("report", spark, "", str(out), ReportParams())
        rows = {r["gateway"]: r for r in fleet_rows(spark, str(out))}
    finally:
        spark.stop()
    assert sorted(rows) == ids
    for gateway, row in rows.items():
        assert row["cert_state"] == "valid" and row["cert_not_after"], row
        assert row["config_running_version"] == 100, row
        assert row["config_state"] == ("rolled back" if gateway == ids[7] else "applied"), row
        assert row["last_seen_ms"] is not None
    assert rows[ids[7]]["config_version"] == 101

    figures = {
        "gateways": GATEWAYS,
        "first start -> enrolled, s (median, max)": (
            round(statistics.median(enrolled_s.values()), 1),
            round(max(enrolled_s.values()), 1)),
        "first start -> all online, s": round(online_s, 1),
        "config sent -> applied, s (median, max)": (round(statistics.median(applied_s), 1),
                                                   round(max(applied_s), 1)),
        "config sent -> rolled back, s (health_deadline 20 s)": round(
            rolled.finished_s or 0, 1),
    }
    print("\nfleet figures: " + json.dumps(figures))
    (tmp_path.parent / "fleet-figures.json").write_text(json.dumps(figures, indent=1))
