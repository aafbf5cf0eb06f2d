"""Access control lists: mosquitto's `acl_file` format, with separate subscribe rights.

How this works: `parse_acl` turns the text of an ACL file into an `AccessList`; `allows` answers
"may this user / client id do READ, WRITE or SUBSCRIBE on this topic (or filter)?". The file
format is mosquitto's (mosquitto.conf(5), `acl_file`), so existing files are read as they are:

    # comment (a '#' in the first column)
    topic read $SYS/#              <- before any `user` line: rules for anonymous clients
    user alice
    topic readwrite plant/alice/#  <- rules for the user named in the last `user` line
    topic deny plant/alice/secret
    pattern write devices/%c/state <- for every client: %c = client id, %u = username
    pattern read users/%u/#

Access words: `read` (receive messages, and subscribe with filters inside the rule's filter),
`write` (publish), `readwrite` (both), `deny` (nothing: checked before every grant), and the
outpost extension `subscribe` (subscribe only: lets a client subscribe with a broad filter
while `read` rules decide what it receives). No word means `readwrite`.

Evaluation, as in mosquitto 2.0: the client's own rules first (its `user` block, or the
anonymous block when it has no username) — a matching `deny` refuses, a matching grant allows —
then the `pattern` rules the same way; nothing matching means refused. `%c` / `%u` substitute
whole topic levels only, `%u` rules never apply to anonymous clients, and a client id or
username containing `+` or `#` gets nothing from patterns. A rule whose filter starts with a
wildcard never matches a `$` topic ([MQTT-4.7.2-1]).

Subscriptions: a SUBSCRIBE filter is allowed when a rule with the subscribe right *covers* it
(every topic the filter can match is matched by the rule) and no `deny` rule covers it. A
filter that only overlaps a deny rule is allowed; the READ check at delivery then withholds the
denied topics. `$share/group/` is stripped before checking. Pure.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from gateway.broker.codec.topics import SHARE_PREFIX

__all__ = ["AccessList", "AclError", "Right", "parse_acl"]


class Right(enum.IntFlag):
    """What a rule grants."""

    NONE = 0
    READ = 1
    WRITE = 2
    SUBSCRIBE = 4


ACCESS_WORDS: dict[str, Right] = {
    "read": Right.READ | Right.SUBSCRIBE,
    "write": Right.WRITE,
    "readwrite": Right.READ | Right.WRITE | Right.SUBSCRIBE,
    "subscribe": Right.SUBSCRIBE,
    "deny": Right.NONE,
}
_CACHE_LIMIT = 8192


class AclError(ValueError):
    """A line of an ACL file is not understood (`line` is 1-based)."""

    def __init__(self, message: str, line: int) -> None:
        super().__init__(f"line {line}: {message}")
        self.line = line


@dataclass(frozen=True, slots=True)
class Rule:
    """One `topic` or `pattern` line."""

    levels: tuple[str, ...]
    rights: Right
    line: int

    @property
    def deny(self) -> bool:
        return self.rights == Right.NONE

    @property
    def uses_username(self) -> bool:
        return "%u" in self.levels


@dataclass(slots=True)
class RuleSet:
    """Rules of one block, deny rules first (as mosquitto orders them), then file order."""

    rules: list[Rule] = field(default_factory=list)

    def add(self, rule: Rule) -> None:
        if rule.deny:
            index = sum(1 for r in self.rules if r.deny)
            self.rules.insert(index, rule)
        else:
            self.rules.append(rule)


def _split(text: str) -> tuple[str, ...]:
    return tuple(text.split("/"))


def matches(rule: tuple[str, ...], topic: tuple[str, ...]) -> bool:
    """MQTT filter matching on split levels (`#` also matches the parent level)."""
    if topic[0].startswith("$") and rule[0] in ("+", "#"):
        return False
    size = len(topic)
    for index, level in enumerate(rule):
        if level == "#":
            return True
        if index >= size or (level != "+" and level != topic[index]):
            return False
    return len(rule) == size


def covers(rule: tuple[str, ...], wanted: tuple[str, ...]) -> bool:
    """Is every topic that filter `wanted` matches also matched by filter `rule`?"""
    if wanted[0].startswith("$") and rule[0] in ("+", "#"):
        return False
    size = len(wanted)
    for index, level in enumerate(rule):
        if level == "#":
            return True
        if index >= size:
            return False
        other = wanted[index]
        if other == "#" or (level != "+" and (other == "+" or other != level)):
            return False
    return len(rule) == size


def _substitute(levels: tuple[str, ...], client_id: str, username: str | None) -> tuple[str, ...]:
    return tuple(
        client_id if level == "%c" else (username or "") if level == "%u" else level
        for level in levels
    )


class AccessList:
    """A parsed ACL file."""

    def __init__(self) -> None:
        self.anonymous = RuleSet()
        self.users: dict[str, RuleSet] = {}
        self.patterns = RuleSet()
        self._cache: dict[tuple[str | None, str, str, Right], bool] = {}

    @property
    def rule_count(self) -> int:
        return (len(self.anonymous.rules) + len(self.patterns.rules)
                + sum(len(block.rules) for block in self.users.values()))

    def allows(self, username: str | None, client_id: str, topic: str, right: Right) -> bool:
        """May this client do `right` on `topic` (a topic filter for SUBSCRIBE)?"""
        key = (username, client_id, topic, right)
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        result = self._decide(username, client_id, topic, right)
        if len(self._cache) >= _CACHE_LIMIT:
            self._cache.clear()
        self._cache[key] = result
        return result

    def _decide(self, username: str | None, client_id: str, topic: str, right: Right) -> bool:
        if right == Right.SUBSCRIBE and topic.startswith(SHARE_PREFIX):
            _, _, rest = topic[len(SHARE_PREFIX):].partition("/")
            topic = rest or topic
        levels = _split(topic)
        test = covers if right == Right.SUBSCRIBE else matches
        own = self.anonymous if username is None else self.users.get(username)
        if own is not None:
            for rule in own.rules:
                if test(rule.levels, levels):
                    if rule.deny:
                        return False
                    if rule.rights & right:
                        return True
        if not self.patterns.rules:
            return False
        if any(c in client_id for c in "+#") or (username and any(c in username for c in "+#")):
            return False
        for rule in self.patterns.rules:
            if username is None and rule.uses_username:
                continue
            if test(_substitute(rule.levels, client_id, username), levels):
                if rule.deny:
                    return False
                if rule.rights & right:
                    return True
        return False


def _check_filter(text: str, number: int) -> None:
    levels = text.split("/")
    for index, level in enumerate(levels):
        if "#" in level and (level != "#" or index != len(levels) - 1):
            raise AclError(f"'#' must be the whole last level in {text!r}", number)
        if "+" in level and level != "+":
            raise AclError(f"'+' must be a whole level in {text!r}", number)
    if "\x00" in text:
        raise AclError("a topic contains U+0000", number)


def parse_acl(text: str) -> AccessList:
    """Parse the text of an ACL file; raises `AclError` naming the first bad line."""
    acl = AccessList()
    block: RuleSet = acl.anonymous
    for number, raw in enumerate(text.splitlines(), start=1):
        if raw.startswith("#"):
            continue
        line = raw.rstrip()
        words = line.split(None, 1)
        if not words:
            continue
        keyword = words[0]
        rest = words[1].strip() if len(words) > 1 else ""
        if keyword == "user":
            if not rest:
                raise AclError("`user` needs a username", number)
            block = acl.users.setdefault(rest, RuleSet())
            continue
        if keyword not in ("topic", "pattern"):
            raise AclError(f"unknown keyword {keyword!r} (expected topic, pattern or user)",
                           number)
        if not rest:
            raise AclError(f"`{keyword}` needs a topic", number)
        first, _, remainder = rest.partition(" ")
        remainder = remainder.strip()
        if remainder:
            if first not in ACCESS_WORDS:
                raise AclError(
                    f"unknown access {first!r} (expected {', '.join(ACCESS_WORDS)})", number
                )
            rights, topic = ACCESS_WORDS[first], remainder
        else:
            rights, topic = ACCESS_WORDS["readwrite"], first
        _check_filter(topic, number)
        rule = Rule(_split(topic), rights, number)
        (acl.patterns if keyword == "pattern" else block).add(rule)
    return acl
