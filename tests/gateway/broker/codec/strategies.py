"""Hypothesis strategies for every packet type, valid for a given protocol version."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hypothesis import strategies as st

from gateway.broker.codec import (
    MQTT_5,
    Auth,
    ConnAck,
    Connect,
    Disconnect,
    Packet,
    PingReq,
    PingResp,
    Properties,
    PubAck,
    PubComp,
    Publish,
    PubRec,
    PubRel,
    SubAck,
    Subscribe,
    Subscription,
    UnsubAck,
    Unsubscribe,
    Will,
)
from gateway.broker.codec.properties import PROPERTY_TABLE, PropertySpec, WireType
from gateway.broker.codec.reason_codes import ALLOWED_REASON_CODES, SUBACK_FAILURE_V3

# Any Unicode scalar value except U+0000 (surrogates cannot be UTF-8 encoded).
CHARS = st.characters(exclude_categories=["Cs"], exclude_characters="\x00")
TEXT = st.text(CHARS, max_size=12)
LEVEL_CHARS = st.characters(exclude_categories=["Cs"], exclude_characters="\x00/+#")
LEVEL = st.text(LEVEL_CHARS, max_size=6)
TOPIC = st.lists(LEVEL, min_size=1, max_size=4).map("/".join).filter(bool)
PACKET_ID = st.integers(1, 0xFFFF)


@st.composite
def topic_filters(draw: st.DrawFn, shared: bool = True) -> str:
    levels = draw(st.lists(st.one_of(LEVEL, st.just("+")), min_size=1, max_size=4))
    if draw(st.booleans()):
        levels.append("#")
    result = "/".join(levels)
    if not result:
        result = "#"
    if shared and draw(st.integers(0, 4)) == 0:
        group = draw(st.text(LEVEL_CHARS, min_size=1, max_size=5))
        result = f"$share/{group}/{result}"
    return result


_INT_RANGES = {
    WireType.BYTE: (0, 0xFF),
    WireType.TWO_BYTE: (0, 0xFFFF),
    WireType.FOUR_BYTE: (0, 0xFFFFFFFF),
    WireType.VARINT: (0, 268_435_455),
}


def _value(spec: PropertySpec, packet: str) -> st.SearchStrategy[Any]:
    if spec.name == "user_properties":
        return st.lists(st.tuples(TEXT, TEXT), max_size=3).map(tuple)
    if spec.name == "subscription_identifiers":
        size = 3 if packet == "PUBLISH" else 1
        return st.lists(st.integers(1, 268_435_455), max_size=size).map(tuple)
    if spec.name == "response_topic":
        return TOPIC
    if spec.wire in _INT_RANGES:
        low, high = spec.valid or _INT_RANGES[spec.wire]
        return st.integers(low, high)
    if spec.wire is WireType.STRING:
        return TEXT
    return st.binary(max_size=12)


def properties(packet: str) -> st.SearchStrategy[Properties]:
    """Random valid properties for `packet` ("PUBLISH", "WILL", ...)."""
    optional = {spec.name: _value(spec, packet) for spec in PROPERTY_TABLE
                if packet in spec.packets}

    def build(values: dict[str, Any]) -> Properties:
        if packet == "CONNECT" and values.get("authentication_method") is None:
            values.pop("authentication_data", None)
        return Properties(**values)

    return st.fixed_dictionaries({}, optional=optional).map(build)


def _props(version: int, packet: str) -> st.SearchStrategy[Properties]:
    return properties(packet) if version == MQTT_5 else st.just(Properties())


@st.composite
def connects(draw: st.DrawFn, version: int) -> Connect:
    will = None
    if draw(st.booleans()):
        will = Will(draw(TOPIC), draw(st.binary(max_size=12)), draw(st.integers(0, 2)),
                    draw(st.booleans()), draw(_props(version, "WILL")))
    username = draw(st.none() | TEXT)
    password = draw(st.none() | st.binary(max_size=8))
    if version != MQTT_5 and username is None:
        password = None
    return Connect(draw(TEXT), version, draw(st.booleans()), draw(st.integers(0, 0xFFFF)),
                   username, password, will, draw(_props(version, "CONNECT")))


@st.composite
def connacks(draw: st.DrawFn, version: int) -> ConnAck:
    if version == MQTT_5:
        code = draw(st.sampled_from(sorted(ALLOWED_REASON_CODES["CONNACK"])))
    else:
        code = draw(st.integers(0, 5))
    present = draw(st.booleans()) if code == 0 else False
    return ConnAck(present, code, draw(_props(version, "CONNACK")))


@st.composite
def publishes(draw: st.DrawFn, version: int) -> Publish:
    props = draw(_props(version, "PUBLISH"))
    topic = draw(TOPIC)
    if props.topic_alias is not None and draw(st.booleans()):
        topic = ""
    qos = draw(st.integers(0, 2))
    return Publish(topic, draw(st.binary(max_size=300)), qos, draw(st.booleans()),
                   draw(st.booleans()) if qos else False,
                   draw(PACKET_ID) if qos else None, props)


def _acks(cls: type[PubAck | PubRec | PubRel | PubComp], name: str) -> Callable[[int], Any]:
    @st.composite
    def strategy(draw: st.DrawFn, version: int) -> PubAck | PubRec | PubRel | PubComp:
        code = draw(st.sampled_from(sorted(ALLOWED_REASON_CODES[name])))
        return cls(draw(PACKET_ID), code, draw(properties(name)))

    return strategy  # v5-only fields are generated for every version: 3.1.1 drops them


@st.composite
def subscribes(draw: st.DrawFn, version: int) -> Subscribe:
    subs = []
    for topic_filter in draw(st.lists(topic_filters(), min_size=1, max_size=4)):
        shared = topic_filter.startswith("$share/")
        subs.append(Subscription(topic_filter, draw(st.integers(0, 2)),
                                 False if shared else draw(st.booleans()),
                                 draw(st.booleans()), draw(st.integers(0, 2))))
    return Subscribe(draw(PACKET_ID), subs, draw(properties("SUBSCRIBE")))


@st.composite
def subacks(draw: st.DrawFn, version: int) -> SubAck:
    allowed = ALLOWED_REASON_CODES["SUBACK"] if version == MQTT_5 else {0, 1, 2,
                                                                         SUBACK_FAILURE_V3}
    codes = draw(st.lists(st.sampled_from(sorted(allowed)), min_size=1, max_size=5))
    return SubAck(draw(PACKET_ID), codes, draw(properties("SUBACK")))


@st.composite
def unsubscribes(draw: st.DrawFn, version: int) -> Unsubscribe:
    filters = draw(st.lists(topic_filters(), min_size=1, max_size=4))
    return Unsubscribe(draw(PACKET_ID), filters, draw(properties("UNSUBSCRIBE")))


@st.composite
def unsubacks(draw: st.DrawFn, version: int) -> UnsubAck:
    codes = draw(st.lists(st.sampled_from(sorted(ALLOWED_REASON_CODES["UNSUBACK"])),
                          min_size=1, max_size=5))
    return UnsubAck(draw(PACKET_ID), codes, draw(properties("UNSUBACK")))


@st.composite
def disconnects(draw: st.DrawFn, version: int) -> Disconnect:
    code = draw(st.sampled_from(sorted(ALLOWED_REASON_CODES["DISCONNECT"])))
    return Disconnect(code, draw(properties("DISCONNECT")))


@st.composite
def auths(draw: st.DrawFn, version: int) -> Auth:
    code = draw(st.sampled_from(sorted(ALLOWED_REASON_CODES["AUTH"])))
    return Auth(code, draw(properties("AUTH")))


STRATEGIES: dict[str, Callable[[int], st.SearchStrategy[Packet]]] = {
    "connect": connects,
    "connack": connacks,
    "publish": publishes,
    "puback": _acks(PubAck, "PUBACK"),
    "pubrec": _acks(PubRec, "PUBREC"),
    "pubrel": _acks(PubRel, "PUBREL"),
    "pubcomp": _acks(PubComp, "PUBCOMP"),
    "subscribe": subscribes,
    "suback": subacks,
    "unsubscribe": unsubscribes,
    "unsuback": unsubacks,
    "pingreq": lambda version: st.just(PingReq()),
    "pingresp": lambda version: st.just(PingResp()),
    "disconnect": disconnects,
    "auth": auths,
}


def any_packet(version: int) -> st.SearchStrategy[Packet]:
    """Any packet type valid for `version`."""
    return st.one_of([make(version) for kind, make in STRATEGIES.items()
                      if kind != "auth" or version == MQTT_5])
