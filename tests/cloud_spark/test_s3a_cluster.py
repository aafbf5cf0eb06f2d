"""``silver`` under spark-submit on a standalone cluster, bronze and Delta tables on S3.

The cluster of test_cluster.py (a master and two one-core workers from the PySpark
installation) runs the zipped package; spark-submit gets the Delta and S3 connector
packages with ``--packages`` (the way a cluster user gives them) and the credentials as
``--conf spark.hadoop.fs.s3a.*``; the job names the SeaweedFS endpoint with
``--s3-endpoint``. Executors under both workers read the ``s3a://`` bronze and write the
Delta tables, which delta-rs then reads from S3.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
from deltalake import DeltaTable

from bench.cloud.tsbs_iot import GenConfig, generate
from cloud_spark.object_store_conf import s3a_packages
from cloud_spark.spark import SPARK_PACKAGES, ivy_dir
from tests.cloud_spark.test_cluster import SPARK_BIN, _env, build_artifact, cluster
from tests.cloud_spark.test_s3a import delta_storage_options, the_json_line, upload_tree
from tests.support.seaweedfs import SeaweedFS, unique_bucket

__all__ = ["cluster"]  # the fixture, imported for pytest


@pytest.mark.pipeline  # minutes: `make pipeline-test`
@pytest.mark.timeout(900)
def test_silver_on_a_standalone_cluster_reads_s3a_bronze_and_writes_delta_on_s3(
    cluster: str, seaweedfs: SeaweedFS, tmp_path: Path
) -> None:
    bucket = seaweedfs.create_bucket(unique_bucket("cluster"))
    m = generate(GenConfig(rows=3000, gateways=2, devices=10, rows_per_file=600),
                 tmp_path / "landing")  # fmt: skip
    upload_tree(seaweedfs, tmp_path / "landing" / "bronze", bucket, "landing/bronze")
    archive, entry = build_artifact(tmp_path)
    packages = ",".join((*SPARK_PACKAGES, *s3a_packages()))
    submit = [
        str(SPARK_BIN / "spark-submit"), "--master", cluster, "--py-files", str(archive),
        "--packages", packages, "--conf", f"spark.jars.ivy={ivy_dir()}",
        "--driver-memory", "512m", "--executor-memory", "512m", "--total-executor-cores", "2",
        "--executor-cores", "1", "--conf", "spark.ui.enabled=false",
        "--conf", "spark.sql.shuffle.partitions=4",
        "--conf", f"spark.hadoop.fs.s3a.access.key={seaweedfs.access_key}",
        "--conf", f"spark.hadoop.fs.s3a.secret.key={seaweedfs.secret_key}",
        str(entry), "silver", "--root", f"s3a://{bucket}/landing",
        "--out", f"s3://{bucket}/tables", "--s3-endpoint", seaweedfs.endpoint,
    ]  # fmt: skip
    started = time.monotonic()
    done = subprocess.run(
        submit, cwd=tmp_path, env=_env(tmp_path), capture_output=True, text=True,
        timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-6000:]
    print(f"silver on the cluster took {time.monotonic() - started:.0f} s")
    result = the_json_line(done.stdout)
    assert result["bronze_rows"] == m.rows
    assert result["rows"] == m.distinct_ids + m.no_id

    options = delta_storage_options(seaweedfs)
    messages = DeltaTable(f"s3://{bucket}/tables/silver/messages", storage_options=options)
    ids = [(r["gateway"], r["epoch"], r["seq"])
           for r in messages.to_pyarrow_table(columns=["gateway", "epoch", "seq"]).to_pylist()
           if r["seq"] is not None]  # fmt: skip
    assert len(ids) == len(set(ids)) == m.distinct_ids
    points = DeltaTable(f"s3://{bucket}/tables/silver/points", storage_options=options)
    assert points.to_pyarrow_table(columns=["seq"]).num_rows == m.points
    executors = list(tmp_path.glob("work-*/app-*/*/stderr"))
    assert len({path.parts[-4] for path in executors}) == 2  # executors under both workers
