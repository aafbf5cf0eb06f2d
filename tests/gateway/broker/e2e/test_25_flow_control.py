"""Backpressure over real sockets, and the retained messages a SUBSCRIBE brings.

- A publisher that writes thousands of QoS 1 PUBLISH without waiting for PUBACKs, with the
  default limits (a 1,000-message drop-oldest queue): the broker stops reading it while the
  subscriber's queue is full, so every acknowledged message reaches a subscriber that reads.
- Retained messages sent on SUBSCRIBE go through the session's queue limit.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from gateway.broker.codec import MQTT_3_1_1, PubAck, Publish, encode
from tests.gateway.broker.e2e.helpers import RawClient
from tests.support.broker_proc import BrokerProcess

BURST = 5000


def test_burst_without_waiting_for_pubacks_loses_nothing(broker: BrokerProcess) -> None:
    with RawClient.to(broker) as sub, RawClient.to(broker) as pub:
        sub.connect("c25-burst-sub")
        sub.subscribe(("c25/burst", 1))
        pub.connect("c25-burst-pub")
        burst = b"".join(
            encode(Publish("c25/burst", b"%d" % i, 1, packet_id=i), MQTT_3_1_1)
            for i in range(1, BURST + 1)
        )
        # One write of every PUBLISH; it may block while the broker pushes back, so it runs
        # beside the subscriber.
        writer = threading.Thread(target=pub.sock.sendall, args=(burst,))
        writer.start()
        got = sub.receive_publishes(BURST)
        writer.join()
        assert [p.payload for p in got] == [b"%d" % i for i in range(1, BURST + 1)]
        acks = [pub.recv() for _ in range(BURST)]
        assert acks == [PubAck(i) for i in range(1, BURST + 1)]
        assert sub.sync() == [] and pub.sync() == []


def test_retained_on_subscribe_go_through_the_queue_limit(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    broker = broker_factory("[limits]\nmax_inflight = 2\nmax_queued_messages = 10\n")
    with RawClient.to(broker) as pub, RawClient.to(broker) as sub:
        pub.connect("c25-ret-pub")
        for i in range(30):
            pub.publish(f"c25/ret/{i}", b"%d" % i, qos=1, retain=True)
        sub.connect("c25-ret-sub")
        sub.subscribe(("c25/ret/#", 1))
        # Two in flight and ten queued; the other eighteen were dropped (drop-oldest).
        got = sub.receive_publishes(12)
        assert all(p.retain for p in got)
        assert len({p.topic for p in got}) == 12
        assert sub.sync() == []
