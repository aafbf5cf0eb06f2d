"""Encoder behaviour beyond the golden table: misuse, 3.1.1 down-conversion, re-emission."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.broker.codec import (
    NEED_DATA,
    Auth,
    ConnAck,
    Connect,
    Disconnect,
    LocalProtocolError,
    Properties,
    PubAck,
    Publish,
    PubRel,
    SubAck,
    Subscribe,
    Subscription,
    UnsubAck,
    Unsubscribe,
    Will,
    decode,
    encode,
    reemit_qos0,
)

MISUSE: list[tuple[str, Any, int]] = [
    ("qos1-without-packet-id", Publish("a", b"", qos=1), 4),
    ("qos2-packet-id-zero", Publish("a", b"", qos=2, packet_id=0), 5),
    ("qos0-with-packet-id", Publish("a", b"", packet_id=3), 4),
    ("qos0-with-dup", Publish("a", b"", dup=True), 4),
    ("qos3", Publish("a", b"", qos=3, packet_id=1), 4),
    ("topic-wildcard", Publish("a/+", b""), 4),
    ("topic-null", Publish("a\x00", b""), 5),
    ("topic-empty-v311", Publish("", b""), 4),
    ("topic-empty-v5-without-alias", Publish("", b""), 5),
    ("topic-surrogate", Publish("\ud800", b""), 4),
    ("topic-too-long", Publish("x" * 65536, b""), 4),
    ("response-topic-wildcard", Publish("a", properties=Properties(response_topic="#")), 5),
    ("topic-alias-zero", Publish("a", properties=Properties(topic_alias=0)), 5),
    ("property-not-allowed", PubAck(1, 0x10, Properties(topic_alias=1)), 5),
    ("property-out-of-range", Connect("c", 5, properties=Properties(receive_maximum=0)), 5),
    ("property-too-big", Publish("a", properties=Properties(message_expiry_interval=2**32)), 5),
    ("two-subscription-ids-on-subscribe",
     Subscribe(1, [Subscription("a")], Properties(subscription_identifiers=(1, 2))), 5),
    ("user-property-null", Publish("a", properties=Properties(user_properties=(("\x00", ""),))),
     5),
    ("puback-packet-id-zero", PubAck(0), 4),
    ("puback-packet-id-too-big", PubAck(70000), 4),
    ("pubrel-bad-reason", PubRel(1, 0x10), 5),
    ("subscribe-empty", Subscribe(1, []), 4),
    ("subscribe-qos3", Subscribe(1, [Subscription("a", 3)]), 4),
    ("subscribe-invalid-filter", Subscribe(1, [Subscription("a/#/b")]), 4),
    ("subscribe-retain-handling-3", Subscribe(1, [Subscription("a", retain_handling=3)]), 5),
    ("subscribe-no-local-shared", Subscribe(1, [Subscription("$share/g/a", no_local=True)]), 5),
    ("suback-empty", SubAck(1, []), 4),
    ("suback-v5-code-in-v311", SubAck(1, [0x8F]), 4),
    ("suback-bad-v5-code", SubAck(1, [0x10]), 5),
    ("unsubscribe-empty", Unsubscribe(1, []), 5),
    ("unsubscribe-invalid-filter", Unsubscribe(1, ["$share/g"]), 4),
    ("unsuback-v5-empty", UnsubAck(1, []), 5),
    ("connack-v5-code-in-v311", ConnAck(False, 0x87), 4),
    ("connack-bad-v5-code", ConnAck(False, 0x01), 5),
    ("connack-session-present-refused", ConnAck(True, 5), 4),
    ("connect-password-without-username-v311", Connect("c", 4, password=b"x"), 4),
    ("connect-unknown-level", Connect("c", 6), 4),
    ("connect-will-qos3", Connect("c", 4, will=Will("a", b"", qos=3)), 4),
    ("connect-will-topic-wildcard", Connect("c", 4, will=Will("a/#", b"")), 4),
    ("connect-auth-data-without-method",
     Connect("c", 5, properties=Properties(authentication_data=b"x")), 5),
    ("disconnect-bad-reason", Disconnect(0x01), 5),
    ("auth-before-v5", Auth(), 4),
    ("auth-bad-reason", Auth(0x04), 5),
    ("unknown-version", PubAck(1), 6),
    ("not-a-packet", object(), 4),
]


@pytest.mark.parametrize(("packet", "version"), [(p, v) for _, p, v in MISUSE],
                         ids=[name for name, _, _ in MISUSE])
def test_misuse_raises_local_protocol_error(packet: Any, version: int) -> None:
    with pytest.raises(LocalProtocolError):
        encode(packet, version)


V5_ONLY_DROPPED = [
    (PubAck(1, 0x10, Properties(reason_string="x")), "40020001"),
    (PubRel(2, 0x92), "62020002"),
    (UnsubAck(5, [0x00, 0x11], Properties(reason_string="x")), "b0020005"),
    (Disconnect(0x8E, Properties(reason_string="x")), "e000"),
    (SubAck(1, [1], Properties(reason_string="x")), "9003000101"),
    (ConnAck(True, 0, Properties(maximum_qos=1)), "20020100"),
    (Subscribe(1, [Subscription("a", 1, True, True, 2)], Properties(subscription_identifiers=(9,))),
     "820600010001" "6101"),
    (Unsubscribe(1, ["a"], Properties(user_properties=(("k", "v"),))), "a20500010001" "61"),
    (Publish("a", b"p", properties=Properties(message_expiry_interval=5)), "3004" "000161" "70"),
    (Connect("c", 4, will=Will("w", b"", properties=Properties(will_delay_interval=5)),
             properties=Properties(session_expiry_interval=9)),
     "1012" "00044d515454" "04" "06" "003c" "000163" "000177" "0000"),
]


@pytest.mark.parametrize(("packet", "wire"), V5_ONLY_DROPPED)
def test_v5_only_fields_are_dropped_for_v311(packet: Any, wire: str) -> None:
    assert encode(packet, 4).hex() == wire


def test_connect_uses_its_own_level_and_accepts_version_zero() -> None:
    packet = Connect("c", 5)
    wire = bytes.fromhex("100e" "00044d515454" "05" "02" "003c" "00" "000163")
    assert encode(packet, 0) == encode(packet, 4) == wire


def test_large_remaining_length_uses_multi_byte_varint() -> None:
    payload = b"x" * 20000
    wire = encode(Publish("t", payload), 4)
    # 2 + 1 + 20000 = 20003 = 0x4E23 -> 0xA3 0x9C 0x01
    assert wire[:4] == bytes.fromhex("30a39c01")
    assert decode(wire, 4) == (Publish("t", payload), len(wire))


def test_reemit_qos0_sets_and_clears_retain() -> None:
    raw = bytes.fromhex("300a" "0003612f62" "68656c6c6f")
    retained = reemit_qos0(raw, retain=True)
    assert retained == bytes.fromhex("310a" "0003612f62" "68656c6c6f")
    assert reemit_qos0(retained, retain=False) == raw
    assert reemit_qos0(bytearray(raw)) == raw
    assert decode(retained, 4) == (Publish("a/b", b"hello", retain=True), len(raw))


@pytest.mark.parametrize(
    "raw", ["320c0003612f62000a68656c6c6f", "40020001", "30", "38050003612f62"]
)
def test_reemit_qos0_refuses_other_packets(raw: str) -> None:
    with pytest.raises(LocalProtocolError):
        reemit_qos0(bytes.fromhex(raw))


def test_decode_leaves_unrelated_trailing_partial_packet() -> None:
    first = encode(PubAck(1), 4)
    buf = first + encode(Publish("a", b"x" * 50), 4)[:10]
    assert decode(buf, 4) == (PubAck(1), len(first))
    assert decode(buf[len(first):], 4) is NEED_DATA
