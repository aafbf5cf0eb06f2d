"""The retained store's limits: a clear refusal, never a silent loss of what exists."""

from __future__ import annotations

from gateway.broker.codec.packets import MQTT_5, PubAck, Publish
from gateway.broker.codec.reason_codes import ReasonCode
from tests.gateway.broker.core.fakes import FakeSink, Harness


def publishes(sink: FakeSink) -> list[Publish]:
    return [p for p in sink.packets() if isinstance(p, Publish)]


def test_v5_new_retained_topic_over_the_cap_is_refused_with_0x97() -> None:
    h = Harness(max_retained_messages=2)
    sub, sub_sink = h.connect("sub")
    h.subscribe(sub, "r/#", qos=1)
    sub_sink.packets()
    pub, sink = h.connect("pub", MQTT_5)
    sink.packets()
    for pid, topic in ((1, "r/a"), (2, "r/b")):
        h.send(pub, Publish(topic, b"x", 1, retain=True, packet_id=pid))
    h.send(pub, Publish("r/c", b"x", 1, retain=True, packet_id=3))
    acks = [p for p in sink.packets() if isinstance(p, PubAck)]
    assert [(a.packet_id, a.reason_code) for a in acks] == [
        (1, 0), (2, 0), (3, ReasonCode.QUOTA_EXCEEDED)
    ]
    assert [p.topic for p in publishes(sub_sink)] == ["r/a", "r/b"]  # refused: not routed
    assert h.broker.retained.get("r/c") is None
    assert h.broker.counters.retained_refused == 1
    # Replacing a retained topic and deleting one always fit.
    h.send(pub, Publish("r/a", b"newer", 1, retain=True, packet_id=4))
    h.send(pub, Publish("r/b", b"", 1, retain=True, packet_id=5))
    h.send(pub, Publish("r/c", b"x", 1, retain=True, packet_id=6))
    acks = [p for p in sink.packets() if isinstance(p, PubAck)]
    assert [a.reason_code for a in acks] == [0, 0, 0]
    assert sorted(m.topic for m in h.broker.retained) == ["r/a", "r/c"]


def test_publishers_that_cannot_be_told_are_delivered_but_not_retained() -> None:
    h = Harness(max_retained_bytes=10)
    sub, sub_sink = h.connect("sub")
    h.subscribe(sub, "r/#", qos=0)
    sub_sink.packets()
    pub, sink = h.connect("pub")  # 3.1.1
    h.send(pub, Publish("r/a", b"12345", 0, retain=True))  # 8 bytes
    h.send(pub, Publish("r/b", b"12345", 1, retain=True, packet_id=1))  # 16: over
    assert [p.topic for p in publishes(sub_sink)] == ["r/a", "r/b"]
    assert [p for p in sink.packets() if isinstance(p, PubAck)] == [PubAck(1)]
    assert [m.topic for m in h.broker.retained] == ["r/a"]
    assert h.broker.retained.bytes == 8
    assert h.broker.counters.retained_refused == 1
