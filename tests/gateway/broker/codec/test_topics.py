"""Topic name / filter validation, shared subscriptions and matching (spec 4.7, 4.8)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.broker.codec import TopicFilterInvalid, TopicNameInvalid
from gateway.broker.codec.topics import (
    is_wildcard,
    parse_shared,
    topic_matches,
    validate_topic_filter,
    validate_topic_name,
)
from tests.gateway.broker.codec.strategies import LEVEL, TOPIC

VALID_NAMES = [
    "a", "a/b", "/", "//", "/a", "a/", "a//b", "$SYS/broker/uptime", "sport/tennis/player1",
    "température/ü", "with space", "$share/g/a", "x" * 65535, "é" * 32767,
]
INVALID_NAMES = [
    "", "+", "#", "a/+", "a/#", "+/a", "a+b", "a#", "sport/tennis#", "\x00", "a\x00b",
    "x" * 65536, "é" * 32768,
]
VALID_FILTERS = [
    "#", "+", "+/+", "/+", "+/", "/", "sport/#", "sport/tennis/#", "sport/tennis/player1/#",
    "sport/+", "sport/+/player1", "+/tennis/#", "$SYS/#", "$SYS/monitor/+", "a//b", "a/b/c",
    "$share/g/a", "$share/g/#", "$share/group-1/+/x/#", "$share/g//", "$share", "$sharex/a",
    "$SHARE/g", "x" * 65535,
]
INVALID_FILTERS = [
    "", "sport/tennis#", "sport/tennis/#/ranking", "sport+", "a/+b", "a/b+/c", "#/a", "a/#/",
    "##", "++", "\x00", "a/\x00", "$share/", "$share//a", "$share/g", "$share/g/",
    "$share/g+/a", "$share/g#/a", "$share/+/a", "$share/g/a/#/b", "$share/g/a+", "x" * 65536,
]


@pytest.mark.parametrize("name", VALID_NAMES)
def test_valid_topic_names(name: str) -> None:
    validate_topic_name(name)


@pytest.mark.parametrize("name", INVALID_NAMES)
def test_invalid_topic_names(name: str) -> None:
    with pytest.raises(TopicNameInvalid) as info:
        validate_topic_name(name)
    assert info.value.reason_code == 0x90


@pytest.mark.parametrize("topic_filter", VALID_FILTERS)
def test_valid_topic_filters(topic_filter: str) -> None:
    validate_topic_filter(topic_filter)


@pytest.mark.parametrize("topic_filter", INVALID_FILTERS)
def test_invalid_topic_filters(topic_filter: str) -> None:
    with pytest.raises(TopicFilterInvalid) as info:
        validate_topic_filter(topic_filter)
    assert info.value.reason_code == 0x8F


@pytest.mark.parametrize(("topic_filter", "expected"), [
    ("a/b", (None, "a/b")),
    ("#", (None, "#")),
    ("$share/g1/sensors/#", ("g1", "sensors/#")),
    ("$share/g/+/x", ("g", "+/x")),
    ("$share/g//", ("g", "/")),
    ("$share", (None, "$share")),
    ("$sharex/g/a", (None, "$sharex/g/a")),
    ("$SYS/#", (None, "$SYS/#")),
])
def test_parse_shared(topic_filter: str, expected: tuple[str | None, str]) -> None:
    assert parse_shared(topic_filter) == expected


@pytest.mark.parametrize("topic_filter", ["$share/", "$share//a", "$share/g", "$share/g/"])
def test_parse_shared_rejects_incomplete(topic_filter: str) -> None:
    with pytest.raises(TopicFilterInvalid):
        parse_shared(topic_filter)


MATCHES = [
    # spec 4.7.1.2: multi-level wildcard
    ("sport/tennis/player1/#", "sport/tennis/player1", True),
    ("sport/tennis/player1/#", "sport/tennis/player1/ranking", True),
    ("sport/tennis/player1/#", "sport/tennis/player1/score/wimbledon", True),
    ("sport/tennis/player1/#", "sport/tennis/player2", False),
    ("sport/#", "sport", True),
    ("#", "sport/tennis", True),
    ("#", "/", True),
    # spec 4.7.1.3: single-level wildcard
    ("sport/tennis/+", "sport/tennis/player1", True),
    ("sport/tennis/+", "sport/tennis/player2", True),
    ("sport/tennis/+", "sport/tennis/player1/ranking", False),
    ("sport/+", "sport", False),
    ("sport/+", "sport/", True),
    ("+/+", "/finance", True),
    ("/+", "/finance", True),
    ("+", "/finance", False),
    ("+/tennis/#", "sport/tennis/player1", True),
    ("a/+/c", "a//c", True),
    # spec 4.7.2: topics beginning with $
    ("#", "$SYS/broker/uptime", False),
    ("+/monitor/Clients", "$SYS/monitor/Clients", False),
    ("$SYS/#", "$SYS/monitor/Clients", True),
    ("$SYS/#", "$SYS", True),
    ("$SYS/monitor/+", "$SYS/monitor/Clients", True),
    ("+", "$SYS", False),
    # exact and case-sensitive
    ("a/b", "a/b", True),
    ("a/b", "a/b/", False),
    ("a/b", "A/b", False),
    ("a/b", "a", False),
    ("a/b/c", "a/b", False),
    ("/", "/", True),
    # shared subscriptions match what their filter matches
    ("$share/g/sport/+", "sport/tennis", True),
    ("$share/g/#", "a/b", True),
    ("$share/g/#", "$SYS/x", False),
]


@pytest.mark.parametrize(("topic_filter", "topic", "expected"), MATCHES)
def test_topic_matches(topic_filter: str, topic: str, expected: bool) -> None:
    assert topic_matches(topic_filter, topic) is expected


def test_is_wildcard() -> None:
    assert is_wildcard("a/+") and is_wildcard("#")
    assert not is_wildcard("a/b") and not is_wildcard("$share/g/a")


@st.composite
def topic_and_covering_filter(draw: st.DrawFn) -> tuple[str, str]:
    """A topic and a filter built from it by wildcarding levels: it must match."""
    topic = draw(TOPIC)
    levels = topic.split("/")
    out = [("+" if draw(st.booleans()) else level) for level in levels]
    cut = draw(st.integers(0, len(out)))
    if cut < len(out) or draw(st.booleans()):
        out = [*out[:cut], "#"]
    return topic, "/".join(out)


@settings(max_examples=300, deadline=None)
@given(pair=topic_and_covering_filter())
def test_wildcarded_filters_match_their_topic(pair: tuple[str, str]) -> None:
    topic, topic_filter = pair
    validate_topic_filter(topic_filter)
    expected = not (topic.startswith("$") and topic_filter[0] in "+#")
    assert topic_matches(topic_filter, topic) is expected


@settings(max_examples=200, deadline=None)
@given(topic=TOPIC, other=TOPIC)
def test_plain_filter_matches_only_itself(topic: str, other: str) -> None:
    assert topic_matches(topic, topic)
    assert topic_matches(topic, other) is (topic == other)


@settings(max_examples=200, deadline=None)
@given(levels=st.lists(LEVEL, min_size=1, max_size=4))
def test_filter_with_one_more_level_does_not_match(levels: list[str]) -> None:
    topic = "/".join(levels)
    if not topic:
        return
    assert not topic_matches(topic + "/+", topic)
    assert topic_matches(topic + "/#", topic)  # "#" also matches the parent level
