"""The batch encoder (bridge/uplink/batch.py) against the golden vectors, and its planning."""

from __future__ import annotations

import zlib

import pytest
import zstandard
from pydantic import ValidationError

from bridge.uplink import batch
from bridge.uplink.batch import encode, plan, row_size, runs
from bridge.uplink.config import UplinkConfig
from cloud_spark import batch_format
from cloud_spark.batch_format import decode_batch
from gateway.base.outbox import OutboxRecord
from tests.vectors import batch as v


def record(seq: int, topic: str = "devices/m1/p", payload: bytes = b"x", received_ms: int = 0,
           retain: bool = False) -> OutboxRecord:
    return OutboxRecord(seq, "rule", topic, payload, 1, retain, received_ms)


GOLDEN_RECORDS = [record(r.seq, r.topic, r.payload, r.received_ms) for r in v.ROWS]


def test_the_uncompressed_batch_is_the_golden_bytes() -> None:
    assert encode(v.GATEWAY, v.EPOCH, v.STRIP, v.PREFIX, GOLDEN_RECORDS, "none") == v.NONE_BATCH


@pytest.mark.parametrize(("codec", "inflate"), [
    ("zlib", zlib.decompress),
    ("zstd", lambda data: zstandard.ZstdDecompressor().decompress(data)),
])
def test_compressed_batches_carry_the_golden_header_and_body(codec: str, inflate: object) -> None:
    data = encode(v.GATEWAY, v.EPOCH, v.STRIP, v.PREFIX, GOLDEN_RECORDS, codec)
    golden = v.GOOD[codec]
    assert data[:10] == golden[:10]
    assert callable(inflate)
    assert inflate(data[10:]) == v.BODY


def test_a_large_batch_round_trips_through_the_cloud_decoder() -> None:
    records = [record(seq, f"devices/m{seq % 7}/p", b'{"value": %d}' % seq, 1000 + seq * 3)
               for seq in [*range(1, 500), *range(600, 1100, 2)]]
    for codec in ("none", "zlib", "zstd"):
        decoded = decode_batch(encode("gw", "ep", "", "site/", records, codec))
        assert [(r.seq, r.topic, r.received_ms, r.payload) for r in decoded.rows] == [
            (r.seq, r.topic, r.received_ms, r.payload) for r in records
        ]


def test_consecutive_seqs_become_runs() -> None:
    assert runs([1, 2, 3, 5, 6, 9]) == [(1, 3), (5, 2), (9, 1)]
    assert runs([]) == []


def test_plan_cuts_by_count_and_bytes_and_sorts_each_batch() -> None:
    rows = [record(seq) for seq in range(10, 0, -1)]  # newest first, as such a rule reads
    assert [[r.seq for r in group] for group in plan(rows, 4, 1 << 20)] == [
        [7, 8, 9, 10], [3, 4, 5, 6], [1, 2]
    ]
    per_row = row_size(rows[0])
    assert [len(group) for group in plan(rows, 100, 3 * per_row)] == [3, 3, 3, 1]
    big = record(99, payload=b"y" * 5000)
    assert [len(group) for group in plan([rows[0], big, rows[1]], 100, 1024)] == [1, 1, 1]


def test_the_encoder_and_the_cloud_decoder_agree_on_the_constants() -> None:
    assert (batch.MAGIC, batch.VERSION, batch.CODECS, batch.HEADER.format) == (
        batch_format.MAGIC, batch_format.VERSION, batch_format.CODECS, batch_format.HEADER.format
    )


def test_zstd_falls_back_to_zlib_without_the_zstandard_package(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(batch, "zstandard", None)
    monkeypatch.setattr(batch, "_warned_zstd", False)
    data = encode(v.GATEWAY, v.EPOCH, v.STRIP, v.PREFIX, GOLDEN_RECORDS, "zstd")
    encode(v.GATEWAY, v.EPOCH, v.STRIP, v.PREFIX, GOLDEN_RECORDS, "zstd")
    assert data[:10] == v.ZLIB_BATCH[:10]  # codec 01
    assert zlib.decompress(data[10:]) == v.BODY
    assert caplog.text.count("zstandard package is missing") == 1  # said once


def test_bad_batch_settings_name_their_key() -> None:
    with pytest.raises(ValidationError) as caught:
        UplinkConfig.model_validate({
            "remotes": [{"addresses": ["h:1883"]}],
            "forward": [{"filter": "devices/#", "batch": {"max_delay": 0, "codec": "lz4"}}],
        })
    assert {error["loc"] for error in caught.value.errors()} == {
        ("forward", 0, "batch", "max_delay"), ("forward", 0, "batch", "codec")
    }
    rule = UplinkConfig.model_validate({
        "remotes": [{"addresses": ["h:1883"]}], "forward": [{"filter": "d/#", "batch": {}}],
    }).forward[0]
    assert rule.batch is not None and (rule.batch.max_count, rule.batch.max_delay) == (1000, 1.0)
