"""Bronze records from received MQTT messages (cloud_spark.records), pure functions."""

from __future__ import annotations

import base64
import json

import pytest

from bench.cloud.tsbs_iot import bronze_line
from bridge.uplink.batch import encode as encode_batch
from cloud_spark.batch_format import BatchError
from cloud_spark.records import (
    bronze_lines,
    bronze_record,
    bronze_records,
    encode_record,
    partition_dir,
    partition_of,
    payload_text,
    unwrap_envelope,
)
from gateway.base.outbox import OutboxRecord
from tests.vectors import batch as batch_vectors

PROPS = [
    ("gateway", "gw-1"),
    ("epoch", "e-1"),
    ("seq", "7"),
    ("topic", "devices/m1/p"),
    ("received_ms", "1717430400123"),
]


def record(payload: bytes, props: list[tuple[str, str]] | None = None) -> dict[str, object]:
    return bronze_record(
        remote_topic="r/t", payload=payload, user_properties=props, ingest_ms=5, lander_id="L"
    )


def test_v5_user_properties_give_the_id_and_leave_the_payload_alone() -> None:
    assert record(b'{"value": 1}', PROPS) == {
        "gateway": "gw-1",
        "epoch": "e-1",
        "seq": 7,
        "local_topic": "devices/m1/p",
        "received_ms": 1717430400123,
        "remote_topic": "r/t",
        "payload": '{"value": 1}',
        "payload_encoding": "utf8",
        "ingest_ms": 5,
        "lander_id": "L",
    }


def test_v5_with_a_non_numeric_seq_keeps_what_it_has_and_a_null_seq() -> None:
    props = [(k, "x" if k == "seq" else v) for k, v in PROPS]
    got = record(b"1", props)
    assert (got["gateway"], got["epoch"], got["seq"]) == ("gw-1", "e-1", None)


def test_binary_payload_is_stored_as_base64() -> None:
    got = record(b"\xff\x00\x01", PROPS)
    assert got["payload_encoding"] == "base64"
    assert base64.b64decode(str(got["payload"])) == b"\xff\x00\x01"


def envelope(**overrides: object) -> bytes:
    env: dict[str, object] = {
        "gateway": "gw-1",
        "epoch": "e-1",
        "seq": 7,
        "topic": "devices/m1/p",
        "received_ms": 1717430400123,
        "encoding": "utf8",
        "payload": "online",
    }
    env.update(overrides)
    return json.dumps(env).encode()


def test_envelope_utf8_is_unwrapped() -> None:
    got = record(envelope())
    assert (got["gateway"], got["seq"], got["local_topic"], got["payload"]) == (
        "gw-1",
        7,
        "devices/m1/p",
        "online",
    )


def test_envelope_base64_is_decoded_to_text_when_it_is_utf8_else_kept_base64() -> None:
    text = record(envelope(encoding="base64", payload=base64.b64encode(b"hi").decode()))
    assert (text["payload"], text["payload_encoding"]) == ("hi", "utf8")
    raw = base64.b64encode(b"\xfe\xff").decode()
    binary = record(envelope(encoding="base64", payload=raw))
    assert (binary["payload"], binary["payload_encoding"]) == (raw, "base64")


@pytest.mark.parametrize(
    "bad",
    [
        envelope(seq="7"),
        envelope(seq=True),
        envelope(received_ms="1"),
        envelope(gateway=3),
        envelope(encoding="rot13"),
        envelope(encoding="base64", payload="***"),
        envelope(payload=5),
        json.dumps({"gateway": "gw-1", "seq": 1}).encode(),
        b"[1, 2]",
        b"{not json",
    ],
)
def test_a_broken_envelope_is_landed_raw_without_an_id(bad: bytes) -> None:
    got = record(bad)
    assert unwrap_envelope(bad) is None
    assert (got["gateway"], got["epoch"], got["seq"], got["local_topic"]) == (None,) * 4
    assert got["payload"] == bad.decode()


def test_properties_win_over_a_payload_that_looks_like_an_envelope() -> None:
    got = record(envelope(seq=99), PROPS)
    assert got["seq"] == 7
    assert json.loads(str(got["payload"]))["seq"] == 99


def test_encode_record_is_one_line_in_contract_order() -> None:
    line = encode_record(record('{"v": "é\\n"}'.encode(), PROPS))
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert list(json.loads(line)) == [
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
    ]


def test_partitions_are_utc_date_and_hour() -> None:
    assert partition_of(1_717_430_400_000) == ("2024-06-03", "16")
    assert partition_of(1_717_459_199_999) == ("2024-06-03", "23")
    assert partition_dir(1_717_459_200_000) == "ingest_date=2024-06-04/ingest_hour=00"


def test_payload_text() -> None:
    assert payload_text(b"abc") == ("abc", "utf8")
    assert payload_text(b"\x80") == ("gA==", "base64")


def test_the_benchmark_generator_writes_exactly_what_the_lander_writes() -> None:
    payload = '{"value":1.5,"unit":"%","ts":1,"quality":"good"}\\"'
    props = [(k, v) for k, v in PROPS]
    expected = encode_record(
        bronze_record(
            remote_topic="outpost/gw-1/devices/m1/p",
            payload=payload.encode(),
            user_properties=props,
            ingest_ms=42,
            lander_id="lander-gen",
        )
    )
    line = bronze_line(
        "gw-1", "e-1", 7, "devices/m1/p", 1717430400123, "outpost/gw-1/devices/m1/p", payload
    )
    assert line % 42 == expected


def records_of(
    payload: bytes, props: list[tuple[str, str]] | None = None
) -> list[dict[str, object]]:
    return bronze_records(remote_topic="site7/m1/p", payload=payload, user_properties=props,
                          ingest_ms=5, lander_id="L")


def test_a_batch_gives_the_records_its_rows_would_give_sent_alone() -> None:
    got = records_of(batch_vectors.ZSTD_BATCH)
    alone = [
        bronze_record(
            remote_topic=remote, payload=row.payload, ingest_ms=5, lander_id="L",
            user_properties=[("gateway", batch_vectors.GATEWAY), ("epoch", batch_vectors.EPOCH),
                             ("seq", str(row.seq)), ("topic", row.topic),
                             ("received_ms", str(row.received_ms))],
        )
        for row, remote in zip(batch_vectors.ROWS, batch_vectors.REMOTE_TOPICS, strict=True)
    ]
    assert got == alone
    assert [r["payload_encoding"] for r in got] == ["utf8", "base64", "utf8"]


def test_a_single_message_is_one_record_and_id_properties_win_over_the_batch_magic() -> None:
    assert records_of(b"21.5", PROPS) == [record(b"21.5", PROPS) | {"remote_topic": "site7/m1/p"}]
    looks_like_a_batch = records_of(batch_vectors.NONE_BATCH, PROPS)
    assert len(looks_like_a_batch) == 1 and looks_like_a_batch[0]["seq"] == 7


def test_a_bad_batch_raises_for_the_lander_to_quarantine() -> None:
    with pytest.raises(BatchError) as caught:
        records_of(batch_vectors.NONE_BATCH[:-1])
    assert caught.value.reason == "truncated"


def lines_both_ways(payload: bytes, props: list[tuple[str, str]] | None = None,
                    lander_id: str = "L") -> tuple[list[bytes], list[bytes]]:
    """(what the lander writes, the records encoded one by one)."""
    kwargs = {"remote_topic": "site7/m1/p", "payload": payload, "user_properties": props,
              "ingest_ms": 1_717_430_400_999, "lander_id": lander_id}
    return bronze_lines(**kwargs), [encode_record(r) for r in bronze_records(**kwargs)]


@pytest.mark.parametrize("vector", sorted(batch_vectors.GOOD))
def test_the_lines_of_a_batch_are_its_records_encoded(vector: str) -> None:
    fast, slow = lines_both_ways(batch_vectors.GOOD[vector])
    assert fast == slow and len(fast) == len(batch_vectors.ROWS)


def test_the_lines_of_a_batch_escape_whatever_its_rows_hold() -> None:
    topics = ["devices/m1/p", 'devices/"quoted"/{braces}', "devices/ünï/\\back", "other/\t"]
    payloads = [b'{"value": 1}', "é \n \u2028 \x00 \"".encode(), b"\x80\xff", b"",
                b"{}{}%s%d"]
    rows = [OutboxRecord(seq=100 + i, rule="r", topic=topics[i % len(topics)],
                         payload=payloads[i % len(payloads)], qos=1, retain=False,
                         received_ms=1_717_430_400_000 + i) for i in range(40)]
    batch = encode_batch('gw "7"', "e-1", "devices/", "site/{x}/", rows, "zstd")
    fast, slow = lines_both_ways(batch, [], lander_id='lander "1"')
    assert fast == slow and len(fast) == 40
    assert all(json.loads(line)["seq"] == 100 + i for i, line in enumerate(fast))


def test_the_lines_of_a_single_message_are_its_record_encoded() -> None:
    assert lines_both_ways(b"21.5", PROPS)[0] == [encode_record(
        record(b"21.5", PROPS) | {"remote_topic": "site7/m1/p", "ingest_ms": 1_717_430_400_999})]
    fast, slow = lines_both_ways(batch_vectors.NONE_BATCH, PROPS)  # id properties win
    assert fast == slow and len(fast) == 1
    with pytest.raises(BatchError):
        bronze_lines(remote_topic="t", payload=batch_vectors.NONE_BATCH[:-1],
                     user_properties=None, ingest_ms=1, lander_id="L")
