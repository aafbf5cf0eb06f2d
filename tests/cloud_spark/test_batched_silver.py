"""Batched and single messages build the same silver tables.

One gateway store is filled while the cloud is away (device points, a retained device status,
device diagnostics, a binary payload), then copied: each copy drains it through the real
uplink into its own mosquitto and lander: single messages on MQTT 5, batches on MQTT 5 and on
3.1.1. The same outbox rows carry the same ids and receive times, so every silver table must
come out the same, except the columns of the lander's own clock and name. The batched MQTT 5
gateway is killed (SIGKILL) once in the middle of its drain: after dedup nothing is missing or
doubled, and `quality` finds no hole.

Minutes on a loaded machine (three drains, three silver runs): it runs with `make pipeline-test`
(which CI runs).
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
from collections.abc import Callable
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from cloud_spark.cli import job_params, run_job
from cloud_spark.jobs import quality
from cloud_spark.tables import TABLES, read_table
from tests.bridge.uplink.test_uplink_e2e import publish_local, uplink_config
from tests.cloud_spark.conftest import T0, point_payload
from tests.cloud_spark.test_lander import Lander, bronze_ids, landers, wait_for_ids
from tests.conftest import require
from tests.support.broker_proc import BrokerProcess
from tests.support.mosquitto import start_mosquitto

__all__ = ["landers"]  # the fixture, shared with test_lander.py

SILVER = [name for name, table in TABLES.items() if table.path.startswith("silver/")]
LANDER_COLUMNS = {"ingest_ms", "ingest_date", "ingest_hour", "lander_id"}
POINTS = 300


def dataset() -> list[tuple[str, bytes]]:
    items = [(f"devices/m{i % 4}/power", point_payload(i * 0.5, T0 + i * 1000).encode())
             for i in range(POINTS)]
    diagnostics = {"ts": T0, "requests": 10, "timeouts": 0, "crc_errors": 0, "exceptions": 0,
                   "stale_frames": 0, "latency_ms": 3.5}
    items += [("devices/m1/diagnostics", json.dumps(diagnostics).encode()),
              ("devices/m2/raw", b"\xff\x00\x01"),  # a point that is not JSON: quarantined
              ("elsewhere/x", b"1")]  # not forwarded
    return items


def table_rows(spark: SparkSession, out: Path, name: str) -> list[tuple[object, ...]]:
    frame = read_table(spark, str(out), name)
    columns = [c for c in frame.columns if c not in LANDER_COLUMNS]
    return sorted((tuple(row) for row in frame.select(*columns).collect()), key=repr)


@pytest.mark.pipeline
@pytest.mark.timeout(600)
def test_batched_and_single_messages_build_the_same_silver(
    spark: SparkSession, broker_factory: Callable[..., BrokerProcess], tmp_path: Path,
    landers: list,
) -> None:
    require("mosquitto")
    source = tmp_path / "state"
    with start_mosquitto(tmp_path / "away") as away:  # stopped at once: the cloud is away
        port = away.port
    gateway = broker_factory(uplink_config(port), "--state-dir", str(source))
    publish_local(gateway.port, [("devices/m1/status", b"online")], qos=1)  # retained below
    publish_local(gateway.port, dataset())
    gateway.stop(signal.SIGTERM)
    expected_rows = 1 + POINTS + 2  # the status, the points, diagnostics, the binary one

    # (protocol, batch settings, SIGKILL the gateway once while its batches drain)
    runs = {"single-v5": (5, None, False), "batch-v5": (5, "{ max_count = 64 }", True),
            "batch-v311": (4, '{ max_count = 64, compression = "zlib" }', False)}
    silver: dict[str, Path] = {}
    for name, (protocol, batch, kill) in runs.items():
        state = tmp_path / f"state-{name}"
        shutil.copytree(source, state)
        root, out = tmp_path / f"landing-{name}", tmp_path / f"tables-{name}"
        with start_mosquitto(tmp_path / f"cloud-{name}") as cloud:
            lander = Lander(cloud, root, f"lander-{name}", "--topic", "site7/#",
                            "--roll-seconds", "0.3")
            landers.append(lander)
            config = uplink_config(cloud.port, protocol=protocol, batch=batch,
                                   remote_extra="rate_messages = 100" if kill else "")
            drain = broker_factory(config, "--state-dir", str(state))
            if kill:  # 64-row batches at 100 rows/s: killed with most of them still queued
                wait_for_ids(root, {("site7", 1)})
                drain.stop(signal.SIGKILL)
                drain = broker_factory(config, "--state-dir", str(state))
            wait_for_ids(root, {("site7", seq) for seq in range(1, expected_rows + 1)},
                         timeout=120)
            drain.stop(signal.SIGTERM)
            assert lander.terminate() == 0
        assert len(bronze_ids(root)) >= expected_rows
        run_job("silver", spark, str(root), str(out), job_params("silver", argparse.Namespace()))
        silver[name] = out

    reference = {table: table_rows(spark, silver["single-v5"], table) for table in SILVER}
    assert len(reference["points"]) == POINTS
    assert len(reference["quarantine"]) == 1
    for name, out in silver.items():
        for table in SILVER:
            assert table_rows(spark, out, table) == reference[table], (name, table)
        summary = quality.seq_summary(read_table(spark, str(out), "messages")).collect()
        assert [(r["gateway"], r["last_seq"], r["missing"]) for r in summary] == [
            ("site7", expected_rows, 0)
        ], name
