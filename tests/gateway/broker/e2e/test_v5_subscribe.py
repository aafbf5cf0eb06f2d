"""MQTT 5.0 subscription options and identifiers, overlapping and shared subscriptions,
UNSUBACK reason codes."""

from __future__ import annotations

from gateway.broker.codec import Publish, ReasonCode, Subscription
from tests.conftest import require
from tests.gateway.broker.e2e.v5_helpers import Background, PahoV5, RawV5, connected, run_tool
from tests.support.broker_proc import BrokerProcess


def _payloads(packets: list[object]) -> list[bytes]:
    return [p.payload for p in packets if isinstance(p, Publish)]


# -- noLocal ---------------------------------------------------------------------------


def test_no_local_suppresses_own_messages_only(broker: BrokerProcess) -> None:
    with connected(broker, "v5sub-nl") as me, connected(broker, "v5sub-nl-other") as other:
        me.subscribe(Subscription("v5sub/nl", 0, no_local=True))
        other.subscribe(Subscription("v5sub/nl", 0, no_local=False))
        me.publish("v5sub/nl", b"mine", 1)
        other.publish("v5sub/nl", b"theirs", 1)
        assert _payloads(me.sync()) == [b"theirs"]
        assert _payloads(other.sync()) == [b"mine", b"theirs"]  # other still gets its own


def test_no_local_with_paho(broker: BrokerProcess) -> None:
    with PahoV5(broker, "v5sub-nl-paho") as client, connected(broker, "v5sub-nl-pub") as pub:
        client.connect()
        assert client.subscribe("v5sub/nl-paho", 1, no_local=True)[0] == 1
        client.publish("v5sub/nl-paho", b"echo?", 1)
        pub.publish("v5sub/nl-paho", b"from pub", 1)
        msg = client.get()
        assert msg.payload == b"from pub"
        client.sync()
        assert client.pending() == []


# -- retain as published / retain handling ---------------------------------------------


def test_retain_as_published(broker: BrokerProcess) -> None:
    with connected(broker, "v5sub-rap1") as keep, connected(broker, "v5sub-rap0") as clear, \
            connected(broker, "v5sub-rap-pub") as pub:
        keep.subscribe(Subscription("v5sub/rap", 1, retain_as_published=True))
        clear.subscribe(Subscription("v5sub/rap", 1, retain_as_published=False))
        pub.publish("v5sub/rap", b"r", 1, retain=True)
        pub.publish("v5sub/rap", b"n", 1, retain=False)
        [k1, k2] = keep.publishes(2)
        [c1, c2] = clear.publishes(2)
        assert [(k1.retain, k1.payload), (k2.retain, k2.payload)] == [(True, b"r"), (False, b"n")]
        assert [(c1.retain, c1.payload), (c2.retain, c2.payload)] == [(False, b"r"), (False, b"n")]
        for client, got in ((keep, (k1, k2)), (clear, (c1, c2))):
            for p in got:
                client.ack(p)
        # Retained messages sent because of a subscribe always carry RETAIN.
        with connected(broker, "v5sub-rap-late") as late:
            late.subscribe(Subscription("v5sub/rap", 1, retain_as_published=False))
            [old] = late.publishes(1)
            assert (old.retain, old.payload) == (True, b"r")
            late.ack(old)
        pub.publish("v5sub/rap", b"", 1, retain=True)
        keep.ack(keep.expect(Publish))
        clear.ack(clear.expect(Publish))


def test_retain_handling_0_1_2(broker: BrokerProcess) -> None:
    with connected(broker, "v5sub-rh-pub") as pub:
        pub.publish("v5sub/rh", b"kept", 1, retain=True)
    with connected(broker, "v5sub-rh") as sub:
        sub.subscribe(Subscription("v5sub/rh", 0, retain_handling=0))
        assert _payloads(sub.sync()) == [b"kept"]
        sub.subscribe(Subscription("v5sub/rh", 0, retain_handling=0))
        assert _payloads(sub.sync()) == [b"kept"]  # 0: on every subscribe
        sub.subscribe(Subscription("v5sub/rh", 0, retain_handling=1))
        assert sub.sync() == []  # 1: the subscription already existed
        sub.unsubscribe("v5sub/rh")
        sub.subscribe(Subscription("v5sub/rh", 0, retain_handling=1))
        assert _payloads(sub.sync()) == [b"kept"]  # 1: new subscription
        sub.unsubscribe("v5sub/rh")
        sub.subscribe(Subscription("v5sub/rh", 0, retain_handling=2))
        assert sub.sync() == []  # 2: never
        # The subscription itself works.
        with connected(broker, "v5sub-rh-pub2") as pub:
            pub.publish("v5sub/rh", b"", 1, retain=True)
            pub.publish("v5sub/rh", b"live", 1)
        assert _payloads(sub.sync()) == [b"", b"live"]  # the delete, then the live one


def test_retain_handling_with_paho(broker: BrokerProcess) -> None:
    with connected(broker, "v5sub-rhp-pub") as pub:
        pub.publish("v5sub/rhp", b"kept", 1, retain=True)
        with PahoV5(broker, "v5sub-rhp") as client:
            client.connect()
            client.subscribe("v5sub/rhp", 1, retain_handling=2)
            client.subscribe("v5sub/rhp/other", 1, retain_handling=0)
            assert client.pending() == []
            client.subscribe("v5sub/rhp", 1, retain_handling=0)
            msg = client.get()
            assert (msg.payload, msg.retain) == (b"kept", True)
        pub.publish("v5sub/rhp", b"", 1, retain=True)


# -- subscription identifiers ----------------------------------------------------------


def test_subscription_identifier_on_live_and_retained(broker: BrokerProcess) -> None:
    with connected(broker, "v5sub-id-pub") as pub:
        pub.publish("v5sub/id/r", b"ret", 1, retain=True)
        with connected(broker, "v5sub-id") as sub:
            sub.subscribe("v5sub/id/#", qos=1, subscription_id=268_435_455)
            [ret] = sub.publishes(1)
            assert ret.properties.subscription_identifiers == (268_435_455,)
            sub.ack(ret)
            pub.publish("v5sub/id/live", b"live", 1)
            [live] = sub.publishes(1)
            assert live.properties.subscription_identifiers == (268_435_455,)
            sub.ack(live)
            # Re-subscribing without an identifier removes it.
            sub.subscribe(Subscription("v5sub/id/#", 1, retain_handling=2))
            pub.publish("v5sub/id/live", b"plain", 1)
            [plain] = sub.publishes(1)
            assert plain.properties.subscription_identifiers == ()
            sub.ack(plain)
        pub.publish("v5sub/id/r", b"", 1, retain=True)


def test_overlapping_subscriptions_one_delivery_highest_qos_all_ids(
    broker: BrokerProcess,
) -> None:
    with connected(broker, "v5sub-ov") as sub, connected(broker, "v5sub-ov-pub") as pub:
        assert sub.subscribe("v5sub/ov/+", qos=1, subscription_id=11).reason_codes == [1]
        assert sub.subscribe("v5sub/ov/#", qos=2, subscription_id=22).reason_codes == [2]
        assert sub.subscribe("v5sub/ov/x", qos=0).reason_codes == [0]  # no identifier
        pub.publish("v5sub/ov/x", b"once", 2)
        packets = sub.sync()
        assert len(packets) == 1, packets
        [got] = packets
        assert isinstance(got, Publish)
        assert (got.payload, got.qos) == (b"once", 2)
        assert sorted(got.properties.subscription_identifiers) == [11, 22]
        sub.ack(got)
        # A topic only one filter matches carries only that identifier.
        pub.publish("v5sub/ov/y/z", b"deep", 1)
        [deep] = sub.publishes(1)
        assert (deep.qos, deep.properties.subscription_identifiers) == (1, (22,))
        sub.ack(deep)
        # The delivered QoS never exceeds the publisher's.
        pub.publish("v5sub/ov/x", b"q0", 0)
        [q0] = sub.publishes(1)
        assert (q0.qos, q0.packet_id) == (0, None)


def test_subscription_identifiers_with_paho(broker: BrokerProcess) -> None:
    with PahoV5(broker, "v5sub-id-paho") as client, connected(broker, "v5sub-idp-pub") as pub:
        client.connect()
        client.subscribe("v5sub/idp/+", 1, subscription_id=5)
        client.subscribe("v5sub/idp/#", 0, subscription_id=6)
        pub.publish("v5sub/idp/a", b"both", 1)
        msg = client.get()
        assert msg.qos == 1
        assert sorted(msg.properties.SubscriptionIdentifier) == [5, 6]
        client.sync()
        assert client.pending() == []


# -- shared subscriptions ----------------------------------------------------------------


def test_shared_subscription_each_message_to_exactly_one_member(broker: BrokerProcess) -> None:
    with connected(broker, "v5sub-sh-a") as a, connected(broker, "v5sub-sh-b") as b, \
            connected(broker, "v5sub-sh-c") as c, connected(broker, "v5sub-sh-plain") as plain, \
            connected(broker, "v5sub-sh-pub") as pub:
        assert a.subscribe("$share/grp/v5sub/sh/+", qos=1).reason_codes == [1]
        assert b.subscribe("$share/grp/v5sub/sh/+", qos=1).reason_codes == [1]
        assert c.subscribe("$share/other/v5sub/sh/+", qos=1).reason_codes == [1]
        plain.subscribe("v5sub/sh/+", qos=1)
        for i in range(9):
            pub.publish(f"v5sub/sh/{i % 2}", b"%d" % i, 1)
        got = {}
        for name, member in (("a", a), ("b", b), ("c", c), ("plain", plain)):
            packets = [p for p in member.sync() if isinstance(p, Publish)]
            for p in packets:
                member.ack(p)
            got[name] = [int(p.payload) for p in packets]
        # Group "grp": every message to exactly one of a and b, taking turns.
        assert sorted(got["a"] + got["b"]) == list(range(9))
        assert {len(got["a"]), len(got["b"])} == {4, 5}
        assert {i % 2 for i in got["a"]} in ({0}, {1})
        assert {i % 2 for i in got["b"]} in ({0}, {1})
        # A group of one gets everything, and so does a plain subscription.
        assert got["c"] == list(range(9))
        assert got["plain"] == list(range(9))


def test_shared_subscription_skips_offline_member(broker: BrokerProcess) -> None:
    with connected(broker, "v5sub-sho-on") as online, connected(broker, "v5sub-sho-pub") as pub:
        online.subscribe("$share/g2/v5sub/sho", qos=1)
        with connected(broker, "v5sub-sho-off", session_expiry_interval=60) as offline:
            offline.subscribe("$share/g2/v5sub/sho", qos=1)
            offline.disconnect()
        for i in range(4):
            pub.publish("v5sub/sho", b"%d" % i, 1)
        got = online.publishes(4)
        assert [p.payload for p in got] == [b"0", b"1", b"2", b"3"]
        for p in got:
            online.ack(p)
    with RawV5(broker) as again:
        ack = again.connect("v5sub-sho-off", clean_start=False)
        assert ack.session_present is True
        assert again.sync() == []  # nothing was parked with the offline member
        again.disconnect()


def test_no_retained_messages_on_shared_subscribe(broker: BrokerProcess) -> None:
    with connected(broker, "v5sub-shr-pub") as pub:
        pub.publish("v5sub/shr", b"retained", 1, retain=True)
        with connected(broker, "v5sub-shr") as sub:
            sub.subscribe(Subscription("$share/g/v5sub/shr", 1, retain_handling=0))
            assert sub.sync() == []
            pub.publish("v5sub/shr", b"live", 1, retain=True)
            [live] = sub.publishes(1)
            assert live.payload == b"live"
            sub.ack(live)
        pub.publish("v5sub/shr", b"", 1, retain=True)


def test_no_local_on_shared_subscription_is_a_protocol_error(broker: BrokerProcess) -> None:
    with connected(broker, "v5sub-sh-nl") as client:
        # SUBSCRIBE id 1, no properties, "$share/g/x" with options 0x04 (No Local).
        filt = b"$share/g/x"
        body = b"\x00\x01\x00" + len(filt).to_bytes(2, "big") + filt + b"\x04"
        client.send_raw(bytes((0x82, len(body))) + body)
        client.expect_disconnect(ReasonCode.PROTOCOL_ERROR)


def test_mosquitto_sub_shared_group(broker: BrokerProcess) -> None:
    sub = require("mosquitto_sub")
    pub = require("mosquitto_pub")
    with connected(broker, "v5sub-mosq-member") as member:
        member.subscribe("$share/mg/v5sub/mosq", qos=1)
        with Background([sub, "-h", broker.host, "-p", str(broker.port), "-V", "mqttv5",
                         "-q", "1", "-t", "$share/mg/v5sub/mosq", "-C", "2"]) as tool:
            by_member: list[str] = []
            by_tool: list[str] = []
            for i in range(20):
                done = run_tool([pub, "-h", broker.host, "-p", str(broker.port), "-V",
                                 "mqttv5", "-q", "1", "-t", "v5sub/mosq", "-m", f"m{i}"])
                assert done.returncode == 0, done.stderr
                # Acknowledged to mosquitto_pub, so routed: either the member has it by the
                # end of a ping round trip, or mosquitto_sub prints it.
                got = [p for p in member.sync() if isinstance(p, Publish)]
                for p in got:
                    member.ack(p)
                if got:
                    by_member += [p.payload.decode() for p in got]
                else:
                    by_tool.append(tool.line())
                if len(by_tool) == 2:
                    break
            assert tool.proc.wait(5) == 0
            # Every message went to exactly one of the two members.
            assert sorted(by_member + by_tool) == sorted(f"m{j}" for j in range(i + 1))
            assert len(by_tool) == 2 and by_member


# -- unsubscribe -----------------------------------------------------------------------


def test_unsubscribe_reason_codes(broker: BrokerProcess) -> None:
    with connected(broker, "v5sub-unsub") as client:
        client.subscribe("v5sub/u/a", "$share/g/v5sub/u/b", qos=1)
        ack = client.unsubscribe("v5sub/u/a", "v5sub/u/none", "$share/g/v5sub/u/b", "v5sub/u/b")
        assert ack.reason_codes == [
            ReasonCode.SUCCESS, ReasonCode.NO_SUBSCRIPTION_EXISTED,
            ReasonCode.SUCCESS, ReasonCode.NO_SUBSCRIPTION_EXISTED,
        ]
        assert client.unsubscribe("v5sub/u/a").reason_codes == [0x11]
        with connected(broker, "v5sub-unsub-pub") as pub:
            pub.publish("v5sub/u/a", b"x", 1)
            pub.publish("v5sub/u/b", b"x", 1)
        assert client.sync() == []


def test_unsubscribe_reason_codes_with_paho(broker: BrokerProcess) -> None:
    with PahoV5(broker, "v5sub-unsub-paho") as client:
        client.connect()
        client.subscribe("v5sub/up", 1)
        assert [int(c.value) for c in client.unsubscribe("v5sub/up")] == [0x00]
        assert [int(c.value) for c in client.unsubscribe("v5sub/up")] == [0x11]


def test_suback_grants_requested_qos(broker: BrokerProcess) -> None:
    with connected(broker, "v5sub-grant") as client:
        ack = client.subscribe(
            Subscription("v5sub/g0", 0), Subscription("v5sub/g1", 1), Subscription("v5sub/g2", 2)
        )
        assert ack.reason_codes == [0, 1, 2]
