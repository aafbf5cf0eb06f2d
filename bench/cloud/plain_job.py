"""The baseline for ``silver``: the plain job a data engineer writes first on the same bronze.

Explicit bronze schema, ``from_json`` of the payload with an explicit point struct,
``dropDuplicates`` on the message id, a Delta table partitioned by event date (the table
format ``silver`` writes; ``fmt="parquet"`` for plain Parquet files). No quarantine, no
type validation beyond what ``from_json`` does, no ledger, no other kinds: what ``silver``
is compared against (``run_bench.py`` prints the ratio).
"""

from __future__ import annotations

from pyspark.sql import SparkSession
from pyspark.sql import functions as F  # noqa: N812
from pyspark.sql.types import DoubleType, LongType, StringType, StructField, StructType

from cloud_spark import schemas
from cloud_spark.tables import join_path

POINT = StructType(
    [
        StructField("value", DoubleType()),
        StructField("unit", StringType()),
        StructField("ts", LongType()),
        StructField("quality", StringType()),
    ]
)


def run(spark: SparkSession, root: str, out: str, fmt: str = "delta") -> int:
    """Bronze → deduplicated points (``fmt``: ``delta`` or ``parquet``); returns the rows."""
    bronze = spark.read.schema(schemas.BRONZE).json(join_path(root, "bronze"))
    points = (
        bronze.withColumn("p", F.from_json("payload", POINT))
        .select("gateway", "epoch", "seq", "local_topic", "received_ms", "ingest_ms", "p.*")
        .dropDuplicates(["gateway", "epoch", "seq"])
        .withColumn("event_date", F.to_date(F.timestamp_millis("ts")))
    )
    points.write.format(fmt).mode("overwrite").partitionBy("event_date").save(out)
    return spark.read.format(fmt).load(out).count()
