"""Topic names, topic filters, shared subscriptions and matching (MQTT 3.1.1 4.7, 5.0 4.7/4.8).

How this works: every function here is pure and works on `str` (the codec has already
checked UTF-8 and U+0000 on the wire; these functions check again so that topics coming
from config files or in-process links get the same rules).

- A *topic name* (PUBLISH, will, response topic) is non-empty, has no `+` or `#`, no U+0000
  and at most 65535 UTF-8 bytes. Breaking that raises `TopicNameInvalid` (0x90).
- A *topic filter* (SUBSCRIBE, UNSUBSCRIBE) is non-empty, `#` only as the whole last level,
  `+` only as a whole level, no U+0000, at most 65535 UTF-8 bytes. `$share/{group}/{filter}`
  is a shared subscription: the group is non-empty and has no `/ + #`, and the filter after it
  is a non-empty topic filter. Breaking that raises `TopicFilterInvalid` (0x8F).
- `topic_matches` is the reference matcher (the router may index differently but must agree
  with it): levels split on `/`, `+` matches exactly one level (possibly empty), `#` matches
  the parent level and any number of child levels, and a filter whose first character is a
  wildcard never matches a topic starting with `$` ([MQTT-4.7.2-1]).
"""

from __future__ import annotations

from gateway.broker.codec.errors import TopicFilterInvalid, TopicNameInvalid

__all__ = [
    "SHARE_PREFIX",
    "is_wildcard",
    "parse_shared",
    "topic_matches",
    "validate_topic_filter",
    "validate_topic_name",
]

SHARE_PREFIX = "$share/"
_MAX_BYTES = 65535
# A code point is at most 4 UTF-8 bytes, so up to this many characters cannot be too long.
_SAFE_CHARS = _MAX_BYTES // 4


def _too_long(text: str) -> bool:
    return len(text) > _SAFE_CHARS and len(text.encode("utf-8", "surrogatepass")) > _MAX_BYTES


def validate_topic_name(topic: str) -> None:
    """Raise `TopicNameInvalid` unless `topic` is a valid topic name."""
    if not topic:
        raise TopicNameInvalid("topic name is empty")
    if "+" in topic or "#" in topic:
        raise TopicNameInvalid(f"topic name {topic!r} contains a wildcard")
    if "\x00" in topic:
        raise TopicNameInvalid("topic name contains U+0000")
    if _too_long(topic):
        raise TopicNameInvalid("topic name is longer than 65535 bytes")


def parse_shared(topic_filter: str) -> tuple[str | None, str]:
    """Split a filter into (share group, actual filter); the group is None if not shared.

    `$share/g/a/+` gives `("g", "a/+")`; `a/+` gives `(None, "a/+")`. A filter that starts
    with `$share/` but has no valid group or no filter raises `TopicFilterInvalid`. The
    actual filter itself is not validated here (use `validate_topic_filter`).
    """
    if not topic_filter.startswith(SHARE_PREFIX):
        return None, topic_filter
    group, sep, actual = topic_filter[len(SHARE_PREFIX) :].partition("/")
    if not group:
        raise TopicFilterInvalid(f"shared subscription {topic_filter!r} has an empty group")
    if "+" in group or "#" in group:
        raise TopicFilterInvalid(f"share group {group!r} contains a wildcard")
    if not sep or not actual:
        raise TopicFilterInvalid(f"shared subscription {topic_filter!r} has no topic filter")
    return group, actual


def _check_levels(topic_filter: str) -> None:
    if "+" not in topic_filter and "#" not in topic_filter:
        return
    levels = topic_filter.split("/")
    last = len(levels) - 1
    for i, level in enumerate(levels):
        if level == "#":
            if i != last:
                raise TopicFilterInvalid(f"'#' is not the last level in {topic_filter!r}")
        elif level != "+" and ("+" in level or "#" in level):
            raise TopicFilterInvalid(f"wildcard inside a level in {topic_filter!r}")


def validate_topic_filter(topic_filter: str) -> None:
    """Raise `TopicFilterInvalid` unless `topic_filter` is a valid (maybe shared) filter."""
    if not topic_filter:
        raise TopicFilterInvalid("topic filter is empty")
    if "\x00" in topic_filter:
        raise TopicFilterInvalid("topic filter contains U+0000")
    if _too_long(topic_filter):
        raise TopicFilterInvalid("topic filter is longer than 65535 bytes")
    _, actual = parse_shared(topic_filter)
    _check_levels(actual)


def is_wildcard(topic_filter: str) -> bool:
    """True if the filter contains `+` or `#` (so it may match more than one topic)."""
    return "+" in topic_filter or "#" in topic_filter


def topic_matches(topic_filter: str, topic: str) -> bool:
    """True if the topic name `topic` matches `topic_filter` (spec 4.7).

    A `$share/{group}/` prefix is stripped first: a shared subscription matches the topics
    its filter matches. The filter is assumed valid (see `validate_topic_filter`).
    """
    _, topic_filter = parse_shared(topic_filter)
    if topic[:1] == "$" and topic_filter[:1] in ("+", "#"):
        return False
    if not is_wildcard(topic_filter):
        return topic_filter == topic
    filter_levels = topic_filter.split("/")
    topic_levels = topic.split("/")
    n_topic = len(topic_levels)
    for i, level in enumerate(filter_levels):
        if level == "#":
            return True
        if i >= n_topic:
            return False
        if level != "+" and level != topic_levels[i]:
            return False
    return len(filter_levels) == n_topic
