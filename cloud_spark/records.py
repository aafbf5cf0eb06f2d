"""Turn one MQTT message received in the cloud into one bronze record (pure functions).

How this works: the lander hands every message it receives to :func:`bronze_record` with the
remote topic, the payload bytes, the MQTT 5 user properties (if any), the lander's clock and
its id. The id and metadata are looked up in this order:

1. MQTT 5 user properties ``gateway``/``epoch``/``seq``/``topic``/``received_ms``: the payload
   is the device payload itself.
2. A JSON envelope (MQTT 3.1.1 remotes): a JSON object with the envelope keys; the inner
   payload is unwrapped (``encoding`` ``utf8`` or ``base64``).
3. Neither: the message is landed as it came, with null id fields; ``silver`` quarantines it
   (``missing_id``).

A **batched** message (no id user properties, a payload starting with the batch magic, see
:mod:`cloud_spark.batch_format`) carries many rows, each with its own id:
:func:`bronze_records` turns it into one bronze record per row, the same records the rows would
have made sent one by one. A batch that does not decode raises
:class:`~cloud_spark.batch_format.BatchError`; the lander quarantines it whole.

Nothing is ever dropped or "repaired" here: an envelope with a wrong type or a bad base64
payload is landed raw with null ids, so the original bytes stay available in quarantine.
Payload bytes that are valid UTF-8 are stored as text (``payload_encoding = "utf8"``),
anything else as base64. The lander must not depend on the remote topic layout: it records
``remote_topic`` but device and point come later from ``local_topic``.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from cloud_spark import contract as c
from cloud_spark.batch_format import MAX_BODY, Batch, decode_batch, is_batch

BronzeRecord = dict[str, Any]


def payload_text(data: bytes) -> tuple[str, str]:
    """Return ``(payload, payload_encoding)``: UTF-8 text when possible, else base64."""
    try:
        return data.decode("utf-8"), c.ENCODING_UTF8
    except UnicodeDecodeError:
        return base64.b64encode(data).decode("ascii"), c.ENCODING_BASE64


def _parse_int(value: object) -> int | None:
    """A decimal int from a user property string or a JSON int (bools are not ints)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value.strip())
    return None


def _str_or_none(value: object) -> str | None:
    return value if isinstance(value, str) and value != "" else None


def _from_properties(props: dict[str, str]) -> dict[str, Any] | None:
    """Metadata from MQTT 5 user properties, or None when they carry no message id."""
    if not any(key in props for key in c.ID_FIELDS):
        return None
    return {
        "gateway": _str_or_none(props.get(c.PROP_GATEWAY)),
        "epoch": _str_or_none(props.get(c.PROP_EPOCH)),
        "seq": _parse_int(props.get(c.PROP_SEQ)),
        "local_topic": _str_or_none(props.get(c.PROP_TOPIC)),
        "received_ms": _parse_int(props.get(c.PROP_RECEIVED_MS)),
    }


def unwrap_envelope(data: bytes) -> tuple[dict[str, Any], bytes] | None:
    """Metadata and inner payload bytes of a valid 3.1.1 JSON envelope, else None.

    Valid means: a JSON object with every envelope key, string gateway/epoch/topic, integer
    seq/received_ms, a known encoding and a payload string that decodes with it.
    """
    if not data.startswith(b"{"):
        return None
    try:
        env = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(env, dict) or not all(key in env for key in c.ENVELOPE_KEYS):
        return None
    meta = {
        "gateway": _str_or_none(env[c.PROP_GATEWAY]),
        "epoch": _str_or_none(env[c.PROP_EPOCH]),
        "seq": _parse_int(env[c.PROP_SEQ]) if not isinstance(env[c.PROP_SEQ], str) else None,
        "local_topic": _str_or_none(env[c.PROP_TOPIC]),
        "received_ms": (
            _parse_int(env[c.PROP_RECEIVED_MS])
            if not isinstance(env[c.PROP_RECEIVED_MS], str)
            else None
        ),
    }
    if any(value is None for value in meta.values()):
        return None
    inner, encoding = env[c.ENV_PAYLOAD], env[c.ENV_ENCODING]
    if not isinstance(inner, str):
        return None
    if encoding == c.ENCODING_UTF8:
        return meta, inner.encode("utf-8")
    if encoding == c.ENCODING_BASE64:
        try:
            return meta, base64.b64decode(inner, validate=True)
        except (binascii.Error, ValueError):
            return None
    return None


def bronze_record(
    *,
    remote_topic: str,
    payload: bytes,
    user_properties: Iterable[tuple[str, str]] | None,
    ingest_ms: int,
    lander_id: str,
) -> BronzeRecord:
    """Build the bronze record for one received message (see the module docstring)."""
    meta = _from_properties(dict(user_properties or ()))
    data = payload
    if meta is None:
        unwrapped = unwrap_envelope(payload)
        if unwrapped is not None:
            meta, data = unwrapped
    if meta is None:
        meta = {"gateway": None, "epoch": None, "seq": None, "local_topic": None}
        meta["received_ms"] = None
    return _record(meta["gateway"], meta["epoch"], meta["seq"], meta["local_topic"],
                   meta["received_ms"], remote_topic, data, ingest_ms, lander_id)


def _record(gateway: str | None, epoch: str | None, seq: int | None, local_topic: str | None,
            received_ms: int | None, remote_topic: str, data: bytes, ingest_ms: int,
            lander_id: str) -> BronzeRecord:
    text, encoding = payload_text(data)
    return {
        "gateway": gateway,
        "epoch": epoch,
        "seq": seq,
        "local_topic": local_topic,
        "received_ms": received_ms,
        "remote_topic": remote_topic,
        "payload": text,
        "payload_encoding": encoding,
        "ingest_ms": ingest_ms,
        "lander_id": lander_id,
    }


def _batch_of(payload: bytes, props: list[tuple[str, str]], max_body: int) -> Batch | None:
    """The batch a message carries, or None for a single message (id user properties win
    over a payload that merely starts like a batch); BatchError for a batch that does not
    decode."""
    if not is_batch(payload) or any(key in c.ID_FIELDS for key, _ in props):
        return None
    return decode_batch(payload, max_body)


def bronze_records(
    *,
    remote_topic: str,
    payload: bytes,
    user_properties: Iterable[tuple[str, str]] | None,
    ingest_ms: int,
    lander_id: str,
    max_body: int = MAX_BODY,
) -> list[BronzeRecord]:
    """The bronze records of one received message: one per row of a batch, else one.

    Raises :class:`~cloud_spark.batch_format.BatchError` for a batch that does not decode.
    """
    props = list(user_properties or ())
    batch = _batch_of(payload, props, max_body)
    if batch is None:
        return [bronze_record(remote_topic=remote_topic, payload=payload,
                              user_properties=props, ingest_ms=ingest_ms, lander_id=lander_id)]
    return [
        _record(batch.gateway, batch.epoch, row.seq, row.topic, row.received_ms,
                batch.remote_topic(row.topic), row.payload, ingest_ms, lander_id)
        for row in batch.rows
    ]


#: built once: json.dumps with options builds a new encoder per call (the lander's hot path)
_LINE_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))
# The string encoder `_LINE_ENCODER` uses (ensure_ascii=False): the C one when there is one.
_json_string = (getattr(json.encoder, "c_encode_basestring", None)
                or json.encoder.py_encode_basestring)


def encode_record(record: BronzeRecord) -> bytes:
    """One JSON line (UTF-8, trailing newline) with the fields in contract order."""
    ordered = {name: record.get(name) for name in c.BRONZE_FIELDS}
    return (_LINE_ENCODER.encode(ordered) + "\n").encode()


def bronze_lines(
    *,
    remote_topic: str,
    payload: bytes,
    user_properties: Iterable[tuple[str, str]] | None,
    ingest_ms: int,
    lander_id: str,
    max_body: int = MAX_BODY,
) -> list[bytes]:
    """The encoded bronze lines of one received message: byte for byte
    ``[encode_record(r) for r in bronze_records(...)]``, made faster for a batch.

    A batch's rows share their gateway, epoch, ingest time and lander, and mostly a few
    topics: those are encoded once per batch (topics once per distinct topic) and each line
    is put together from the pieces, instead of building and encoding a dict per row, which
    was most of the lander's time on batched traffic (docs/cloud.md). Raises
    :class:`~cloud_spark.batch_format.BatchError` like :func:`bronze_records`.
    """
    props = list(user_properties or ())
    batch = _batch_of(payload, props, max_body)
    if batch is None:
        return [encode_record(bronze_record(remote_topic=remote_topic, payload=payload,
                                            user_properties=props, ingest_ms=ingest_ms,
                                            lander_id=lander_id))]
    head = f'{{"gateway":{_json_string(batch.gateway)},"epoch":{_json_string(batch.epoch)},"seq":'
    tail = f',"ingest_ms":{ingest_ms},"lander_id":{_json_string(lander_id)}}}\n'
    # local topic -> the encoded pieces before and after its row's received_ms
    topics: dict[str, tuple[str, str]] = {}
    lines = []
    for row in batch.rows:
        pieces = topics.get(row.topic)
        if pieces is None:
            pieces = topics[row.topic] = (
                f',"local_topic":{_json_string(row.topic)},"received_ms":',
                f',"remote_topic":{_json_string(batch.remote_topic(row.topic))},"payload":')
        text, encoding = payload_text(row.payload)
        lines.append(f'{head}{row.seq}{pieces[0]}{row.received_ms}{pieces[1]}'
                     f'{_json_string(text)},"payload_encoding":"{encoding}"{tail}'.encode())
    return lines


def partition_of(ingest_ms: int) -> tuple[str, str]:
    """``(ingest_date, ingest_hour)`` partition values (UTC) for an ingest time in ms."""
    moment = datetime.fromtimestamp(ingest_ms / 1000, tz=UTC)
    return moment.strftime("%Y-%m-%d"), moment.strftime("%H")


def partition_dir(ingest_ms: int) -> str:
    """Relative partition directory of an ingest time, e.g. ``ingest_date=…/ingest_hour=07``."""
    day, hour = partition_of(ingest_ms)
    return f"{c.BRONZE_PARTITIONS[0]}={day}/{c.BRONZE_PARTITIONS[1]}={hour}"
