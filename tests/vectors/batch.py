"""Golden vectors of the batched uplink message (format version 1), shared by the gateway's
encoder tests (tests/bridge/uplink/test_batch.py) and the cloud decoder's tests
(tests/cloud_spark/test_batch_format.py).

`BODY` was written by hand from docs/message-format.md, one commented field per line; it is
never produced by the encoder. `NONE_BATCH` is the whole message without compression (the
encoder must produce exactly these bytes); `ZLIB_BATCH` and `ZSTD_BATCH` wrap the same body
compressed by zlib and zstandard themselves (a compressor's exact output may change with its
version, so the encoder is held to the header and the decompressed body, the decoder to these
bytes). `BAD` lists bad batches with the quarantine reason each must get.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

import zstandard

from tests.vectors.golden import h

GATEWAY = "gw-7"
EPOCH = "e-1"
STRIP = "devices/"
PREFIX = "site7/"
BASE_MS = 1_717_430_400_123


@dataclass(frozen=True)
class Row:
    """A row as the decoder must return it."""

    seq: int
    topic: str
    received_ms: int
    payload: bytes


ROWS = (
    Row(5, "devices/m1/p", BASE_MS, b'{"v":1}'),
    Row(6, "devices/m1/q", BASE_MS + 10, b"\xff\x00"),
    Row(8, "devices/m1/p", BASE_MS - 5, b""),
)
REMOTE_TOPICS = ("site7/m1/p", "site7/m1/q", "site7/m1/p")

BODY = bytes.fromhex(h(
    "00 04 67 77 2d 37",                          # gateway "gw-7"
    "00 03 65 2d 31",                             # epoch "e-1"
    "00 08 64 65 76 69 63 65 73 2f",              # strip "devices/"
    "00 06 73 69 74 65 37 2f",                    # prefix "site7/"
    "00 00 01 8f de d4 34 7b",                    # base_received_ms 1717430400123
    "00 00 00 02",                                # 2 runs
    "00 00 00 00 00 00 00 05  00 00 00 02",       # seqs 5, 6
    "00 00 00 00 00 00 00 08  00 00 00 01",       # seq 8
    "00 02",                                      # 2 topics
    "00 0c 64 65 76 69 63 65 73 2f 6d 31 2f 70",  # 0: "devices/m1/p"
    "00 0c 64 65 76 69 63 65 73 2f 6d 31 2f 71",  # 1: "devices/m1/q"
    "00 00  00 01  00 00",                        # topic index per row
    "00 00 00 00 00 00 00 00",                    # received delta +0
    "00 00 00 00 00 00 00 0a",                    # +10
    "ff ff ff ff ff ff ff fb",                    # -5
    "00 00 00 07  00 00 00 02  00 00 00 00",      # payload lengths 7, 2, 0
    "7b 22 76 22 3a 31 7d",                       # {"v":1}
    "ff 00",                                      # binary
))


def header(codec: int, body_len: int = len(BODY), version: int = 1) -> bytes:
    """magic "\\0OPB", version, codec, body length."""
    return bytes.fromhex(h("00 4f 50 42")) + struct.pack(">BBI", version, codec, body_len)


NONE_BATCH = header(0) + BODY
ZLIB_BATCH = header(1) + zlib.compress(BODY, 6)
ZSTD_BATCH = header(2) + zstandard.ZstdCompressor(level=3).compress(BODY)
GOOD = {"none": NONE_BATCH, "zlib": ZLIB_BATCH, "zstd": ZSTD_BATCH}


def _swap_runs(body: bytes) -> bytes:
    first = bytes.fromhex(h("00 00 00 00 00 00 00 05  00 00 00 02"))
    second = bytes.fromhex(h("00 00 00 00 00 00 00 08  00 00 00 01"))
    return body.replace(first + second, second + first)


def _overlap_runs(body: bytes) -> bytes:
    second = bytes.fromhex(h("00 00 00 00 00 00 00 08  00 00 00 01"))
    return body.replace(second, bytes.fromhex(h("00 00 00 00 00 00 00 06  00 00 00 01")))


_BOMB = zlib.compress(b"\0" * (8 << 20), 9)  # 8 MiB of zeros in ~8 KiB

#: (name, payload, reason, max_body for the decoder)
BAD: tuple[tuple[str, bytes, str, int], ...] = (
    ("header cut short", NONE_BATCH[:7], "truncated", 1 << 20),
    ("body cut short", NONE_BATCH[:-3], "truncated", 1 << 20),
    ("zlib stream cut short", ZLIB_BATCH[:-6], "truncated", 1 << 20),
    ("zstd frame cut short", ZSTD_BATCH[:-6], "truncated", 1 << 20),
    ("zlib garbage", header(1) + b"not zlib at all", "decompress_failed", 1 << 20),
    ("zstd garbage", header(2) + b"not zstd at all", "decompress_failed", 1 << 20),
    ("zip bomb under a small declared size", header(1, 1000) + _BOMB, "too_large", 1 << 20),
    ("declared size over the limit", header(1, 8 << 20) + _BOMB, "too_large", 1 << 20),
    ("unknown version", header(0, version=2) + BODY, "unknown_version", 1 << 20),
    ("unknown codec", header(9) + BODY, "unknown_codec", 1 << 20),
    ("runs out of order", header(0) + _swap_runs(BODY), "ids_out_of_order", 1 << 20),
    ("overlapping runs", header(0) + _overlap_runs(BODY), "ids_out_of_order", 1 << 20),
    ("trailing bytes", header(0, len(BODY) + 1) + BODY + b"!", "malformed", 1 << 20),
    ("no rows", header(0, 41) + BODY[:37] + bytes(4), "malformed", 1 << 20),
    ("a run of 4 billion rows", header(0, 53) + BODY[:37] + bytes.fromhex(h(
        "00 00 00 01  00 00 00 00 00 00 00 05  ff ff ff ff")), "truncated", 1 << 20),
    ("no gateway", header(0, len(BODY) - 4) + bytes(2) + BODY[6:], "malformed", 1 << 20),
)
