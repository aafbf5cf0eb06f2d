"""The cloud's batch decoder against the golden vectors (tests/vectors/batch.py)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cloud_spark.batch_format import BatchError, decode_batch, is_batch
from tests.vectors import batch as v


@pytest.mark.parametrize("codec", sorted(v.GOOD))
def test_golden_batches_decode_to_the_rows(codec: str) -> None:
    decoded = decode_batch(v.GOOD[codec])
    assert (decoded.gateway, decoded.epoch, decoded.strip, decoded.prefix) == (
        v.GATEWAY, v.EPOCH, v.STRIP, v.PREFIX
    )
    rows = [v.Row(r.seq, r.topic, r.received_ms, r.payload) for r in decoded.rows]
    assert rows == list(v.ROWS)
    assert [decoded.remote_topic(r.topic) for r in decoded.rows] == list(v.REMOTE_TOPICS)


@pytest.mark.parametrize(("name", "payload", "reason", "limit"), v.BAD, ids=[b[0] for b in v.BAD])
def test_bad_batches_raise_with_their_reason(
    name: str, payload: bytes, reason: str, limit: int
) -> None:
    with pytest.raises(BatchError) as caught:
        decode_batch(payload, max_body=limit)
    assert caught.value.reason == reason, caught.value


def test_every_prefix_of_a_batch_is_refused_as_truncated_or_bad() -> None:
    for codec, payload in v.GOOD.items():
        for cut in range(len(payload)):
            with pytest.raises(BatchError):
                decode_batch(payload[:cut])
            assert codec  # (names the codec in a failure's locals)


def test_a_topic_that_lacks_the_strip_part_keeps_its_topic_under_the_prefix() -> None:
    decoded = decode_batch(v.NONE_BATCH)
    assert decoded.remote_topic("other/x") == "site7/other/x"


def test_is_batch_looks_at_the_magic_only() -> None:
    assert is_batch(v.NONE_BATCH)
    assert not is_batch(b'{"gateway": "gw-7"}')
    assert not is_batch(b"\x00OP")


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(sorted(v.GOOD)), st.integers(0, 400), st.binary(min_size=1, max_size=4))
def test_a_damaged_batch_decodes_or_raises_batch_error_only(
    codec: str, offset: int, noise: bytes
) -> None:
    payload = bytearray(v.GOOD[codec])
    at = offset % len(payload)
    payload[at:at + len(noise)] = noise
    try:
        decoded = decode_batch(bytes(payload), max_body=1 << 20)
    except BatchError:
        return
    seqs = [row.seq for row in decoded.rows]
    assert seqs == sorted(set(seqs))  # whatever decodes names each id once, in order
