"""23 acl: a mosquitto ACL file with user blocks, %u / %c patterns and deny rules, driven by
mosquitto_pub/sub, paho and raw clients. Denied SUBSCRIBE is 0x80 (3.1.1) / 0x87 (5.0);
denied PUBLISH is PUBACK/PUBREC 0x87 in 5.0, acknowledged and dropped in 3.1.1, and counted;
retained messages and wills follow the same rules."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gateway.broker.codec import MQTT_5, ConnAck, PubAck, Publish, PubRec, SubAck, Will
from gateway.broker.contracts.passwords import hash_password
from tests.gateway.broker.auth.support import (
    Paho,
    SecureBroker,
    mosquitto_tool,
    run_tool,
    start_secure_broker,
    tcp_client,
)
from tests.gateway.broker.e2e.helpers import MosquittoSub, wait_for

ACL = """\
# anonymous clients (the loopback listener without passwords)
topic read public/#

user operator
topic readwrite site/+/+/set
topic read site/#
topic write site/+/status

user viewer
topic read site/#
topic subscribe #
topic read public/#

user admin
topic #
topic read $SYS/#
topic deny site/+/secret

pattern write devices/%c/state
pattern readwrite users/%u/#
"""
USERS = {"operator": "op-pw", "viewer": "view-pw", "admin": "admin-pw"}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureBroker]:
    directory = tmp_path_factory.mktemp("acl")
    (directory / "acl").write_text(ACL, encoding="utf-8")
    (directory / "passwd").write_text("".join(
        f"{user}:{hash_password(pw.encode(), iterations=1000)}\n" for user, pw in USERS.items()
    ), encoding="utf-8")
    proc = start_secure_broker(directory / "broker", (
        '[limits]\nlogin_delay = 0.01\n'
        f'[[listeners]]\nname = "lan"\nbind = "127.0.0.1:0"\npassword_file = "{directory}/passwd"\n'
        f'acl_file = "{directory}/acl"\nallow_anonymous = true\n'
    ), 1)
    yield proc
    proc.stop()


def client(broker: SecureBroker, user: str | None, version: int = 4):
    c = tcp_client(broker.of("tcp"), version=version)
    c.user = user
    return c


def login(c, client_id: str, **kwargs) -> None:
    password = USERS[c.user].encode() if c.user else None
    connack = c.decode(c.connect(client_id, username=c.user, password=password, **kwargs))
    assert isinstance(connack, ConnAck) and connack.reason_code == 0, connack


@pytest.mark.parametrize(("user", "topic_filter", "v3", "v5"), [
    ("operator", "site/#", 1, 1),
    ("operator", "#", 0x80, 0x87),
    ("viewer", "#", 1, 1),  # `subscribe #`: what arrives is decided per topic
    ("viewer", "$SYS/#", 0x80, 0x87),  # `#` never covers $ topics
    ("admin", "site/m1/secret", 0x80, 0x87),  # covered by a deny rule
    ("admin", "site/#", 1, 1),  # overlaps the deny only partly: allowed, filtered at delivery
    (None, "public/+", 1, 1),
    (None, "site/#", 0x80, 0x87),
    ("operator", "users/operator/#", 1, 1),  # %u
    ("operator", "users/viewer/#", 0x80, 0x87),
    ("operator", "$share/g/site/#", 1, 1),
])
def test_01_subscribe_matrix(broker, user, topic_filter, v3, v5):
    for version, expected in ((4, v3), (MQTT_5, v5)):
        with client(broker, user, version) as c:
            login(c, f"c23-01-{user}-{version}")
            suback = c.decode(c.subscribe((topic_filter, 1)))
            assert isinstance(suback, SubAck) and suback.reason_codes == [expected], (
                user, topic_filter, version)


@pytest.mark.parametrize(("user", "client_id", "topic", "allowed"), [
    ("operator", "op1", "site/m1/relay/set", True),
    ("viewer", "v1", "site/m1/relay/set", False),  # a Modbus write without the right
    ("operator", "op1", "site/m1/status", True),
    ("operator", "op1", "site/m1/temp", False),  # read-only for operators
    ("admin", "ad1", "site/m1/secret", False),
    ("admin", "ad1", "anything/else", True),
    (None, "dev7", "devices/dev7/state", True),  # %c
    (None, "dev7", "devices/dev8/state", False),
    (None, "dev7", "public/x", False),
])
def test_02_publish_matrix(broker, user, client_id, topic, allowed):
    with client(broker, "admin") as watcher:
        login(watcher, f"w-{client_id}")
        watcher.subscribe((topic, 1))
        with client(broker, user, MQTT_5) as v5:
            login(v5, client_id)
            [puback] = [v5.decode(f) for f in v5.publish(topic, b"v5 qos1", qos=1)]
            assert isinstance(puback, PubAck) and puback.reason_code == (0 if allowed else 0x87)
            pubrec = v5.decode(v5.publish(topic, b"v5 qos2", qos=2)[0])
            assert isinstance(pubrec, PubRec) and pubrec.reason_code == (0 if allowed else 0x87)
        with client(broker, user) as v3:
            login(v3, client_id)
            # 3.1.1 has no way to say no: acknowledged (QoS 1) or silently dropped (QoS 0)
            assert v3.publish(topic, b"v3 qos1", qos=1, packet_id=7) == [bytes.fromhex("40020007")]
            v3.publish(topic, b"v3 qos0", qos=0)
            v3.sync()
        got = [p.payload for p in watcher.sync() if isinstance(p, Publish)]
        expected = [b"v5 qos1", b"v5 qos2", b"v3 qos1", b"v3 qos0"] if allowed else []
        assert sorted(got) == sorted(expected)


def test_03_read_rules_filter_delivery_and_retained(broker):
    with client(broker, "admin") as admin:
        login(admin, "c23-03-admin")
        admin.publish("public/weather", b"sunny", qos=1, retain=True)
        admin.publish("plant/private", b"hidden", qos=1, retain=True)
        admin.publish("site/m1/temp", b"21", qos=1, retain=True)
    with client(broker, "viewer") as viewer:
        login(viewer, "c23-03-viewer")
        viewer.subscribe(("#", 1))
        retained = sorted(p.topic for p in viewer.sync() if isinstance(p, Publish))
        assert "plant/private" not in retained
        assert {"public/weather", "site/m1/temp"} <= set(retained)
        with client(broker, "admin") as admin:
            login(admin, "c23-03-admin2")
            admin.publish("plant/private", b"live", qos=1)
            admin.publish("public/weather", b"rain", qos=1)
        [live] = viewer.receive_publishes(1)
        assert (live.topic, live.payload) == ("public/weather", b"rain")
        assert viewer.sync() == []


def test_04_wills_obey_the_rules(broker):
    with client(broker, "operator", MQTT_5) as c:
        refused = c.decode(c.connect("c23-04a", username="operator", password=b"op-pw",
                                     will=Will("site/m1/temp", b"gone", 0, False)))
        assert isinstance(refused, ConnAck) and refused.reason_code == 0x87
    with client(broker, "viewer") as watcher:
        login(watcher, "c23-04-watch")
        watcher.subscribe(("site/+/status", 1))
        with client(broker, "operator") as c:
            login(c, "c23-04b", will=Will("site/m1/status", b"offline", 1, False))
        # closed without DISCONNECT: the (allowed) will is published
        [will] = watcher.receive_publishes(1)
        assert (will.topic, will.payload) == ("site/m1/status", b"offline")


def test_05_mosquitto_and_paho_clients(broker):
    address = broker.of("tcp")
    with MosquittoSub(broker, "-t", "site/#", "-u", "viewer", "-P", "view-pw", "-q", "1") as sub, \
            Paho(address, "c23-05-paho", username="operator", password="op-pw") as paho:
        assert paho.connect() == 0
        paho.publish("site/m2/relay/set", b"on")
        denied = run_tool(mosquitto_tool("mosquitto_sub"), "-h", address.host, "-p",
                          str(address.port), "-u", "viewer", "-P", "view-pw", "-t", "$SYS/#",
                          "-C", "1", "-W", "3")
        assert "denied" in (denied.stdout + denied.stderr).lower()
        pub = run_tool(mosquitto_tool("mosquitto_pub"), "-h", address.host, "-p",
                       str(address.port), "-u", "viewer", "-P", "view-pw", "-t",
                       "site/m2/relay/set", "-m", "off", "-q", "1")
        assert pub.returncode == 0  # 3.1.1: acknowledged, dropped
        paho.publish("site/m2/status", b"ok")
        wait_for(lambda: len([x for x in sub.lines if x.startswith("site/m2/")]) >= 2)
        assert [x for x in sub.lines if x.startswith("site/m2/")] == [
            "site/m2/relay/set|1|0|on", "site/m2/status|1|0|ok"]
    with client(broker, "admin") as c:
        login(c, "c23-05-sys")
        c.subscribe(("$SYS/broker/messages/denied", 0))
        wait_for(lambda: any(int(p.payload) > 0 for p in c.sync() if isinstance(p, Publish)))


def test_06_acl_reload(tmp_path):
    """`Security.reload` (what SIGHUP calls) reads the edited ACL file, all or nothing."""
    from gateway.broker.contracts.acl import Right
    from gateway.broker.net.security_files import load_security
    from outpost.config import parse_config

    acl = tmp_path / "acl"
    acl.write_text("topic read a/#\n", encoding="utf-8")
    config = parse_config({"listeners": [{"bind": "127.0.0.1:0", "acl_file": str(acl)}]})
    security = load_security(config)
    policy = security.policies["127.0.0.1:0"]
    assert policy.acl is not None and policy.acl.allows(None, "c", "a/b", Right.READ)
    acl.write_text("topic read b/#\n", encoding="utf-8")
    security.reload(config)
    policy = security.policies["127.0.0.1:0"]
    assert policy.acl is not None and not policy.acl.allows(None, "c", "a/b", Right.READ)
    acl.write_text("topic reed c/#\n", encoding="utf-8")
    from gateway.base.settings import ConfigError

    with pytest.raises(ConfigError, match=r"listeners\.0\.acl_file: .*line 1"):
        security.reload(config)
    kept = security.policies["127.0.0.1:0"].acl
    assert kept is not None and kept.allows(None, "c", "b/x", Right.READ)
