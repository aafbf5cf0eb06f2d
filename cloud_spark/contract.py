"""The message format between the gateway uplink, the lander and the Spark jobs.

How this works: this module is the single source of truth for every name that crosses a
process boundary on the cloud side. It has no logic and imports nothing outside the
standard library, so the gateway's uplink tests, the lander, the Spark jobs and the docs
contract test (``tests/cloud_spark/test_contract.py``) can all read it.
``docs/message-format.md`` carries the same names and the ``EXAMPLE_*`` values below as
JSON code blocks; the contract test fails when the two drift apart.

Layers of the format:

1. **Message id and metadata** that the uplink attaches to every forwarded message: as MQTT 5
   user properties (payload untouched) or, for MQTT 3.1.1 remotes, as a JSON envelope around
   the payload. The id is ``(gateway, epoch, seq)``.
2. **Local payloads** published on the gateway: device points, device status, device
   diagnostics and the uplink's own diagnostics.
3. **Bronze records**: one gzipped JSON line per landed message, written by the lander.
"""

from __future__ import annotations

from typing import Final

# --- 1. message id and metadata -------------------------------------------------------------

#: MQTT 5 user property names, in the order the uplink writes them.
PROP_GATEWAY: Final = "gateway"
PROP_EPOCH: Final = "epoch"
PROP_SEQ: Final = "seq"
PROP_TOPIC: Final = "topic"
PROP_RECEIVED_MS: Final = "received_ms"
USER_PROPERTIES: Final = (PROP_GATEWAY, PROP_EPOCH, PROP_SEQ, PROP_TOPIC, PROP_RECEIVED_MS)
#: the fields that make up the message id
ID_FIELDS: Final = (PROP_GATEWAY, PROP_EPOCH, PROP_SEQ)
#: ``seq`` of the first message of an epoch; seq is strictly increasing per (gateway, epoch)
FIRST_SEQ: Final = 1

#: MQTT 3.1.1 JSON envelope keys: the user properties plus the wrapped payload.
ENV_ENCODING: Final = "encoding"
ENV_PAYLOAD: Final = "payload"
ENVELOPE_KEYS: Final = (*USER_PROPERTIES, ENV_ENCODING, ENV_PAYLOAD)
#: payload encodings used by the envelope and by bronze records
ENCODING_UTF8: Final = "utf8"
ENCODING_BASE64: Final = "base64"
ENCODINGS: Final = (ENCODING_UTF8, ENCODING_BASE64)

# --- 2. local topics and payloads -----------------------------------------------------------

#: default local topic prefix of the device bridge: ``<prefix>/<device>/<point>``
DEFAULT_DEVICE_PREFIX: Final = "devices"
#: reserved leaf names under ``<prefix>/<device>/``; every other leaf is a point
STATUS_LEAF: Final = "status"
DIAGNOSTICS_LEAF: Final = "diagnostics"
#: local topic of the uplink's own diagnostics
UPLINK_DIAGNOSTICS_TOPIC: Final = "$SYS/outpost/uplink"
#: the ``topic`` metadata of the gateway's own status (``online``/``offline``, no ``seq``)
GATEWAY_STATUS_TOPIC: Final = "$SYS/outpost/status"

POINT_FIELDS: Final = ("value", "unit", "ts", "quality")
QUALITIES: Final = ("good", "uncertain", "bad")
STATUS_ONLINE: Final = "online"
STATUS_OFFLINE: Final = "offline"
STATUSES: Final = (STATUS_ONLINE, STATUS_OFFLINE)
DEVICE_DIAGNOSTICS_FIELDS: Final = (
    "ts",
    "requests",
    "timeouts",
    "crc_errors",
    "exceptions",
    "stale_frames",
    "latency_ms",
)
#: windowed aggregates of a point: ``<prefix>/<device>/<point>/agg/<window>`` (window: ``1m``)
AGGREGATE_LEVEL: Final = "agg"
AGGREGATE_FIELDS: Final = (
    "ts",
    "start",
    "end",
    "mean",
    "min",
    "max",
    "first",
    "last",
    "count",
    "covered_ms",
    "unit",
    "partial",
)
#: an alarm's transitions on the gateway (bridge/alarms): ``alarms/<alarm>/event``, QoS 1
ALARMS_ROOT: Final = "alarms"
ALARM_EVENT_LEAF: Final = "event"
ALARM_EVENT_FIELDS: Final = (
    "alarm",
    "transition",
    "from",
    "to",
    "cause",
    "value",
    "ts",
    "severity",
    "kind",
    "point",
    "user",
)
ALARM_STATES: Final = ("normal", "active_unacked", "active_acked", "cleared_unacked", "shelved")
UPLINK_DIAGNOSTICS_FIELDS: Final = (
    "ts",
    "connected",
    "backlog_messages",
    "backlog_bytes",
    "oldest_age_s",
    "dropped",
)

# --- 3. bronze records ----------------------------------------------------------------------

BRONZE_FIELDS: Final = (
    "gateway",
    "epoch",
    "seq",
    "local_topic",
    "received_ms",
    "remote_topic",
    "payload",
    "payload_encoding",
    "ingest_ms",
    "lander_id",
)
#: bronze partition columns (from ``ingest_ms``, UTC): ``ingest_date=YYYY-MM-DD/ingest_hour=HH``
BRONZE_PARTITIONS: Final = ("ingest_date", "ingest_hour")
#: directory under the landing root that holds bronze files
BRONZE_DIR: Final = "bronze"
#: suffix of committed bronze files; temporary files start with "." so Spark skips them
BRONZE_SUFFIX: Final = ".json.gz"

# --- examples (also in docs/message-format.md; the contract test compares them) -------------

EXAMPLE_USER_PROPERTIES: Final = {
    "gateway": "gw-plant-7",
    "epoch": "0b6f3c1e-2f7d-4d8e-9a51-6c1f0e2d3b4a",
    "seq": "1042",
    "topic": "devices/meter-1/active_power",
    "received_ms": "1717430400123",
}
EXAMPLE_ENVELOPE: Final = {
    "gateway": "gw-plant-7",
    "epoch": "0b6f3c1e-2f7d-4d8e-9a51-6c1f0e2d3b4a",
    "seq": 1042,
    "topic": "devices/meter-1/active_power",
    "received_ms": 1717430400123,
    "encoding": "utf8",
    "payload": '{"value": 12.5, "unit": "kW", "ts": 1717430400100, "quality": "good"}',
}
EXAMPLE_POINT: Final = {"value": 12.5, "unit": "kW", "ts": 1717430400100, "quality": "good"}
EXAMPLE_AGGREGATE: Final = {
    "ts": 1717430460000,
    "start": 1717430400000,
    "end": 1717430460000,
    "mean": 12.43,
    "min": 11.9,
    "max": 13.1,
    "first": 12.1,
    "last": 12.6,
    "count": 60,
    "covered_ms": 60000,
    "unit": "kW",
    "partial": False,
}
EXAMPLE_ALARM_EVENT: Final = {
    "alarm": "boiler-hot",
    "transition": 7,
    "from": "normal",
    "to": "active_unacked",
    "cause": "raise",
    "value": 92.5,
    "ts": 1717430400100,
    "severity": "high",
    "kind": "high",
    "point": "boiler/temperature",
    "user": None,
}
EXAMPLE_DEVICE_DIAGNOSTICS: Final = {
    "ts": 1717430400000,
    "requests": 5321,
    "timeouts": 4,
    "crc_errors": 1,
    "exceptions": 0,
    "stale_frames": 2,
    "latency_ms": 38.5,
}
EXAMPLE_UPLINK_DIAGNOSTICS: Final = {
    "ts": 1717430400000,
    "connected": True,
    "backlog_messages": 0,
    "backlog_bytes": 0,
    "oldest_age_s": None,
    "dropped": 0,
}
EXAMPLE_BRONZE: Final = {
    "gateway": "gw-plant-7",
    "epoch": "0b6f3c1e-2f7d-4d8e-9a51-6c1f0e2d3b4a",
    "seq": 1042,
    "local_topic": "devices/meter-1/active_power",
    "received_ms": 1717430400123,
    "remote_topic": "sites/plant-7/devices/meter-1/active_power",
    "payload": '{"value": 12.5, "unit": "kW", "ts": 1717430400100, "quality": "good"}',
    "payload_encoding": "utf8",
    "ingest_ms": 1717430400456,
    "lander_id": "lander-a",
}
