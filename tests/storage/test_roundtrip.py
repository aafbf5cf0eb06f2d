"""Every hook event survives a restart: what was flushed comes back from `restore`."""

from __future__ import annotations

from gateway.broker.codec.packets import Properties, Will
from gateway.broker.contracts.hooks import SessionRecord
from gateway.broker.core.router import SubOptions
from gateway.broker.core.session import NEVER_EXPIRES
from tests.storage.conftest import StoreFactory, delivery, flush, msg, rows

WILL = Will(
    "clients/c1/status", b"offline", 1, True,
    Properties(will_delay_interval=10, message_expiry_interval=60, content_type="text/plain",
               response_topic="r", correlation_data=b"\x01", user_properties=(("a", "1"),)),
)
SUBS = {
    "a/+/c": SubOptions(2, True, True, 2, 17),
    "$share/grp/d/#": SubOptions(1, False, False, 0, None),
    "e": SubOptions(0, False, True, 1, 268_435_455),
}


def record(client_id: str = "c1", **kwargs: object) -> SessionRecord:
    base: dict[str, object] = {
        "protocol_level": 5, "expiry_interval": NEVER_EXPIRES, "subscriptions": dict(SUBS),
        "will": WILL, "will_delay": 10, "disconnected_at": None,
    }
    base.update(kwargs)
    return SessionRecord(client_id, **base)  # type: ignore[arg-type]


def test_session_subscriptions_and_will_round_trip(stores: StoreFactory) -> None:
    store = stores()
    store.session_saved(record(disconnected_at=stores.clocks.mono - 5))
    store.session_saved(record("v3", protocol_level=4, subscriptions={"x": SubOptions(1)},
                               will=None, will_delay=0, disconnected_at=stores.clocks.mono))
    flush(store)
    store = stores.reopen(store, down_for=100)
    state = store.restore()
    by_id = {s.record.client_id: s.record for s in state.sessions}
    c1 = by_id["c1"]
    assert c1.subscriptions == SUBS
    assert c1.will == WILL
    assert (c1.protocol_level, c1.expiry_interval, c1.will_delay) == (5, NEVER_EXPIRES, 10)
    # disconnected 5 s before the old process stopped, which was 100 s ago: 105 s before now
    assert c1.disconnected_at is not None
    assert abs((stores.clocks.mono - c1.disconnected_at) - 105) < 0.01
    v3 = by_id["v3"]
    assert (v3.protocol_level, v3.will, v3.subscriptions) == (4, None, {"x": SubOptions(1)})


def test_session_saved_replaces_subscriptions_and_will(stores: StoreFactory) -> None:
    store = stores()
    store.session_saved(record())
    flush(store)
    store.session_saved(record(subscriptions={"e": SubOptions(1)}, will=None, will_delay=0))
    flush(store)
    store = stores.reopen(store)
    (restored,) = store.restore().sessions
    assert restored.record.subscriptions == {"e": SubOptions(1)}
    assert restored.record.will is None
    assert rows(store, "SELECT topic_filter FROM subscriptions") == [("e",)]


def test_deliveries_in_flight_first_then_queued_in_order(stores: StoreFactory) -> None:
    store = stores()
    store.session_saved(record())
    props = Properties(user_properties=(("u", "v"),), payload_format_indicator=1)
    ds = [delivery(msg(f"t/{n}", b"p%d" % n, 2 if n % 2 else 1, props=props),
                   subscription_ids=(17, 3) if n == 4 else ()) for n in range(6)]
    ds[3].retain = True
    for d in ds:
        store.qos_stored("c1", d)
    assert [d.store_seq for d in ds] == sorted({d.store_seq for d in ds})
    ds[0].packet_id = 9
    store.qos_updated("c1", ds[0])  # still in the batch: folded into the insert
    flush(store)
    ds[1].packet_id = 10
    store.qos_updated("c1", ds[1])
    flush(store)
    ds[1].released = True  # PUBREC arrived: PUBREL stage
    store.qos_updated("c1", ds[1])
    flush(store)
    store = stores.reopen(store)
    (s,) = store.restore().sessions
    got = [(d.message.topic, d.message.payload, d.qos, d.packet_id, d.released, d.retain,
            d.subscription_ids) for d in s.deliveries]
    assert got == [
        ("t/0", b"p0", 1, 9, False, False, ()),
        ("t/1", b"p1", 2, 10, True, False, ()),
        ("t/2", b"p2", 1, 0, False, False, ()),
        ("t/3", b"p3", 2, 0, False, True, ()),
        ("t/4", b"p4", 1, 0, False, False, (17, 3)),
        ("t/5", b"p5", 2, 0, False, False, ()),
    ]
    assert all(d.message.properties == props for d in s.deliveries)
    assert [d.store_seq for d in s.deliveries] == [d.store_seq for d in ds]
    assert s.spilled == 0 and s.spilled_bytes == 0


def test_inflight_with_higher_seq_still_comes_first(stores: StoreFactory) -> None:
    store = stores()
    store.session_saved(record())
    ds = [delivery(msg(f"t/{n}")) for n in range(3)]
    for d in ds:
        store.qos_stored("c1", d)
    ds[2].packet_id = 1
    store.qos_updated("c1", ds[2])
    flush(store)
    store = stores.reopen(store)
    (s,) = store.restore().sessions
    assert [d.message.topic for d in s.deliveries] == ["t/2", "t/0", "t/1"]
    assert s.deliveries[0].sent  # resent with DUP


def test_completed_deliveries_are_gone_and_bodies_shared(stores: StoreFactory) -> None:
    store = stores()
    store.session_saved(record("a"))
    store.session_saved(record("b"))
    shared = msg("shared", b"body")
    da, db = delivery(shared), delivery(shared)
    store.qos_stored("a", da)
    store.qos_stored("b", db)
    assert shared.store_id != 0
    flush(store)
    assert rows(store, "SELECT id, refs FROM messages") == [(shared.store_id, 2)]
    store.qos_completed("a", da)
    flush(store)
    assert rows(store, "SELECT id, refs FROM messages") == [(shared.store_id, 1)]
    store = stores.reopen(store)
    sessions = {s.record.client_id: s for s in store.restore().sessions}
    assert sessions["a"].deliveries == []
    (restored,) = sessions["b"].deliveries
    assert restored.message.payload == b"body"
    store.qos_completed("b", restored)
    flush(store)
    assert rows(store, "SELECT count(*) FROM messages") == [(0,)]
    assert rows(store, "SELECT count(*) FROM deliveries") == [(0,)]


def test_body_is_stored_again_when_reused_after_its_last_delivery(stores: StoreFactory) -> None:
    store = stores()
    store.session_saved(record("a"))
    retained = msg("r", b"kept", retain=True)
    first = delivery(retained)
    store.qos_stored("a", first)
    flush(store)
    store.qos_completed("a", first)
    flush(store)
    assert rows(store, "SELECT count(*) FROM messages") == [(0,)]
    second = delivery(retained)  # the same Message object, sent again to a new subscriber
    store.qos_stored("a", second)
    flush(store)
    store = stores.reopen(store)
    (s,) = store.restore().sessions
    assert [d.message.payload for d in s.deliveries] == [b"kept"]


def test_session_deleted_takes_everything_with_it(stores: StoreFactory) -> None:
    store = stores()
    store.session_saved(record("gone"))
    store.session_saved(record("stays"))
    shared = msg("s")
    store.qos_stored("gone", delivery(shared))
    store.qos_stored("stays", delivery(shared))
    store.qos_stored("gone", delivery(msg("only-gone")))
    store.qos2_received("gone", 5)
    flush(store)
    store.session_deleted("gone")
    flush(store)
    store = stores.reopen(store)
    (s,) = store.restore().sessions
    assert s.record.client_id == "stays"
    assert rows(store, "SELECT topic, refs FROM messages") == [("s", 1)]
    assert rows(store, "SELECT count(*) FROM qos2_in") == [(0,)]
    assert rows(store, "SELECT count(*) FROM subscriptions") == [(len(SUBS),)]


def test_session_deleted_then_recreated_in_one_batch(stores: StoreFactory) -> None:
    store = stores()
    store.session_saved(record("c"))
    old = delivery(msg("old"))
    store.qos_stored("c", old)
    flush(store)
    store.session_deleted("c")  # clean start
    store.session_saved(record("c", subscriptions={"n": SubOptions(1)}))
    store.qos_stored("c", delivery(msg("new")))
    store.qos_completed("c", old)  # a late completion of the old session's delivery
    flush(store)
    store = stores.reopen(store)
    (s,) = store.restore().sessions
    assert s.record.subscriptions == {"n": SubOptions(1)}
    assert [d.message.topic for d in s.deliveries] == ["new"]
    assert rows(store, "SELECT topic, refs FROM messages") == [("new", 1)]


def test_incoming_qos2_ids_round_trip(stores: StoreFactory) -> None:
    store = stores()
    store.session_saved(record())
    for pid in (1, 2, 65535):
        store.qos2_received("c1", pid)
    flush(store)
    store.qos2_released("c1", 2)
    flush(store)
    store = stores.reopen(store)
    (s,) = store.restore().sessions
    assert s.awaiting_release == {1, 65535}


def test_retained_round_trip_with_properties_and_expiry(stores: StoreFactory) -> None:
    store = stores()
    props = Properties(message_expiry_interval=3600, content_type="application/json",
                       user_properties=(("x", "y"),))
    expires = stores.clocks.mono + 3600
    store.retained_changed("r/1", msg("r/1", b"{}", 1, retain=True, props=props,
                                      expires_at=expires))
    store.retained_changed("r/2", msg("r/2", b"two", 0, retain=True))
    store.retained_changed("r/3", msg("r/3", b"three", 2, retain=True))
    flush(store)
    store.retained_changed("r/3", None)
    store.retained_changed("r/2", msg("r/2", b"newer", 1, retain=True))
    flush(store)
    store = stores.reopen(store, down_for=600)
    retained = {m.topic: m for m in store.restore().retained}
    assert sorted(retained) == ["r/1", "r/2"]
    r1 = retained["r/1"]
    assert (r1.payload, r1.qos, r1.retain, r1.properties) == (b"{}", 1, True, props)
    assert r1.expires_at is not None
    assert abs(r1.expires_at - (stores.clocks.mono + 3000)) < 0.01  # 600 s of 3600 passed
    assert (retained["r/2"].payload, retained["r/2"].qos, retained["r/2"].expires_at) == (
        b"newer", 1, None)


def test_message_properties_and_expiry_round_trip(stores: StoreFactory) -> None:
    store = stores()
    store.session_saved(record())
    props = Properties(message_expiry_interval=120, response_topic="resp",
                       correlation_data=b"\x00\xff", content_type="ct",
                       user_properties=(("k", "1"), ("k", "2")), payload_format_indicator=0)
    m = msg("p", b"\x00binary\xff", 2, props=props, expires_at=stores.clocks.mono + 120)
    store.qos_stored("c1", delivery(m))
    flush(store)
    store = stores.reopen(store, down_for=20)
    (s,) = store.restore().sessions
    (d,) = s.deliveries
    assert (d.message.payload, d.message.properties, d.qos) == (b"\x00binary\xff", props, 2)
    assert d.message.expires_at is not None
    assert abs(d.message.expires_at - (stores.clocks.mono + 100)) < 0.01
    assert d.message.store_id == m.store_id


def test_identifiers_continue_after_restart(stores: StoreFactory) -> None:
    store = stores()
    store.session_saved(record())
    first = delivery(msg("a"))
    store.qos_stored("c1", first)
    flush(store)
    store = stores.reopen(store)
    store.restore()
    second = delivery(msg("b"))
    store.qos_stored("c1", second)
    assert second.store_seq > first.store_seq
    assert second.message.store_id > first.message.store_id


def test_meta_has_epoch_and_gateway_id(stores: StoreFactory) -> None:
    store = stores(gateway_id="site-9")
    epoch = store.meta["epoch"]
    assert len(epoch) == 36 and store.meta["gateway_id"] == "site-9"
    assert store.meta["schema_version"] == "2"
    store = stores.reopen(store, gateway_id="site-10")
    assert store.meta["epoch"] == epoch  # made once, when the database was created
    assert store.meta["gateway_id"] == "site-10"
