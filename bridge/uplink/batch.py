"""Encode outbox rows as one batched uplink message (format version 1). Pure.

The layout is documented in docs/message-format.md ("Batched messages") and decoded on the
cloud side by `cloud_spark/batch_format.py` (neither package may import the other; the golden
vectors in tests/vectors/batch.py hold both to the same bytes). In short: a 10-byte header
(magic, version, codec, body length) and a body with the id shared by the rows (gateway,
epoch), the rule's topic map, the rows' seqs as runs of consecutive numbers, a topic table,
then columns (topic index, received time delta, payload length) and the payloads.

`plan` cuts the rows an outbox read returned into batches by count and bytes; `encode` turns
one batch into the PUBLISH payload.
"""

from __future__ import annotations

import importlib
import logging
import struct
import zlib
from collections.abc import Sequence
from types import ModuleType
from typing import Final

from gateway.base.outbox import OutboxRecord

try:  # a runtime dependency; without it "zstd" falls back to zlib (said once in the log)
    zstandard: ModuleType | None = importlib.import_module("zstandard")
except ImportError:  # pragma: no cover - exercised only where zstandard is absent
    zstandard = None

log = logging.getLogger("outpost.uplink")

MAGIC: Final = b"\x00OPB"
VERSION: Final = 1
CODECS: Final = {"none": 0, "zlib": 1, "zstd": 2}
ZSTD_LEVEL: Final = 3
ZLIB_LEVEL: Final = 6
HEADER: Final = struct.Struct(">4sBBI")
#: body bytes a row costs besides its payload (topic index, delta, payload length)
ROW_OVERHEAD: Final = 14
MAX_TOPICS: Final = 0xFFFF

_U16 = struct.Struct(">H")
_RUN_HEAD = struct.Struct(">qI")
_RUN = struct.Struct(">QI")
_warned_zstd = False


def effective_codec(compression: str) -> str:
    """The codec really used: "zstd" becomes "zlib" when zstandard is not installed."""
    global _warned_zstd  # one warning per process
    if compression == "zstd" and zstandard is None:
        if not _warned_zstd:
            log.warning("uplink: the zstandard package is missing: batches use zlib instead")
            _warned_zstd = True
        return "zlib"
    return compression


def _text(value: str) -> bytes:
    data = value.encode("utf-8")
    if len(data) > 0xFFFF:
        raise ValueError(f"{value[:40]!r}…: longer than 65535 bytes")
    return _U16.pack(len(data)) + data


def runs(seqs: Sequence[int]) -> list[tuple[int, int]]:
    """Ascending seqs as (first, count) runs of consecutive numbers."""
    out: list[tuple[int, int]] = []
    for seq in seqs:
        if out and out[-1][0] + out[-1][1] == seq:
            out[-1] = (out[-1][0], out[-1][1] + 1)
        else:
            out.append((seq, 1))
    return out


def body(
    gateway: str, epoch: str, strip: str, prefix: str, records: Sequence[OutboxRecord]
) -> bytes:
    """The uncompressed body for `records` (ascending seq, at most 65535 topics)."""
    topics: dict[str, int] = {}
    index = [topics.setdefault(r.topic, len(topics)) for r in records]
    if len(topics) > MAX_TOPICS:
        raise ValueError(f"{len(topics)} topics in one batch, at most {MAX_TOPICS}")
    base = records[0].received_ms if records else 0
    seq_runs = runs([r.seq for r in records])
    n = len(records)
    parts = [
        _text(gateway), _text(epoch), _text(strip), _text(prefix),
        _RUN_HEAD.pack(base, len(seq_runs)),
        *(_RUN.pack(first, count) for first, count in seq_runs),
        _U16.pack(len(topics)),
        *(_text(topic) for topic in topics),
        struct.pack(f">{n}H", *index),
        struct.pack(f">{n}q", *(r.received_ms - base for r in records)),
        struct.pack(f">{n}I", *(len(r.payload) for r in records)),
        *(r.payload for r in records),
    ]
    return b"".join(parts)


def encode(
    gateway: str,
    epoch: str,
    strip: str,
    prefix: str,
    records: Sequence[OutboxRecord],
    compression: str,
) -> bytes:
    """One batch: header and (compressed) body. `records` must be in ascending seq order."""
    raw = body(gateway, epoch, strip, prefix, records)
    codec = effective_codec(compression)
    data: bytes
    if codec == "zstd" and zstandard is not None:
        data = zstandard.ZstdCompressor(level=ZSTD_LEVEL).compress(raw)
    elif codec == "zlib":
        data = zlib.compress(raw, ZLIB_LEVEL)
    else:
        data = raw
    return HEADER.pack(MAGIC, VERSION, CODECS[codec], len(raw)) + data


def row_size(record: OutboxRecord) -> int:
    """What a record adds to a body at most (its topic counted as if new)."""
    return ROW_OVERHEAD + 2 + len(record.topic.encode("utf-8")) + len(record.payload)


def plan(
    records: Sequence[OutboxRecord], max_count: int, max_bytes: int
) -> list[list[OutboxRecord]]:
    """Cut `records` (in the order read) into batches of at most `max_count` rows and about
    `max_bytes` body bytes (a single larger row goes alone), each sorted by seq."""
    batches: list[list[OutboxRecord]] = []
    current: list[OutboxRecord] = []
    size = 0
    for record in records:
        cost = row_size(record)
        if current and (len(current) >= max_count or size + cost > max_bytes):
            batches.append(current)
            current, size = [], 0
        current.append(record)
        size += cost
    if current:
        batches.append(current)
    for batch in batches:
        batch.sort(key=lambda r: r.seq)
    return batches
