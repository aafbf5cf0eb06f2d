"""Fixtures of the cloud-side tests: one Spark session, bronze builders, a mosquitto.

The Spark session is session-scoped (starting a JVM costs seconds): ``local[2]``, two
shuffle partitions, no UI, UTC. Whole-stage code generation and adaptive execution are
off and the JIT stops at C1: on frames of a few rows, compiling generated code and
re-planning cost far more than they save, and results do not depend on them.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession

from cloud_spark import schemas
from cloud_spark.records import encode_record, partition_dir
from cloud_spark.spark import get_spark
from tests.support.mosquitto import Mosquitto, mosquitto_available, start_mosquitto

T0 = 1_717_430_400_000  # 2024-06-03T16:00:00Z, a whole hour (and 15 min, 1 min)

TEST_CONF = {
    "spark.sql.shuffle.partitions": "2",
    "spark.default.parallelism": "2",
    "spark.ui.enabled": "false",
    "spark.sql.codegen.wholeStage": "false",
    "spark.sql.adaptive.enabled": "false",
    "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
    "spark.sql.warehouse.dir": "/tmp/outpost-cloud-spark-tests-warehouse",
    # a Delta table's state from its log in one task (tables of a few files each)
    "spark.databricks.delta.snapshotPartitions": "1",
}


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    session = get_spark("outpost-tests", "local[2]", TEST_CONF)
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


def bronze_row(
    seq: int | None,
    topic: str | None,
    payload: str,
    *,
    gateway: str | None = "gw-1",
    epoch: str | None = "e-1",
    received_ms: int | None = None,
    ingest_ms: int | None = None,
    encoding: str = "utf8",
    lander: str = "lander-a",
    remote: str | None = None,
) -> dict[str, Any]:
    """A bronze record as the lander writes it (times default to T0 + seq seconds)."""
    base = T0 + (seq or 0) * 1000
    received = base if received_ms is None else received_ms
    ingest = received + 100 if ingest_ms is None else ingest_ms
    return {
        "gateway": gateway if seq is not None else None,
        "epoch": epoch if seq is not None else None,
        "seq": seq,
        "local_topic": topic,
        "received_ms": received if seq is not None else None,
        "remote_topic": remote or f"cloud/{topic}",
        "payload": payload,
        "payload_encoding": encoding,
        "ingest_ms": ingest,
        "lander_id": lander,
    }


def point_payload(value: Any, ts: int, quality: str = "good", unit: str | None = "kW") -> str:
    return json.dumps({"value": value, "unit": unit, "ts": ts, "quality": quality})


def write_bronze(
    root: Path, name: str, rows: Sequence[dict[str, Any]], *, ingest_ms: int
) -> Path:
    """A landed bronze file `name` (gzipped JSON lines) in the partition of `ingest_ms`."""
    path = root / "bronze" / partition_dir(ingest_ms) / name
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wb") as handle:
        for row in rows:
            handle.write(encode_record(row))
    return path


def bronze_frame(spark: SparkSession, rows: Sequence[dict[str, Any]]) -> DataFrame:
    """Rows → a frame with the bronze schema (partition columns from ingest time)."""
    from datetime import UTC, datetime

    full = []
    for row in rows:
        moment = datetime.fromtimestamp(row["ingest_ms"] / 1000, tz=UTC)
        full.append(
            {
                **row,
                "_corrupt_record": row.get("_corrupt_record"),
                "ingest_date": moment.date(),
                "ingest_hour": moment.hour,
            }
        )
    return spark.createDataFrame(full, schemas.BRONZE)


@pytest.fixture
def mosquitto(tmp_path: Path) -> Iterator[Mosquitto]:
    """A mosquitto with unlimited per-client queues (the lander's session may lag behind)."""
    if not mosquitto_available():
        pytest.skip("mosquitto is not installed")
    with start_mosquitto(tmp_path / "mosquitto", extra_config=("max_queued_messages 0",)) as broker:
        yield broker
