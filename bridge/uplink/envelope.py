"""What goes on the wire to the cloud: the message id as user properties or a JSON envelope.

Pure. The names come from the cloud side's contract (`cloud_spark/contract.py`, checked equal to
these by `tests/bridge/uplink/test_contract.py`): the uplink and the lander must agree on them,
but neither package may import the other.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field

from gateway.base.outbox import OutboxRecord

PROP_GATEWAY = "gateway"
PROP_EPOCH = "epoch"
PROP_SEQ = "seq"
PROP_TOPIC = "topic"
PROP_RECEIVED_MS = "received_ms"
USER_PROPERTIES = (PROP_GATEWAY, PROP_EPOCH, PROP_SEQ, PROP_TOPIC, PROP_RECEIVED_MS)
ENV_ENCODING = "encoding"
ENV_PAYLOAD = "payload"


@dataclass(frozen=True, slots=True)
class Outgoing:
    """One PUBLISH for the remote broker."""

    topic: str
    payload: bytes
    qos: int
    retain: bool
    user_properties: tuple[tuple[str, str], ...] = field(default=())
    content_type: str | None = None


def id_properties(gateway: str, epoch: str, record: OutboxRecord) -> tuple[tuple[str, str], ...]:
    """The message id and metadata as MQTT 5 user properties, in contract order."""
    return (
        (PROP_GATEWAY, gateway),
        (PROP_EPOCH, epoch),
        (PROP_SEQ, str(record.seq)),
        (PROP_TOPIC, record.topic),
        (PROP_RECEIVED_MS, str(record.received_ms)),
    )


def json_envelope(gateway: str, epoch: str, record: OutboxRecord) -> bytes:
    """The MQTT 3.1.1 form: the payload wrapped in a JSON object with the id fields."""
    try:
        text, encoding = record.payload.decode("utf-8"), "utf8"
    except UnicodeDecodeError:
        text, encoding = base64.b64encode(record.payload).decode("ascii"), "base64"
    body = {
        PROP_GATEWAY: gateway,
        PROP_EPOCH: epoch,
        PROP_SEQ: record.seq,
        PROP_TOPIC: record.topic,
        PROP_RECEIVED_MS: record.received_ms,
        ENV_ENCODING: encoding,
        ENV_PAYLOAD: text,
    }
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def outgoing(
    record: OutboxRecord,
    remote_topic: str,
    gateway: str,
    epoch: str,
    protocol: int,
    envelope: str,
    qos: int,
) -> Outgoing:
    """Build the PUBLISH for one record (`envelope`: "auto", "properties" or "json")."""
    use_json = envelope == "json" or (envelope == "auto" and protocol != 5)
    if use_json:
        return Outgoing(remote_topic, json_envelope(gateway, epoch, record), qos, record.retain)
    if protocol != 5:
        raise ValueError("user properties need an MQTT 5 remote (use envelope = \"json\")")
    props = record.user_properties + id_properties(gateway, epoch, record)
    return Outgoing(
        remote_topic, record.payload, qos, record.retain, props, record.content_type
    )
