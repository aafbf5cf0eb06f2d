"""The bytes of a series of samples (pure: no I/O, no clock).

A series is one point's samples of one kind, in time order:

- numeric (`NUMERIC`: int and float values, None as NaN): `n` (u32), the timestamps as
  deltas from the previous one (i64 each, the first from 0), the values' IEEE 754 bits each
  XORed with the previous value's (u64: a value that repeats or moves a little becomes mostly
  zero bytes, which zlib then squeezes), the qualities (one byte each: good 0, uncertain 1,
  bad 2);
- other (`OTHER`: booleans, strings, JSON arrays and objects): `n`, the timestamp deltas, the
  qualities, then the values as one JSON array.

A frame (what one flush writes) is every point's series since the previous flush, each behind
a `(point id, kind, length)` header, the whole compressed with zlib; a block (one point's
series after compaction) is one series compressed alone.
"""

from __future__ import annotations

import json
import math
import struct
import zlib
from array import array
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

NUMERIC: Final = 0
OTHER: Final = 1
QUALITY_CODES: Final = {"good": 0, "uncertain": 1, "bad": 2}
QUALITY_NAMES: Final = ("good", "uncertain", "bad")
LEVEL: Final = 6  # zlib: 1 was 20 % larger on sensor-like data for little CPU saved
_HEADER = struct.Struct("<IBI")
_COUNT = struct.Struct("<I")


Sample = tuple[str, str | None, int, Any, str]  # (device/point, unit, ts ms, value, quality)


@dataclass(slots=True)
class Series:
    """Samples of one point and kind: times (epoch ms), values, quality codes."""

    kind: int
    ts: list[int] = field(default_factory=list)
    values: list[Any] = field(default_factory=list)  # floats (NaN: none) or JSON values
    quality: bytearray = field(default_factory=bytearray)

    def add(self, ts_ms: int, value: Any, quality: int) -> None:
        self.ts.append(ts_ms)
        self.values.append(value)
        self.quality.append(quality)

    def extend(self, other: Series) -> None:
        self.ts.extend(other.ts)
        self.values.extend(other.values)
        self.quality.extend(other.quality)

    def sort(self) -> None:
        """Into time order (samples of one flush usually are; a clock step can break it)."""
        if any(a > b for a, b in zip(self.ts, self.ts[1:], strict=False)):
            order = sorted(range(len(self.ts)), key=self.ts.__getitem__)
            self.ts = [self.ts[i] for i in order]
            self.values = [self.values[i] for i in order]
            self.quality = bytearray(self.quality[i] for i in order)


def kind_of(value: object) -> int:
    """NUMERIC for int and float (and None), OTHER for everything else (bool included)."""
    if value is None or (isinstance(value, int | float) and not isinstance(value, bool)):
        return NUMERIC
    return OTHER


def encode_series(series: Series) -> bytes:
    """The uncompressed bytes of one series (see the module comment)."""
    n = len(series.ts)
    deltas = array("q", [0] * n)
    previous = 0
    for i, ts in enumerate(series.ts):
        deltas[i] = ts - previous
        previous = ts
    parts = [_COUNT.pack(n), deltas.tobytes()]
    if series.kind == NUMERIC:
        floats = array("d", [math.nan if v is None else float(v) for v in series.values])
        bits = array("Q")
        bits.frombytes(floats.tobytes())
        last = 0
        for i, word in enumerate(bits):
            bits[i] = word ^ last
            last = word
        parts += [bits.tobytes(), bytes(series.quality)]
    else:
        parts += [bytes(series.quality),
                  json.dumps(series.values, separators=(",", ":")).encode()]
    return b"".join(parts)


def decode_series(kind: int, data: bytes | memoryview) -> Series:
    """The series `encode_series` made of `data`."""
    view = memoryview(data)
    (n,) = _COUNT.unpack_from(view, 0)
    offset = _COUNT.size
    deltas = array("q")
    deltas.frombytes(view[offset:offset + 8 * n])
    offset += 8 * n
    ts: list[int] = []
    total = 0
    for delta in deltas:
        total += delta
        ts.append(total)
    if kind == NUMERIC:
        bits = array("Q")
        bits.frombytes(view[offset:offset + 8 * n])
        offset += 8 * n
        last = 0
        for i, word in enumerate(bits):
            last ^= word
            bits[i] = last
        floats = array("d")
        floats.frombytes(bits.tobytes())
        values: list[Any] = [None if math.isnan(v) else v for v in floats]
        quality = bytearray(view[offset:offset + n])
    else:
        quality = bytearray(view[offset:offset + n])
        values = json.loads(bytes(view[offset + n:]))
    return Series(kind, ts, values, quality)


def encode_block(series: Series) -> bytes:
    """One series, compressed alone (a row of `blocks`)."""
    return zlib.compress(encode_series(series), LEVEL)


def decode_block(kind: int, data: bytes) -> Series:
    return decode_series(kind, zlib.decompress(data))


def encode_frame(entries: Sequence[tuple[int, Series]]) -> bytes:
    """Every (point id, series) of one flush, compressed together (a row of `frames`)."""
    parts: list[bytes] = []
    for point_id, series in entries:
        body = encode_series(series)
        parts += [_HEADER.pack(point_id, series.kind, len(body)), body]
    return zlib.compress(b"".join(parts), LEVEL)


def decode_frame(data: bytes, wanted: int | None = None) -> Iterator[tuple[int, Series]]:
    """The (point id, series) entries of a frame (only point `wanted`'s, when given)."""
    raw = memoryview(zlib.decompress(data))
    offset = 0
    while offset < len(raw):
        point_id, kind, size = _HEADER.unpack_from(raw, offset)
        offset += _HEADER.size
        if wanted is None or wanted == point_id:
            yield point_id, decode_series(kind, raw[offset:offset + size])
        offset += size
