"""The lander with an ``s3://`` root against a real mosquitto and a real S3 server (SeaweedFS):
single and batched messages land as one object per file under the local layout's keys, with
the records a local-root lander writes; a bad batch is quarantined in the bucket; a bucket
that does not exist, refused credentials and an endpoint that does not answer stop the lander
at start with a line naming what is wrong, and acknowledge nothing.

Faults (SIGKILL mid-upload, the store down for a while): test_lander_s3_faults.py.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
import pytest

from tests.cloud_spark.lander_procs import ROOT, Lander, Uplink, bronze_ids, landers, wait_for_ids
from tests.support.mosquitto import Mosquitto, free_port
from tests.support.seaweedfs import SeaweedFS, unique_bucket
from tests.support.waiting import wait_for
from tests.vectors import batch as v

__all__ = ["landers"]  # the fixture

KEY = re.compile(
    r"landing/bronze/ingest_date=\d{4}-\d\d-\d\d/ingest_hour=\d\d/"
    r"part-\d{13}-lander-s3-[0-9a-f]{8}-\d{6}\.json\.gz"
)
#: fields that differ between two landers landing the same message
PER_LANDER = ("ingest_ms", "lander_id")


def s3_records(s3: SeaweedFS, bucket: str, prefix: str) -> list[dict[str, Any]]:
    """Every record of the bronze objects under `prefix`."""
    client = s3.client()
    records: list[dict[str, Any]] = []
    for key in s3.list_keys(bucket, f"{prefix}/bronze/"):
        body = client.get_object(Bucket=bucket, Key=key)["Body"].read()
        records += map(json.loads, gzip.decompress(body).splitlines())
    return records


def s3_ids(s3: SeaweedFS, bucket: str, prefix: str) -> list[tuple[str, int]]:
    return [(rec["gateway"], rec["seq"]) for rec in s3_records(s3, bucket, prefix)]


def local_records(root: Path) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = []
    for path in sorted(root.glob("bronze/*/*/part-*.json.gz")):
        with gzip.open(path, "rt") as handle:
            records += map(json.loads, handle)
    return records


def comparable(records: list[dict[str, Any]]) -> list[str]:
    return sorted(
        json.dumps({k: val for k, val in rec.items() if k not in PER_LANDER}, sort_keys=True)
        for rec in records
    )


@pytest.fixture
def aws_env(seaweedfs: SeaweedFS, monkeypatch: pytest.MonkeyPatch) -> SeaweedFS:
    """The server's credentials and region in the environment a lander child inherits (the
    endpoint is passed as --s3-endpoint)."""
    for name, value in seaweedfs.env().items():
        if name != "AWS_ENDPOINT_URL_S3":
            monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    return seaweedfs


def test_single_and_batched_messages_land_as_objects_equal_to_a_local_landing(
    mosquitto: Mosquitto, aws_env: SeaweedFS, tmp_path: Path, landers: list
) -> None:
    s3 = aws_env
    bucket = s3.create_bucket(unique_bucket("land"))
    flags = ("--roll-seconds", "0.2")
    to_s3 = Lander(mosquitto, f"s3://{bucket}/landing", "lander-s3", *flags,
                   "--s3-endpoint", s3.endpoint)  # fmt: skip
    landers.append(to_s3)
    local_root = tmp_path / "local"
    to_disk = Lander(mosquitto, local_root, "lander-local", *flags)
    landers.append(to_disk)
    assert any(f"landing to s3://{bucket}/landing at {s3.endpoint}" in line
               for line in to_s3.lines)  # fmt: skip

    v5, v311 = Uplink(mosquitto, v5=True), Uplink(mosquitto, v5=False)
    v5.send_all(list(range(1, 151)))
    v311.send_all(list(range(1, 31)))
    batches = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, protocol=mqtt.MQTTv311)
    batches.connect(mosquitto.host, mosquitto.port)
    batches.loop_start()
    bad_reason = v.BAD[0][2]
    for payload in (v.ZSTD_BATCH, v.BAD[0][1]):
        batches.publish("outpost/gw-7/m1/p", payload, qos=1).wait_for_publish(30)
    expected = ({("gw-v5", seq) for seq in range(1, 151)}
                | {("gw-v311", seq) for seq in range(1, 31)}
                | {("gw-7", 5), ("gw-7", 6), ("gw-7", 8)})  # fmt: skip
    wait_for(lambda: expected <= set(s3_ids(s3, bucket, "landing")), timeout=60,
             message="not every id landed in S3")  # fmt: skip
    wait_for_ids(local_root, expected)
    quarantine = wait_for(lambda: s3.list_keys(bucket, "landing/quarantine/"), timeout=30)
    for uplink in (v5, v311):
        uplink.close()
    batches.loop_stop()
    batches.disconnect()
    assert to_s3.terminate() == 0
    assert to_disk.terminate() == 0

    keys = s3.list_keys(bucket, "landing/bronze/")
    assert keys and all(KEY.fullmatch(key) for key in keys), keys
    assert sorted(s3_ids(s3, bucket, "landing")) == sorted(bronze_ids(local_root))
    assert len(s3_ids(s3, bucket, "landing")) == len(expected)  # each once: clean run
    assert comparable(s3_records(s3, bucket, "landing")) == comparable(
        local_records(local_root))
    # the lander logs each object as it logs a local file, and never a temp object
    assert sum(" committed s3://" in line for line in to_s3.lines) == len(keys)
    assert all(".tmp" not in key for key in s3.list_keys(bucket))

    [qkey] = quarantine
    assert re.fullmatch(r"landing/quarantine/ingest_date=[\d-]+/\d+-lander-s3-\d+-000001\.json",
                        qkey)  # fmt: skip
    body = json.loads(s3.client().get_object(Bucket=bucket, Key=qkey)["Body"].read())
    assert body["reason"] == bad_reason and body["remote_topic"] == "outpost/gw-7/m1/p"


def start_land(mosquitto: Mosquitto, root: str, client_id: str, *extra: str,
               env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """`python -m cloud_spark land` (a bad setup exits at start)."""
    return subprocess.Popen(
        [sys.executable, "-m", "cloud_spark", "land", "--broker",
         f"{mosquitto.host}:{mosquitto.port}", "--topic", "outpost/#", "--root", root,
         "--client-id", client_id, *extra],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip


def test_bad_s3_settings_stop_the_lander_at_start_naming_what_is_wrong(
    mosquitto: Mosquitto, aws_env: SeaweedFS, tmp_path: Path, landers: list
) -> None:
    """Nothing is acknowledged by a lander that cannot store: the session's messages all
    reach the next lander with good settings."""
    s3 = aws_env
    bucket = s3.create_bucket(unique_bucket("bad"))
    root = f"s3://{bucket}/landing"
    endpoint = ("--s3-endpoint", s3.endpoint)
    first = Lander(mosquitto, root, "lander-bad", *endpoint)
    landers.append(first)  # makes the persistent session...
    assert first.terminate() == 0
    uplink = Uplink(mosquitto, v5=True)
    uplink.send_all(list(range(1, 41)))  # ...which queues these while no lander runs

    wrong_secret = {**os.environ, "AWS_SECRET_ACCESS_KEY": "not-the-secret"}
    dead = f"http://127.0.0.1:{free_port()}"
    cases = [  # side by side: each waits for its own process start and S3 answer
        (start_land(mosquitto, f"s3://{unique_bucket('missing')}/x", "lander-bad", *endpoint),
         r"error: cannot land to s3://missing-[0-9a-f]+/x: bucket 'missing-[0-9a-f]+' does not "
         rf"exist at {re.escape(s3.endpoint)}"),
        (start_land(mosquitto, root, "lander-bad", *endpoint, env=wrong_secret),
         rf"error: cannot land to {re.escape(root)}: access to bucket '{bucket}' at "
         rf"{re.escape(s3.endpoint)} is denied: wrong or missing credentials"),
        (start_land(mosquitto, root, "lander-bad", "--s3-endpoint", dead),
         rf"error: cannot land to {re.escape(root)}: the S3 endpoint {re.escape(dead)} does "
         "not answer"),
        (start_land(mosquitto, "s3:///landing", "lander-bad"),
         r"argument --root: no bucket in 's3:///landing'"),
    ]
    for proc, pattern in cases:
        _, stderr = proc.communicate(timeout=60)
        assert proc.returncode != 0
        assert re.search(pattern, stderr), stderr
        assert "Traceback" not in stderr

    assert s3.list_keys(bucket) == []
    again = Lander(mosquitto, root, "lander-bad", "--roll-seconds", "0.2",
                   *endpoint)  # fmt: skip
    landers.append(again)
    expected = {("gw-v5", seq) for seq in range(1, 41)}
    wait_for(lambda: expected <= set(s3_ids(s3, bucket, "landing")), timeout=60,
             message="the queued messages never reached the good lander")  # fmt: skip
    assert again.terminate() == 0
    uplink.close()
