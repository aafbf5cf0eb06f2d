"""Messages the lander cannot turn into bronze records (bad batches), kept whole with a reason.

How this works: the lander hands a message that failed to decode to :func:`quarantine_message`
with the reason; it is written as one JSON file (the payload in base64) under
``<root>/quarantine/ingest_date=YYYY-MM-DD/``, next to ``bronze``, made durable by the lander's
bronze sink the way bronze files are (locally: temp file, fsync, rename, directory fsync; on
S3: one PUT) before the lander acknowledges the message. Nothing reads these files
automatically: they are for an operator (docs/cloud.md, "Batched uplink messages"), and the
rows they hold show as holes in ``quality`` until a good copy lands.
"""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

from cloud_spark.bronze_writer import BronzeSink
from cloud_spark.records import partition_of

QUARANTINE_DIR = "quarantine"


def quarantine_message(
    sink: BronzeSink,
    *,
    reason: str,
    detail: str,
    remote_topic: str,
    payload: bytes,
    user_properties: list[tuple[str, str]],
    ingest_ms: int,
    lander_id: str,
    serial: int,
) -> Path | str:
    """Write one quarantined message durably through `sink`; returns where it is. `serial`
    makes the name unique within a lander run."""
    day, _ = partition_of(ingest_ms)
    safe_lander = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in lander_id)
    name = f"{ingest_ms}-{safe_lander}-{os.getpid()}-{serial:06d}.json"
    body = {
        "reason": reason,
        "detail": detail,
        "remote_topic": remote_topic,
        "user_properties": user_properties,
        "ingest_ms": ingest_ms,
        "lander_id": lander_id,
        "payload_base64": base64.b64encode(payload).decode("ascii"),
    }
    data = json.dumps(body, ensure_ascii=False).encode("utf-8") + b"\n"
    return sink.store(f"{QUARANTINE_DIR}/ingest_date={day}/{name}", data)
