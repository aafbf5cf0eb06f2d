"""Offline queues larger than memory are spilled to the store and streamed back in order."""

from __future__ import annotations

from gateway.broker.codec.packets import (
    MQTT_5,
    Connect,
    PubAck,
    Publish,
    Subscribe,
    Subscription,
)
from gateway.broker.codec.reason_codes import ReasonCode
from gateway.broker.contracts.config import LimitsConfig
from gateway.broker.contracts.hooks import BrokerHooks
from gateway.broker.core.inflight import Delivery
from gateway.broker.core.session import Connection
from gateway.broker.engine.broker import Broker
from outpost.config import Config
from tests.gateway.broker.core.fakes import FakeSink


class PagingStore(BrokerHooks):
    """Keeps stored deliveries in a dict; answers load_deliveries like a store on disk."""

    durable = True

    def __init__(self) -> None:
        self.rows: dict[str, dict[int, Delivery]] = {}
        self.seq = 0
        self.loads = 0
        self.full = False

    def qos_stored(self, client_id: str, delivery: Delivery) -> None:
        self.seq += 1
        delivery.store_seq = self.seq
        self.rows.setdefault(client_id, {})[self.seq] = delivery

    def qos_completed(self, client_id: str, delivery: Delivery) -> None:
        self.rows.get(client_id, {}).pop(delivery.store_seq, None)

    def load_deliveries(self, client_id: str, after_seq: int, limit: int) -> list[Delivery]:
        self.loads += 1
        rows = sorted(self.rows.get(client_id, {}).items())
        return [d for seq, d in rows if seq > after_seq][:limit]

    def accepting(self) -> bool:
        return not self.full


def make(store: PagingStore, **limits: object) -> Broker:
    config = Config(
        limits=LimitsConfig(**limits),  # type: ignore[arg-type]
        sys={"interval": 0},  # type: ignore[arg-type]
    )
    return Broker(config, store, now=0.0, queue_page=10)


def connect(broker: Broker, client_id: str, clean: bool = False) -> tuple[Connection, FakeSink]:
    sink = FakeSink()
    conn = broker.open_connection(sink, "t", "p", True, 0.0)
    broker.handle(conn, Connect(client_id, 4, clean, 60), 0.0)
    return conn, sink


def test_spilled_queue_is_streamed_back_in_order() -> None:
    store = PagingStore()
    broker = make(store, max_queued_messages=1000, max_inflight=5)
    sub, _ = connect(broker, "sub")
    broker.handle(sub, Subscribe(1, [Subscription("q", 1)]), 0.0)
    broker.connection_lost(sub, 0.0)
    pub, _ = connect(broker, "pub", clean=True)
    for n in range(1, 36):
        broker.handle(pub, Publish("q", b"%d" % n, qos=1, packet_id=n), 0.0)
    outbound = broker.sessions["sub"].outbound
    assert (len(outbound.queue), outbound.spilled, len(outbound)) == (10, 25, 35)
    sub2, sink = connect(broker, "sub")
    got: list[bytes] = []
    for _ in range(100):
        packets = sink.packets()
        publishes = [p for p in packets if isinstance(p, Publish)]
        if not publishes:
            break
        for p in publishes:
            got.append(p.payload)
            assert p.packet_id is not None
            broker.handle(sub2, PubAck(p.packet_id), 0.0)
    assert got == [b"%d" % n for n in range(1, 36)]
    assert store.loads >= 3 and store.rows["sub"] == {}
    assert len(outbound) == 0


def test_full_store_refuses_unstored_messages() -> None:
    store = PagingStore()
    store.full = True
    broker = make(store)
    sink5 = FakeSink(MQTT_5)
    v5 = broker.open_connection(sink5, "t", "p", True, 0.0)
    broker.handle(v5, Connect("v5", MQTT_5, True, 60), 0.0)
    broker.handle(v5, Publish("q", b"x", qos=1, packet_id=3), 0.0)
    assert sink5.packets()[1:] == [PubAck(3, ReasonCode.QUOTA_EXCEEDED)]
    v3, sink3 = connect(broker, "v3", clean=True)
    sink3.packets()
    broker.handle(v3, Publish("q", b"x", qos=1, packet_id=4), 0.0)
    assert sink3.packets() == [] and v3.closed  # never acknowledged: the client resends
    assert broker.counters.store_full == 2
