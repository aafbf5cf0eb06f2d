"""ACL files: mosquitto's format and evaluation order, %u/%c patterns, subscribe coverage."""

from __future__ import annotations

import pytest

from gateway.broker.contracts.acl import AclError, Right, covers, matches, parse_acl

R, W, S = Right.READ, Right.WRITE, Right.SUBSCRIBE

# The shape of mosquitto's aclfile.example, plus deny rules and outpost's `subscribe`.
ACL = """\
# anonymous clients (before any user line)
topic read public/#
topic read $SYS/broker/uptime

user alice
topic readwrite plant/#
topic deny plant/secret/#
topic write alarms/alice

user bob
topic read plant/line1/+
topic subscribe #
topic read bob/#
topic write bob/out

user eve
topic read x/+

user admin
topic #
topic $SYS/#

pattern write devices/%c/state
pattern read users/%u/#
pattern deny users/%u/locked
"""


@pytest.fixture(scope="module")
def acl():
    return parse_acl(ACL)


@pytest.mark.parametrize(("user", "client", "topic", "right", "allowed"), [
    # anonymous block
    (None, "c1", "public/news", R, True),
    (None, "c1", "public/news", W, False),
    (None, "c1", "plant/x", R, False),
    (None, "c1", "$SYS/broker/uptime", R, True),
    # alice: readwrite minus the deny
    ("alice", "a1", "plant/line1/temp", R, True),
    ("alice", "a1", "plant/line1/temp", W, True),
    ("alice", "a1", "plant/secret/key", R, False),
    ("alice", "a1", "plant/secret", W, False),  # `#` also matches the parent level
    ("alice", "a1", "alarms/alice", W, True),
    ("alice", "a1", "alarms/alice", R, False),
    ("alice", "a1", "public/news", R, False),  # the anonymous block is not hers
    # bob
    ("bob", "b1", "plant/line1/temp", R, True),
    ("bob", "b1", "plant/line1/temp/x", R, False),
    ("bob", "b1", "plant/line2/temp", R, False),
    ("bob", "b1", "bob/out", W, True),
    ("bob", "b1", "bob/in", W, False),
    # admin: `#` never covers $ topics, the explicit $SYS rule does
    ("admin", "x", "anything/at/all", W, True),
    ("admin", "x", "$SYS/broker/load", R, True),
    ("alice", "a1", "$SYS/broker/uptime", R, False),
    # patterns: %c and %u substitute whole levels, for every client
    ("alice", "dev7", "devices/dev7/state", W, True),
    ("alice", "dev7", "devices/dev8/state", W, False),
    (None, "dev7", "devices/dev7/state", W, True),
    ("carol", "c", "users/carol/inbox", R, True),
    ("carol", "c", "users/dave/inbox", R, False),
    ("carol", "c", "users/carol/locked", R, False),  # pattern deny first
    (None, "c", "users//inbox", R, False),  # %u rules skip anonymous clients
    # wildcards in identities get nothing from patterns
    ("al+ce", "dev7", "users/al+ce/x", R, False),
    ("alice", "dev#", "devices/dev#/state", W, False),
    # unknown user: no block, patterns only
    ("mallory", "m", "plant/x", R, False),
    ("mallory", "m", "devices/m/state", W, True),
])
def test_matrix(acl, user, client, topic, right, allowed) -> None:
    assert acl.allows(user, client, topic, right) is allowed
    assert acl.allows(user, client, topic, right) is allowed  # cached answer agrees


@pytest.mark.parametrize(("user", "client", "topic_filter", "allowed"), [
    ("alice", "a", "plant/#", True),
    ("alice", "a", "plant/+/temp", True),
    ("alice", "a", "plant/secret/#", False),  # fully covered by a deny
    ("alice", "a", "#", False),  # wider than any grant
    ("alice", "a", "alarms/alice", False),  # write-only
    ("bob", "b", "plant/line1/+", True),
    ("eve", "e", "x/+", True),
    ("eve", "e", "x/#", False),  # `+` does not cover `#`
    ("bob", "b", "plant/line1/#", True),  # covered by his `subscribe #`
    ("bob", "b", "#", True),  # `subscribe #` (outpost): READ decides what arrives
    ("bob", "b", "$SYS/#", False),  # ... but `#` never covers $ topics
    ("bob", "b", "$share/g/bob/#", True),  # shared: the filter after the group counts
    ("admin", "x", "$SYS/#", True),
    (None, "a", "public/+", True),
    ("carol", "c", "users/carol/#", True),
    ("carol", "c", "users/+/#", False),
])
def test_subscribe_needs_coverage(acl, user, client, topic_filter, allowed) -> None:
    assert acl.allows(user, client, topic_filter, S) is allowed


@pytest.mark.parametrize(("rule", "topic", "expected"), [
    ("a/#", "a", True), ("a/#", "a/b/c", True), ("a/+", "a/b", True), ("a/+", "a/b/c", False),
    ("+/b", "/b", True), ("#", "$SYS/x", False), ("+/x", "$SYS/x", False),
    ("$SYS/#", "$SYS/x", True), ("a/b", "a/b", True), ("a/b", "a/b/", False),
])
def test_matches(rule, topic, expected) -> None:
    assert matches(tuple(rule.split("/")), tuple(topic.split("/"))) is expected


@pytest.mark.parametrize(("rule", "wanted", "expected"), [
    ("a/#", "a", True), ("a/#", "a/#", True), ("a/#", "a/+/c", True), ("a/+", "a/#", False),
    ("a/+", "a/b", True), ("a/b", "a/+", False), ("#", "x/#", True), ("#", "$SYS/#", False),
    ("+/#", "a", True), ("a/+/c", "a/+/c", True), ("a/+/c", "a/+/#", False),
])
def test_covers(rule, wanted, expected) -> None:
    assert covers(tuple(rule.split("/")), tuple(wanted.split("/"))) is expected


def test_mosquitto_parsing_details() -> None:
    acl = parse_acl("user a b\ntopic read my topic/x\ntopic t2\n  topic   write   x/y  \n")
    assert acl.allows("a b", "c", "my topic/x", R)  # usernames and topics may have spaces
    assert acl.allows("a b", "c", "t2", W)  # no access word: readwrite
    assert acl.allows("a b", "c", "x/y", W) and not acl.allows("a b", "c", "x/y", R)
    assert acl.rule_count == 3


@pytest.mark.parametrize(("text", "line", "fragment"), [
    ("topic reed a/b\n", 1, "unknown access 'reed'"),
    ("# ok\nuser\n", 2, "needs a username"),
    ("topic\n", 1, "needs a topic"),
    ("topik read a\n", 1, "unknown keyword"),
    ("topic read a/#/b\n", 1, "whole last level"),
    ("pattern write a/b+\n", 1, "whole level"),
])
def test_errors_name_the_line(text, line, fragment) -> None:
    with pytest.raises(AclError) as info:
        parse_acl(text)
    assert info.value.line == line and fragment in str(info.value)


def test_empty_file_denies_everything() -> None:
    acl = parse_acl("# nothing\n")
    assert not acl.allows(None, "c", "a", R) and not acl.allows("u", "c", "a", W)
