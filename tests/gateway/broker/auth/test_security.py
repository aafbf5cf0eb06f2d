"""The `Security` hook in the broker core, the login throttle and the connection limiter."""

from __future__ import annotations

import pytest

from gateway.broker.codec.packets import ConnAck, PubAck, Publish, SubAck, Will
from gateway.broker.codec.reason_codes import ReasonCode
from gateway.broker.contracts.acl import parse_acl
from gateway.broker.contracts.auth import (
    ConnectionLimiter,
    ListenerPolicy,
    LoginThrottle,
    PasswordDB,
    Security,
    source_of,
)
from gateway.broker.contracts.hooks import Access
from gateway.broker.contracts.passwords import hash_password, parse_password_text
from gateway.broker.core.session import ClientIdentity, ClientInfo
from gateway.broker.engine.links import Link
from tests.gateway.broker.core.fakes import Harness

OK = ReasonCode.SUCCESS
BAD = ReasonCode.BAD_USER_NAME_OR_PASSWORD
NOPE = ReasonCode.NOT_AUTHORIZED


def db(**users: str) -> PasswordDB:
    text = "".join(f"{name}:{hash_password(pw.encode(), iterations=1000)}\n"
                   for name, pw in users.items())
    return PasswordDB(parse_password_text(text))


def info(listener: str = "lan", username: str | None = None, client_id: str = "c",
         anonymous: bool = False) -> ClientInfo:
    return ClientIdentity(client_id, username, listener, "10.0.0.9:5555", anonymous)


@pytest.fixture(scope="module")
def security() -> Security:
    passwords = db(alice="wonder", bob="builder")
    return Security([
        ListenerPolicy("lan", False, passwords),
        ListenerPolicy("local", True),  # loopback, no password file
        ListenerPolicy("open", True, passwords),
        ListenerPolicy("certs", False, identity_username=True),
    ])


@pytest.mark.parametrize(("client", "password", "expected"), [
    (info("lan"), None, NOPE),  # anonymous refused off loopback
    (info("lan", "alice"), b"wonder", OK),
    (info("lan", "alice"), b"wonder!", BAD),
    (info("lan", "alice"), None, BAD),
    (info("lan", "nobody"), b"wonder", BAD),
    (info("local"), None, OK),
    (info("local", "admin"), b"anything", OK),  # unverifiable username: anonymous, allowed here
    (info("open"), None, OK),  # password file + anonymous allowed: anonymous ok ...
    (info("open", "bob"), b"wrong", BAD),  # ... but a wrong password is still wrong
    (info("certs", "alice"), None, OK),  # the I/O layer put the certificate's CN here
    (info("certs"), None, NOPE),
    (info("link"), None, OK),  # in-process links and restored wills are trusted
    (info("restored"), None, OK),
    (info("elsewhere", anonymous=True), None, OK),  # unknown listener: the default rule
    (info("elsewhere"), None, NOPE),
])
def test_authenticate(security: Security, client: ClientInfo, password: bytes | None,
                      expected: int) -> None:
    assert security.authenticate(client, password) == expected


def test_slow_hash_runs_outside_and_is_cached() -> None:
    security = Security([ListenerPolicy("lan", False, db(alice="wonder"))])
    job = security.hash_job("lan", "alice", b"wonder")
    assert job is not None and job() is True
    security.remember("lan", "alice", b"wonder", True)
    assert security.hash_job("lan", "alice", b"wonder") is None  # cached: no work left
    bad = security.hash_job("lan", "alice", b"guess")
    assert bad is not None and bad() is False
    security.remember("lan", "alice", b"guess", False)
    assert security.authenticate(info("lan", "alice"), b"guess") == BAD
    unknown = security.hash_job("lan", "ghost", b"x")  # unknown users cost a hash too
    assert unknown is not None and unknown() is False
    assert security.hash_job("lan", None, None) is None


def test_acl_uses_only_verified_usernames() -> None:
    acl = parse_acl("topic read public/#\nuser admin\ntopic #\n")
    security = Security([ListenerPolicy("lan", False, db(admin="pw"), acl),
                         ListenerPolicy("local", True, None, acl)])
    assert security.check_acl(info("lan", "admin"), "a/b", Access.WRITE)
    # on a listener without passwords "admin" is just a claim: anonymous rules apply
    assert not security.check_acl(info("local", "admin"), "a/b", Access.WRITE)
    assert security.check_acl(info("local", "admin"), "public/x", Access.READ)
    assert not security.check_acl(info("lan", "bob"), "a/b", Access.WRITE)
    assert security.restricts_reading


def test_reload_swaps_everything_or_nothing() -> None:
    security = Security([ListenerPolicy("lan", False, db(alice="one"))],
                        loader=lambda config: [ListenerPolicy("lan", False, db(alice="two"))])
    assert security.authenticate(info("lan", "alice"), b"one") == OK
    from outpost.config import Config

    security.reload(Config())
    assert security.authenticate(info("lan", "alice"), b"one") == BAD
    assert security.authenticate(info("lan", "alice"), b"two") == OK

    def broken(config: Config) -> list[ListenerPolicy]:
        raise ValueError("bad file")

    security.loader = broken
    with pytest.raises(ValueError):
        security.reload(Config())
    assert security.authenticate(info("lan", "alice"), b"two") == OK  # kept


def test_login_throttle_doubles_and_forgets() -> None:
    throttle = LoginThrottle(base=0.5, max_delay=4.0, forget=60.0, max_sources=2)
    assert throttle.delay("a", 0.0) == 0.0
    delays = []
    for n in range(6):
        throttle.failed("a", float(n))
        delays.append(throttle.delay("a", float(n)))
    assert delays == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]
    assert throttle.delay("b", 5.0) == 0.0  # another source is not affected
    assert throttle.delay("a", 5.0 + 61.0) == 0.0  # forgiven after `forget`
    throttle.failed("x", 0.0)
    throttle.failed("y", 0.0)
    throttle.failed("z", 0.0)  # bounded table: the oldest goes
    assert throttle.failures("x", 0.0) == 0 and throttle.failures("z", 0.0) == 1


def test_connection_limiter() -> None:
    limiter = ConnectionLimiter(rate=2.0, burst=3, per_source=4, max_pending=10,
                                exempt=["127.0.0.1"])
    results = [limiter.admit("10.0.0.1", 0.0) for _ in range(5)]
    assert results == [None, None, None, "rate", "rate"]  # burst of 3, then the rate
    assert limiter.admit("10.0.0.1", 0.5) is None  # one token back after 0.5 s at 2/s
    assert limiter.admit("10.0.0.1", 10.0) == "source"  # 4 open from there
    limiter.release("10.0.0.1")
    assert limiter.admit("10.0.0.1", 10.0) is None
    assert all(limiter.admit("127.0.0.1", 10.0) is None for _ in range(5))  # exempt
    assert limiter.admit("10.0.0.2", 10.0) == "pending"  # 10 before CONNECT
    limiter.connected()
    assert limiter.admit("10.0.0.2", 10.0) is None


@pytest.mark.parametrize(("peer", "source"), [
    ("10.1.2.3:5555", "10.1.2.3"), ("::1:1883", "::1"), ("[fe80::1]:1", "fe80::1"),
    ("", "unix"), ("unix", "unix"),
])
def test_source_of(peer: str, source: str) -> None:
    assert source_of(peer) == source


# -- in the broker core --------------------------------------------------------------------------

BRIDGE_ACL = """\
user operator
topic readwrite site/+/+/set
topic read site/#
user viewer
topic read site/#
"""


def core(acl_text: str = BRIDGE_ACL) -> tuple[Harness, Security]:
    security = Security([ListenerPolicy("test", False, db(operator="op", viewer="view"),
                                        parse_acl(acl_text))])
    harness = Harness(security)
    return harness, security


def test_bridge_set_topics_need_write_access() -> None:
    """A LAN client must not write a Modbus point it has no right to; the link is trusted."""
    h, _ = core()
    received: list[str] = []
    link = Link(h.broker, "outpost-bridge", lambda: h.now,
                lambda message, qos, retain: received.append(message.topic))
    link.subscribe("site/+/+/set", qos=1)
    assert link.publish("site/meter1/power", b"42") == 0  # the link writes anywhere
    viewer, vsink = h.connect("v1", username="viewer", password=b"view")
    operator, osink = h.connect("o1", username="operator", password=b"op")
    assert [type(p) for p in vsink.packets()] == [ConnAck]
    osink.packets()
    h.send(viewer, Publish("site/meter1/relay/set", b"1", qos=1, packet_id=5))
    assert received == []
    assert vsink.packets() == [PubAck(5)]  # 3.1.1: acknowledged and dropped
    h.send(operator, Publish("site/meter1/relay/set", b"1", qos=1, packet_id=6))
    assert received == ["site/meter1/relay/set"]
    assert h.broker.counters.denied == 1


def test_denied_subscribe_publish_and_retained_and_will() -> None:
    h, _ = core()
    writer, wsink = h.connect("o1", version=5, username="operator", password=b"op")
    h.send(writer, Publish("site/m/v/set", b"9", qos=1, packet_id=1, retain=True))
    h.send(writer, Publish("other/x", b"1", qos=1, packet_id=2))
    acks = [p for p in wsink.packets() if isinstance(p, PubAck)]
    assert [(a.packet_id, a.reason_code) for a in acks] == [(1, 0), (2, 0x87)]
    viewer, vsink = h.connect("v1", version=5, username="viewer", password=b"view")
    vsink.packets()
    h.subscribe(viewer, "#", qos=1)  # wider than site/#
    h.subscribe(viewer, "site/#", qos=1)
    packets = vsink.packets()
    subacks = [p.reason_codes for p in packets if isinstance(p, SubAck)]
    assert subacks == [[0x87], [1]]
    assert [p.topic for p in packets if isinstance(p, Publish)] == ["site/m/v/set"]  # retained
    # a will the client may not publish refuses the CONNECT
    _, sink = h.connect("v2", version=5, username="viewer", password=b"view",
                        will=Will("site/m/v/set", b"boom", 0, False))
    [connack] = sink.packets()
    assert isinstance(connack, ConnAck) and connack.reason_code == NOPE


def test_max_subscriptions_per_client() -> None:
    h = Harness(max_subscriptions_per_client=2)
    conn, sink = h.connect("s", version=5)
    sink.packets()
    for topic_filter in ("a", "b", "a", "c"):
        h.subscribe(conn, topic_filter)
    codes = [p.reason_codes for p in sink.packets() if isinstance(p, SubAck)]
    assert codes == [[0], [0], [0], [ReasonCode.QUOTA_EXCEEDED]]  # re-subscribing "a" is fine
    assert h.broker.counters.subscriptions_limited == 1
