"""Retained messages: one per topic, kept in a topic-level trie for filter lookups.

How this works: `set` stores (or, with an empty payload, deletes) the retained message of a topic.
`match(filter)` walks the filter's levels over the trie — a literal level follows one child, `+`
follows every child, `#` takes the whole subtree — so a subscription touches only the retained
messages it can match and a `#` subscriber gets all of them in one pass. Expired messages are
skipped and removed as they are met. Filters starting with a wildcard skip `$` topics.

Bounded: `count` and `bytes` (topic + payload) are kept up to date, and `has_room` tells the
broker whether storing a message would take them past `max_messages` / `max_bytes` (replacing a
topic's message only counts the difference; deleting always fits). While a message would fit
even on a new topic, `has_room` answers without walking the trie.

Retained messages come in bursts under one parent (a device's points, a bulk load), so `set`
remembers the node of the last parent topic it walked to and starts there when the next topic
has the same parent; a delete, which may prune that node, forgets it.

Memory: most topics have nothing retained below them, so such a topic's last level holds its
`Message` directly instead of a node, and a node's children dict only exists once it has a
child.

Pure and synchronous: no I/O, no clock (callers pass `now`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from gateway.broker.core.message import Message


@dataclass(slots=True)
class _Node:
    children: dict[str, _Node | Message] | None = None  # None: nothing below
    message: Message | None = None


# A child is a `_Node`, or just the `Message` when nothing is retained below its topic.
_Entry = _Node | Message
_LEAF: Mapping[str, _Entry] = MappingProxyType({})  # the children of a node that has none


class RetainedStore:
    """The retained message of every topic that has one."""

    def __init__(self, max_messages: int = 0, max_bytes: int = 0) -> None:
        self._root = _Node()
        self._last_parent: tuple[str, _Node] | None = None
        self.count = 0
        self.bytes = 0
        self.max_messages = max_messages  # 0: no limit
        self.max_bytes = max_bytes  # 0: no limit

    def has_room(self, message: Message) -> bool:
        """Whether storing `message` keeps the store within its limits."""
        if not message.payload or (
            (not self.max_messages or self.count < self.max_messages)
            and (not self.max_bytes or self.bytes + message.size <= self.max_bytes)
        ):
            return True  # fits even as a new topic
        existing = self.get(message.topic)
        count = self.count + (existing is None)
        size = self.bytes + message.size - (existing.size if existing is not None else 0)
        return (not self.max_messages or count <= self.max_messages) and (
            not self.max_bytes or size <= self.max_bytes
        )

    def set(self, message: Message) -> bool:
        """Store `message` for its topic (an empty payload deletes). True if anything changed."""
        topic = message.topic
        if not message.payload:
            return self._delete(topic.split("/"))
        parent, slash, leaf = topic.rpartition("/")
        node = self._parent_node(parent) if slash else self._root
        children = node.children
        if children is None:
            children = node.children = {}
        entry = children.get(leaf)
        if isinstance(entry, _Node):
            old = entry.message
            entry.message = message
        else:
            old = entry
            children[leaf] = message
        if old is None:
            self.count += 1
        else:
            self.bytes -= old.size
        self.bytes += message.size
        return True

    def _parent_node(self, parent: str) -> _Node:
        """The node of topic `parent`, made if missing. The last one is remembered:
        publishers set retained messages in bursts under one parent (a device's points)."""
        last = self._last_parent
        if last is not None and last[0] == parent:
            return last[1]
        node = self._root
        for level in parent.split("/"):
            children = node.children
            if children is None:
                children = node.children = {}
            entry = children.get(level)
            if not isinstance(entry, _Node):  # none yet, or a leaf message: now a node
                entry = children[level] = _Node(message=entry)
            node = entry
        self._last_parent = (parent, node)
        return node

    def get(self, topic: str) -> Message | None:
        """The retained message of exactly `topic`."""
        entry: _Entry | None = self._root
        for level in topic.split("/"):
            if not isinstance(entry, _Node) or entry.children is None:
                return None
            entry = entry.children.get(level)
        return entry.message if isinstance(entry, _Node) else entry

    def _delete(self, levels: list[str]) -> bool:
        self._last_parent = None  # the node may be pruned below
        path = [self._root]  # path[d] is the node of levels[d - 1]
        for level in levels[:-1]:
            children = path[-1].children
            entry = children.get(level) if children is not None else None
            if not isinstance(entry, _Node):
                return False
            path.append(entry)
        children = path[-1].children
        entry = children.get(levels[-1]) if children is not None else None
        if entry is None or children is None:
            return False
        if isinstance(entry, _Node):
            old = entry.message
            if old is None:
                return False
            entry.message = None
            if not entry.children:
                del children[levels[-1]]
        else:
            old = entry
            del children[levels[-1]]
        if not children:
            path[-1].children = None
        self.bytes -= old.size
        self.count -= 1
        for depth in range(len(path) - 1, 0, -1):
            node = path[depth]
            if node.children or node.message is not None:
                break
            parent = path[depth - 1].children
            assert parent is not None  # it holds `node`
            del parent[levels[depth - 1]]
            if not parent:
                path[depth - 1].children = None
        return True

    def match(self, topic_filter: str, now: float) -> list[Message]:
        """Every live retained message whose topic matches `topic_filter`."""
        found: list[Message] = []
        levels = topic_filter.split("/")
        self._walk(self._root, levels, 0, found)
        live = [m for m in found if not m.expired(now)]
        if len(live) != len(found):
            for message in found:
                if message.expired(now):
                    self._delete(message.topic.split("/"))
        return live

    def _walk(self, node: _Entry, levels: list[str], depth: int, found: list[Message]) -> None:
        if depth == len(levels):
            message = node.message if isinstance(node, _Node) else node
            if message is not None:
                found.append(message)
            return
        level = levels[depth]
        if not isinstance(node, _Node):  # a leaf message: "a/#" matches "a" itself
            if level == "#":
                found.append(node)
            return
        children = node.children if node.children is not None else _LEAF
        if level == "#":
            # "a/#" matches "a" itself, then everything below it.
            if node.message is not None and depth > 0:
                found.append(node.message)
            for name, child in children.items():
                if depth == 0 and name.startswith("$"):
                    continue
                self._collect(child, found)
            return
        if level == "+":
            for name, child in children.items():
                if depth == 0 and name.startswith("$"):
                    continue
                self._walk(child, levels, depth + 1, found)
            return
        literal = children.get(level)
        if literal is not None:
            self._walk(literal, levels, depth + 1, found)

    def _collect(self, entry: _Entry, found: list[Message]) -> None:
        stack = [entry]
        while stack:
            current = stack.pop()
            if not isinstance(current, _Node):
                found.append(current)
                continue
            if current.message is not None:
                found.append(current.message)
            if current.children is not None:
                stack.extend(current.children.values())

    def __iter__(self) -> Iterator[Message]:
        found: list[Message] = []
        self._collect(self._root, found)
        return iter(found)
