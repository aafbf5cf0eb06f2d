"""Decode a batched uplink message: many outbox rows, each with its own id, in one PUBLISH.

Pure functions: the standard library plus ``zstandard`` (when that package is missing, only
zstd batches fail, with a clear reason). The layout (version 1) is described in
``docs/message-format.md`` ("Batched messages"); the gateway's encoder is
``bridge/uplink/batch.py``, and ``tests/vectors/batch.py`` holds golden byte vectors both sides
are tested against.

Header (10 bytes, not compressed)::

    magic     4 bytes  00 4F 50 42  ("\\0OPB")
    version   1 byte   01
    codec     1 byte   00 none, 01 zlib, 02 zstd
    body_len  4 bytes  u32 big-endian: length of the body once decompressed

The body (big-endian, columns rather than rows so that each decodes with one ``struct`` call
and compresses well)::

    gateway, epoch, strip, prefix   4 x (u16 length + UTF-8)
    base_received_ms                i64
    run_count                       u32
    runs                            run_count x (u64 first_seq, u32 count)
    topic_count                     u16
    topics                          topic_count x (u16 length + UTF-8)
    topic_index                     n x u16       (n = sum of the run counts)
    received_delta_ms               n x i64       (received_ms - base_received_ms)
    payload_len                     n x u32
    payloads                        the n payloads, concatenated

Row ``i`` gets the ``i``-th seq of the runs in order. Runs must be strictly increasing and not
overlap (``ids_out_of_order`` otherwise), so a batch never names an id twice. The remote topic
of a row is the local topic mapped like the gateway maps it for a single message: ``strip``
removed when the topic starts with it, then ``prefix`` put in front.

Every way a batch can be bad raises :class:`BatchError` with a short ``reason``; nothing is
half-decoded.
"""

from __future__ import annotations

import importlib
import struct
import zlib
from dataclasses import dataclass
from types import ModuleType
from typing import Final

try:  # the cloud extra installs it; without it zstd batches are refused with a reason
    zstandard: ModuleType | None = importlib.import_module("zstandard")
except ImportError:  # pragma: no cover - exercised only where zstandard is absent
    zstandard = None

MAGIC: Final = b"\x00OPB"
VERSION: Final = 1
CODEC_NONE: Final = 0
CODEC_ZLIB: Final = 1
CODEC_ZSTD: Final = 2
CODECS: Final = {"none": CODEC_NONE, "zlib": CODEC_ZLIB, "zstd": CODEC_ZSTD}
HEADER: Final = struct.Struct(">4sBBI")
#: the largest body a decoder accepts by default (a batch declaring or inflating to more is
#: refused as ``too_large``: a zip bomb costs at most this much memory)
MAX_BODY: Final = 64 << 20

# quarantine reasons
TRUNCATED: Final = "truncated"
UNKNOWN_VERSION: Final = "unknown_version"
UNKNOWN_CODEC: Final = "unknown_codec"
DECOMPRESS: Final = "decompress_failed"
TOO_LARGE: Final = "too_large"
OUT_OF_ORDER: Final = "ids_out_of_order"
MALFORMED: Final = "malformed"

_U16 = struct.Struct(">H")
_RUN_HEAD = struct.Struct(">qI")  # base_received_ms, run_count
_RUN = struct.Struct(">QI")
_ROW_MIN = 14  # body bytes every row costs at least: topic index, delta, payload length


class BatchError(ValueError):
    """A batch that cannot be decoded; ``reason`` is one of the constants above."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


@dataclass(frozen=True, slots=True)
class BatchRow:
    """One outbox row of a batch."""

    seq: int
    topic: str
    received_ms: int
    payload: bytes


@dataclass(frozen=True, slots=True)
class Batch:
    """A decoded batch: the id shared by its rows, the topic map, the rows in seq order."""

    gateway: str
    epoch: str
    strip: str
    prefix: str
    rows: list[BatchRow]

    def remote_topic(self, local_topic: str) -> str:
        """The remote topic the gateway would have used for this row sent alone."""
        if self.strip and local_topic.startswith(self.strip):
            local_topic = local_topic[len(self.strip):]
        return self.prefix + local_topic


def is_batch(payload: bytes) -> bool:
    """True when the payload starts like a batch (then :func:`decode_batch` must accept it,
    or it is quarantined)."""
    return payload[:4] == MAGIC


def decode_batch(payload: bytes, max_body: int = MAX_BODY) -> Batch:
    """Decode a batch; raises :class:`BatchError` for every kind of bad input."""
    if len(payload) < HEADER.size:
        raise BatchError(TRUNCATED, f"{len(payload)} bytes, the header alone is {HEADER.size}")
    magic, version, codec, body_len = HEADER.unpack_from(payload)
    if magic != MAGIC:
        raise BatchError(MALFORMED, "no batch magic")
    if version != VERSION:
        raise BatchError(UNKNOWN_VERSION, f"version {version}, this decoder reads {VERSION}")
    if body_len > max_body:
        raise BatchError(TOO_LARGE, f"declares a {body_len}-byte body, the limit is {max_body}")
    body = _decompress(codec, memoryview(payload)[HEADER.size:], body_len)
    return _parse_body(body)


def _decompress(codec: int, data: memoryview, body_len: int) -> bytes:
    """The body, exactly ``body_len`` bytes, never inflating past ``body_len + 1``."""
    if codec == CODEC_NONE:
        body = bytes(data)
    elif codec == CODEC_ZLIB:
        inflater = zlib.decompressobj()
        try:
            body = inflater.decompress(data, body_len + 1)
        except zlib.error as exc:
            raise BatchError(DECOMPRESS, f"zlib: {exc}") from None
        if len(body) <= body_len and not inflater.eof:
            raise BatchError(TRUNCATED, "the zlib stream ends early")
        if inflater.unused_data:
            raise BatchError(MALFORMED, "bytes after the end of the zlib stream")
    elif codec == CODEC_ZSTD:
        if zstandard is None:
            raise BatchError(DECOMPRESS, "zstd batch, but the zstandard package is missing")
        try:
            with zstandard.ZstdDecompressor().stream_reader(bytes(data)) as reader:
                body = reader.read(body_len + 1)
                while len(body) <= body_len:  # a reader may return less than asked
                    more = reader.read(body_len + 1 - len(body))
                    if not more:
                        break
                    body += more
        except zstandard.ZstdError as exc:
            raise BatchError(DECOMPRESS, f"zstd: {exc}") from None
    else:
        raise BatchError(UNKNOWN_CODEC, f"compression codec {codec}")
    if len(body) > body_len:
        raise BatchError(TOO_LARGE, f"inflates past its declared {body_len} bytes")
    if len(body) < body_len:
        raise BatchError(TRUNCATED, f"body is {len(body)} of {body_len} bytes")
    return body


class _Reader:
    """A cursor over the body that raises ``truncated`` instead of reading past the end."""

    def __init__(self, body: bytes) -> None:
        self.body = body
        self.pos = 0

    def take(self, size: int) -> int:
        start = self.pos
        if size < 0 or start + size > len(self.body):
            raise BatchError(TRUNCATED, f"needs {size} bytes at offset {start} of "
                             f"{len(self.body)}")
        self.pos = start + size
        return start

    def unpack(self, layout: struct.Struct) -> tuple[int, ...]:
        return layout.unpack_from(self.body, self.take(layout.size))

    def text(self) -> str:
        (size,) = self.unpack(_U16)
        start = self.take(size)
        try:
            return self.body[start:start + size].decode("utf-8")
        except UnicodeDecodeError:
            raise BatchError(MALFORMED, f"a string at offset {start} is not UTF-8") from None

    def column(self, code: str, count: int) -> tuple[int, ...]:
        layout = struct.Struct(f">{count}{code}")
        return layout.unpack_from(self.body, self.take(layout.size))


def _parse_body(body: bytes) -> Batch:
    reader = _Reader(body)
    gateway, epoch, strip, prefix = (reader.text() for _ in range(4))
    if not gateway or not epoch:
        raise BatchError(MALFORMED, "an empty gateway or epoch")
    base_ms, run_count = reader.unpack(_RUN_HEAD)
    if run_count == 0:
        raise BatchError(MALFORMED, "a batch without rows")
    if run_count * _RUN.size > len(body) - reader.pos:
        raise BatchError(TRUNCATED, f"{run_count} runs do not fit in the body")
    seqs: list[int] = []
    next_free = 1  # seqs start at 1; each run starts after the previous one ends
    for _ in range(run_count):
        first, count = reader.unpack(_RUN)
        if count == 0:
            raise BatchError(MALFORMED, f"an empty run at seq {first}")
        if first < next_free:
            raise BatchError(OUT_OF_ORDER, f"a run starts at seq {first}, expected ≥ {next_free}")
        if (len(seqs) + count) * _ROW_MIN > len(body):  # checked before making the list
            raise BatchError(TRUNCATED, f"{len(seqs) + count}+ rows do not fit in the body")
        seqs.extend(range(first, first + count))
        next_free = first + count
    (topic_count,) = reader.unpack(_U16)
    topics = [reader.text() for _ in range(topic_count)]
    rows = len(seqs)
    topic_index = reader.column("H", rows)
    deltas = reader.column("q", rows)
    sizes = reader.column("I", rows)
    if sum(sizes) != len(body) - reader.pos:
        raise BatchError(TRUNCATED if sum(sizes) > len(body) - reader.pos else MALFORMED,
                         f"payloads add up to {sum(sizes)} bytes, {len(body) - reader.pos} left")
    if rows and max(topic_index) >= topic_count:
        raise BatchError(MALFORMED, f"topic index {max(topic_index)} of {topic_count} topics")
    out: list[BatchRow] = []
    pos = reader.pos
    for seq, index, delta, size in zip(seqs, topic_index, deltas, sizes, strict=True):
        out.append(BatchRow(seq, topics[index], base_ms + delta, body[pos:pos + size]))
        pos += size
    return Batch(gateway, epoch, strip, prefix, out)


__all__ = [
    "CODECS", "MAGIC", "MAX_BODY", "VERSION", "Batch", "BatchError", "BatchRow", "decode_batch",
    "is_batch",
]
