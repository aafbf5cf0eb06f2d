"""The subscription trie and retained trie agree with the reference matcher."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.broker.codec.topics import topic_matches
from gateway.broker.core.message import Message
from gateway.broker.core.retained import RetainedStore
from gateway.broker.core.router import SubOptions, SubscriptionTable

LEVEL = st.sampled_from(["a", "b", "", "$SYS", "c d"])
TOPIC = st.lists(LEVEL, min_size=1, max_size=4).map("/".join)
FILTER_LEVEL = st.sampled_from(["a", "b", "", "$SYS", "+"])


@st.composite
def filters(draw: st.DrawFn) -> str:
    levels = draw(st.lists(FILTER_LEVEL, min_size=1, max_size=4))
    if draw(st.booleans()):
        levels.append("#")
    return "/".join(levels)


@settings(max_examples=300, deadline=None)
@given(st.lists(filters(), min_size=1, max_size=6, unique=True), TOPIC)
def test_table_matches_reference(subscribed: list[str], topic: str) -> None:
    table = SubscriptionTable()
    for index, topic_filter in enumerate(subscribed):
        table.subscribe(f"c{index}", topic_filter, SubOptions())
    plain, _ = table.match(topic)
    got = {target.client_id for target in plain}
    expected = {f"c{i}" for i, f in enumerate(subscribed) if topic_matches(f, topic)}
    assert got == expected


@settings(max_examples=300, deadline=None)
@given(st.lists(TOPIC, min_size=1, max_size=8, unique=True), filters())
def test_retained_matches_reference(topics: list[str], topic_filter: str) -> None:
    store = RetainedStore()
    for topic in topics:
        store.set(Message(topic, b"x", 0, True))
    got = {m.topic for m in store.match(topic_filter, 0.0)}
    assert got == {t for t in topics if topic_matches(topic_filter, t)}


RETAINED_OPS = st.lists(st.tuples(TOPIC, st.sampled_from([b"", b"x", b"yy"])), max_size=20)


@settings(max_examples=300, deadline=None)
@given(RETAINED_OPS, filters())
def test_retained_sets_and_deletes_agree_with_a_dict(ops: list[tuple[str, bytes]],
                                                      topic_filter: str) -> None:
    # Topics both with and without retained topics below them (leaf messages and nodes).
    store = RetainedStore()
    reference: dict[str, bytes] = {}
    for topic, payload in ops:
        changed = store.set(Message(topic, payload, 0, True))
        assert changed == (bool(payload) or topic in reference)
        if payload:
            reference[topic] = payload
        else:
            reference.pop(topic, None)
        assert (store.count, store.bytes) == (
            len(reference), sum(len(t) + len(p) for t, p in reference.items()))
    assert {t: m.payload for t in reference if (m := store.get(t)) is not None} == reference
    assert sorted(m.topic for m in store) == sorted(reference)
    got = {m.topic for m in store.match(topic_filter, 0.0)}
    assert got == {t for t in reference if topic_matches(topic_filter, t)}
    for topic in list(reference):
        assert store.set(Message(topic, b"", 0, True))
    assert store.count == store.bytes == 0 and not list(store)
    assert store.get("a") is None


def test_unsubscribe_prunes_and_invalidates_cache() -> None:
    table = SubscriptionTable()
    table.subscribe("c1", "a/+/c", SubOptions(qos=1))
    assert [t.client_id for t in table.match("a/b/c")[0]] == ["c1"]
    assert table.unsubscribe("c1", "a/+/c")
    assert table.match("a/b/c") == ((), ())  # nothing matches: the shared empty match
    assert not table.unsubscribe("c1", "a/+/c")
    assert table.count == 0
    assert table._root.children == {}


def test_shared_groups_are_separate_from_plain() -> None:
    table = SubscriptionTable()
    table.subscribe("c1", "s/#", SubOptions(), group="g")
    table.subscribe("c2", "s/#", SubOptions(), group="g")
    table.subscribe("c3", "s/#", SubOptions())
    plain, groups = table.match("s/1")
    assert [t.client_id for t in plain] == ["c3"]
    assert len(groups) == 1 and set(groups[0].members) == {"c1", "c2"}


def test_retained_delete_and_expiry() -> None:
    store = RetainedStore()
    store.set(Message("a/b", b"1", 0, True))
    store.set(Message("a/c", b"2", 0, True, expires_at=10.0))
    assert store.count == 2
    assert {m.topic for m in store.match("a/#", 5.0)} == {"a/b", "a/c"}
    assert {m.topic for m in store.match("a/#", 10.0)} == {"a/b"}
    assert store.count == 1
    assert store.set(Message("a/b", b"", 0, True))
    assert store.count == 0 and store.get("a/b") is None
    assert not store.set(Message("a/b", b"", 0, True))


def test_overlapping_subscriptions_fold_per_client() -> None:
    table = SubscriptionTable()
    table.subscribe("c", "a/#", SubOptions(qos=0, subscription_id=1))
    table.subscribe("c", "a/+", SubOptions(qos=2, no_local=True, subscription_id=2))
    table.subscribe("c", "+/b", SubOptions(qos=1, retain_as_published=True))
    (target,), _ = table.match("a/b")
    assert (target.qos, target.retain_as_published) == (2, True)
    assert sorted(target.subscription_ids) == [1, 2]
    assert target.no_local and target.own is not None
    assert (target.own.qos, target.own.subscription_ids) == (1, (1,))
    table.unsubscribe("c", "a/#")
    table.unsubscribe("c", "+/b")
    (only,), _ = table.match("a/b")
    assert only.no_local and only.own is None
