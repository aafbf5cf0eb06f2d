"""The packet model: one dataclass per MQTT control packet, shared by 3.1, 3.1.1 and 5.0.

Fields that only exist in 5.0 (reason codes on acks, properties) have defaults, so a 3.1.1
packet is the same object with those left at their defaults. The encoder drops what the
target version cannot carry; the decoder fills what the wire version carries.

`Properties` is immutable: one shared `NO_PROPERTIES` instance stands for "none", and code
that changes a property builds a new object with `dataclasses.replace`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum
from typing import Union


class PacketType(IntEnum):
    """Control packet types (the high nibble of the first byte)."""

    CONNECT = 1
    CONNACK = 2
    PUBLISH = 3
    PUBACK = 4
    PUBREC = 5
    PUBREL = 6
    PUBCOMP = 7
    SUBSCRIBE = 8
    SUBACK = 9
    UNSUBSCRIBE = 10
    UNSUBACK = 11
    PINGREQ = 12
    PINGRESP = 13
    DISCONNECT = 14
    AUTH = 15


# Protocol levels as carried in CONNECT.
MQTT_3_1 = 3
MQTT_3_1_1 = 4
MQTT_5 = 5


@dataclass(frozen=True, slots=True, kw_only=True)
class Properties:
    """MQTT 5.0 properties. None / empty means "absent"."""

    payload_format_indicator: int | None = None  # 0x01
    message_expiry_interval: int | None = None  # 0x02
    content_type: str | None = None  # 0x03
    response_topic: str | None = None  # 0x08
    correlation_data: bytes | None = None  # 0x09
    subscription_identifiers: tuple[int, ...] = ()  # 0x0B, repeatable in PUBLISH
    session_expiry_interval: int | None = None  # 0x11
    assigned_client_identifier: str | None = None  # 0x12
    server_keep_alive: int | None = None  # 0x13
    authentication_method: str | None = None  # 0x15
    authentication_data: bytes | None = None  # 0x16
    request_problem_information: int | None = None  # 0x17
    will_delay_interval: int | None = None  # 0x18
    request_response_information: int | None = None  # 0x19
    response_information: str | None = None  # 0x1A
    server_reference: str | None = None  # 0x1C
    reason_string: str | None = None  # 0x1F
    receive_maximum: int | None = None  # 0x21
    topic_alias_maximum: int | None = None  # 0x22
    topic_alias: int | None = None  # 0x23
    maximum_qos: int | None = None  # 0x24
    retain_available: int | None = None  # 0x25
    user_properties: tuple[tuple[str, str], ...] = ()  # 0x26, repeatable, order kept
    maximum_packet_size: int | None = None  # 0x27
    wildcard_subscription_available: int | None = None  # 0x28
    subscription_identifier_available: int | None = None  # 0x29
    shared_subscription_available: int | None = None  # 0x2A


NO_PROPERTIES = Properties()


@dataclass(slots=True)
class Will:
    """The will message carried in CONNECT."""

    topic: str
    payload: bytes
    qos: int = 0
    retain: bool = False
    properties: Properties = NO_PROPERTIES


@dataclass(slots=True)
class Connect:
    """CONNECT. `protocol_level` is 3 (3.1, name "MQIsdp"), 4 (3.1.1) or 5."""

    client_id: str
    protocol_level: int = MQTT_3_1_1
    clean_start: bool = True
    keep_alive: int = 60
    username: str | None = None
    password: bytes | None = None
    will: Will | None = None
    properties: Properties = NO_PROPERTIES


@dataclass(slots=True)
class ConnAck:
    """CONNACK. `reason_code` is the v5 reason code or the 3.1.1 return code."""

    session_present: bool = False
    reason_code: int = 0
    properties: Properties = NO_PROPERTIES


@dataclass(slots=True)
class Publish:
    """PUBLISH. `packet_id` is None for QoS 0."""

    topic: str
    payload: bytes = b""
    qos: int = 0
    retain: bool = False
    dup: bool = False
    packet_id: int | None = None
    properties: Properties = NO_PROPERTIES


@dataclass(slots=True)
class PubAck:
    """PUBACK (QoS 1 acknowledgement)."""

    packet_id: int
    reason_code: int = 0
    properties: Properties = NO_PROPERTIES


@dataclass(slots=True)
class PubRec:
    """PUBREC (QoS 2, part 1)."""

    packet_id: int
    reason_code: int = 0
    properties: Properties = NO_PROPERTIES


@dataclass(slots=True)
class PubRel:
    """PUBREL (QoS 2, part 2)."""

    packet_id: int
    reason_code: int = 0
    properties: Properties = NO_PROPERTIES


@dataclass(slots=True)
class PubComp:
    """PUBCOMP (QoS 2, part 3)."""

    packet_id: int
    reason_code: int = 0
    properties: Properties = NO_PROPERTIES


@dataclass(slots=True)
class Subscription:
    """One topic filter and its options in SUBSCRIBE."""

    topic_filter: str
    qos: int = 0
    no_local: bool = False
    retain_as_published: bool = False
    retain_handling: int = 0


@dataclass(slots=True)
class Subscribe:
    """SUBSCRIBE."""

    packet_id: int
    subscriptions: list[Subscription] = field(default_factory=list)
    properties: Properties = NO_PROPERTIES


@dataclass(slots=True)
class SubAck:
    """SUBACK: one reason code (granted QoS or failure) per requested filter."""

    packet_id: int
    reason_codes: list[int] = field(default_factory=list)
    properties: Properties = NO_PROPERTIES


@dataclass(slots=True)
class Unsubscribe:
    """UNSUBSCRIBE."""

    packet_id: int
    topic_filters: list[str] = field(default_factory=list)
    properties: Properties = NO_PROPERTIES


@dataclass(slots=True)
class UnsubAck:
    """UNSUBACK: reason codes exist in 5.0 only (empty list for 3.1.1)."""

    packet_id: int
    reason_codes: list[int] = field(default_factory=list)
    properties: Properties = NO_PROPERTIES


@dataclass(slots=True)
class PingReq:
    """PINGREQ."""


@dataclass(slots=True)
class PingResp:
    """PINGRESP."""


@dataclass(slots=True)
class Disconnect:
    """DISCONNECT (reason code and properties in 5.0 only)."""

    reason_code: int = 0
    properties: Properties = NO_PROPERTIES


@dataclass(slots=True)
class Auth:
    """AUTH (5.0 only)."""

    reason_code: int = 0
    properties: Properties = NO_PROPERTIES


Packet = Union[  # noqa: UP007
    Connect, ConnAck, Publish, PubAck, PubRec, PubRel, PubComp, Subscribe, SubAck,
    Unsubscribe, UnsubAck, PingReq, PingResp, Disconnect, Auth,
]
