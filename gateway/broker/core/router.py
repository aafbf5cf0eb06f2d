"""The subscription table: a topic-level trie with shared groups and a per-topic match cache.

How this works: each subscribed filter is a path of levels in the trie (`+` and `#` are ordinary
children with special meaning during matching). A node holds the plain subscribers of that
filter and, separately, its `$share` groups. `match(topic)` walks the trie once and returns every
plain subscription and every shared group that matches. Overlapping subscriptions of one client
are folded into one `Target` (highest QoS, every subscription identifier), with a second fold
that leaves out noLocal subscriptions for when the client itself is the publisher. The result is
cached per topic until the table next changes, so a steady stream on a few topics costs one
dict lookup per message.
Filters that start with a wildcard never match topics starting with `$` (MQTT-4.7.2-1).

Pure and synchronous: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

MATCH_CACHE_SIZE = 4096


@dataclass(slots=True)
class SubOptions:
    """What a client asked for with one filter."""

    qos: int = 0
    no_local: bool = False
    retain_as_published: bool = False
    retain_handling: int = 0
    subscription_id: int | None = None


@dataclass(frozen=True, slots=True)
class Target:
    """Everything one client's matching plain subscriptions ask for, folded together."""

    client_id: str
    qos: int
    retain_as_published: bool
    subscription_ids: tuple[int, ...]
    no_local: bool  # some subscription is noLocal: use `own` when the client publishes
    own: Target | None  # the fold without the noLocal subscriptions (None: nothing left)


def fold(client_id: str, options: list[SubOptions]) -> Target | None:
    """Fold one client's matching subscriptions into a Target (None when there are none)."""
    if not options:
        return None
    local = [o for o in options if not o.no_local]
    no_local = len(local) != len(options)
    return Target(
        client_id,
        max(o.qos for o in options),
        any(o.retain_as_published for o in options),
        tuple(o.subscription_id for o in options if o.subscription_id),
        no_local,
        fold(client_id, local) if no_local else None,
    )


@dataclass(slots=True)
class SharedGroup:
    """The members of one `$share/{group}/{filter}` and the round-robin cursor."""

    name: str
    topic_filter: str
    members: dict[str, SubOptions] = field(default_factory=dict)
    cursor: int = 0


@dataclass(slots=True)
class _Node:
    children: dict[str, _Node] = field(default_factory=dict)
    subscribers: dict[str, SubOptions] = field(default_factory=dict)
    shared: dict[str, SharedGroup] = field(default_factory=dict)

    def empty(self) -> bool:
        return not (self.children or self.subscribers or self.shared)


Match = tuple[Sequence[Target], Sequence[SharedGroup]]
# What a topic nobody subscribes to matches: shared, so caching it costs no allocation.
_NO_MATCH: Match = ((), ())


class SubscriptionTable:
    """All subscriptions of all sessions."""

    def __init__(self) -> None:
        self._root = _Node()
        self._cache: dict[str, Match] = {}
        self.count = 0

    def subscribe(
        self, client_id: str, topic_filter: str, options: SubOptions, group: str | None = None
    ) -> bool:
        """Add or replace a subscription. Returns True if it already existed."""
        node = self._root
        for level in topic_filter.split("/"):
            child = node.children.get(level)
            if child is None:
                child = node.children[level] = _Node()
            node = child
        if group is None:
            existed = client_id in node.subscribers
            node.subscribers[client_id] = options
        else:
            shared = node.shared.get(group)
            if shared is None:
                shared = node.shared[group] = SharedGroup(group, topic_filter)
            existed = client_id in shared.members
            shared.members[client_id] = options
        if not existed:
            self.count += 1
        self._cache.clear()
        return existed

    def unsubscribe(self, client_id: str, topic_filter: str, group: str | None = None) -> bool:
        """Remove a subscription. Returns True if it existed."""
        path = [self._root]
        for level in topic_filter.split("/"):
            child = path[-1].children.get(level)
            if child is None:
                return False
            path.append(child)
        node = path[-1]
        if group is None:
            removed = node.subscribers.pop(client_id, None) is not None
        else:
            shared = node.shared.get(group)
            removed = shared is not None and shared.members.pop(client_id, None) is not None
            if shared is not None and not shared.members:
                del node.shared[group]
        if removed:
            self.count -= 1
            self._cache.clear()
            levels = topic_filter.split("/")
            for depth in range(len(levels), 0, -1):
                if not path[depth].empty():
                    break
                del path[depth - 1].children[levels[depth - 1]]
        return removed

    def match(self, topic: str) -> Match:
        """Every plain subscription and shared group whose filter matches `topic`."""
        if not self._root.children:  # no subscriptions at all (a retained-only publisher)
            return _NO_MATCH
        cached = self._cache.get(topic)
        if cached is not None:
            return cached
        plain: list[tuple[str, SubOptions]] = []
        groups: list[SharedGroup] = []
        levels = topic.split("/")
        self._walk(self._root, levels, 0, topic.startswith("$"), plain, groups)
        by_client: dict[str, list[SubOptions]] = {}
        for client_id, options in plain:
            by_client.setdefault(client_id, []).append(options)
        targets = [fold(client_id, options) for client_id, options in by_client.items()]
        if len(self._cache) >= MATCH_CACHE_SIZE:
            self._cache.clear()
        found = [t for t in targets if t is not None]
        result = (found, groups) if found or groups else _NO_MATCH
        self._cache[topic] = result
        return result

    def _walk(
        self,
        node: _Node,
        levels: list[str],
        depth: int,
        dollar: bool,
        plain: list[tuple[str, SubOptions]],
        groups: list[SharedGroup],
    ) -> None:
        if depth == len(levels):
            plain.extend(node.subscribers.items())
            groups.extend(node.shared.values())
            hash_child = node.children.get("#")
            if hash_child is not None:  # "a/#" also matches "a"
                plain.extend(hash_child.subscribers.items())
                groups.extend(hash_child.shared.values())
            return
        child = node.children.get(levels[depth])
        if child is not None:
            self._walk(child, levels, depth + 1, dollar, plain, groups)
        if depth == 0 and dollar:
            return
        child = node.children.get("+")
        if child is not None:
            self._walk(child, levels, depth + 1, dollar, plain, groups)
        child = node.children.get("#")
        if child is not None:
            plain.extend(child.subscribers.items())
            groups.extend(child.shared.values())
