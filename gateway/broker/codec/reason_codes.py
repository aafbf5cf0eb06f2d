"""MQTT reason codes (5.0 section 2.4) and 3.1.1 CONNACK return codes."""

from __future__ import annotations

from enum import IntEnum


class ReasonCode(IntEnum):
    """Every MQTT 5.0 reason code. Values below 0x80 are success, the rest failure."""

    SUCCESS = 0x00  # also NORMAL_DISCONNECTION and GRANTED_QOS_0
    GRANTED_QOS_1 = 0x01
    GRANTED_QOS_2 = 0x02
    DISCONNECT_WITH_WILL = 0x04
    NO_MATCHING_SUBSCRIBERS = 0x10
    NO_SUBSCRIPTION_EXISTED = 0x11
    CONTINUE_AUTHENTICATION = 0x18
    RE_AUTHENTICATE = 0x19
    UNSPECIFIED_ERROR = 0x80
    MALFORMED_PACKET = 0x81
    PROTOCOL_ERROR = 0x82
    IMPLEMENTATION_SPECIFIC_ERROR = 0x83
    UNSUPPORTED_PROTOCOL_VERSION = 0x84
    CLIENT_IDENTIFIER_NOT_VALID = 0x85
    BAD_USER_NAME_OR_PASSWORD = 0x86
    NOT_AUTHORIZED = 0x87
    SERVER_UNAVAILABLE = 0x88
    SERVER_BUSY = 0x89
    BANNED = 0x8A
    SERVER_SHUTTING_DOWN = 0x8B
    BAD_AUTHENTICATION_METHOD = 0x8C
    KEEP_ALIVE_TIMEOUT = 0x8D
    SESSION_TAKEN_OVER = 0x8E
    TOPIC_FILTER_INVALID = 0x8F
    TOPIC_NAME_INVALID = 0x90
    PACKET_IDENTIFIER_IN_USE = 0x91
    PACKET_IDENTIFIER_NOT_FOUND = 0x92
    RECEIVE_MAXIMUM_EXCEEDED = 0x93
    TOPIC_ALIAS_INVALID = 0x94
    PACKET_TOO_LARGE = 0x95
    MESSAGE_RATE_TOO_HIGH = 0x96
    QUOTA_EXCEEDED = 0x97
    ADMINISTRATIVE_ACTION = 0x98
    PAYLOAD_FORMAT_INVALID = 0x99
    RETAIN_NOT_SUPPORTED = 0x9A
    QOS_NOT_SUPPORTED = 0x9B
    USE_ANOTHER_SERVER = 0x9C
    SERVER_MOVED = 0x9D
    SHARED_SUBSCRIPTIONS_NOT_SUPPORTED = 0x9E
    CONNECTION_RATE_EXCEEDED = 0x9F
    MAXIMUM_CONNECT_TIME = 0xA0
    SUBSCRIPTION_IDENTIFIERS_NOT_SUPPORTED = 0xA1
    WILDCARD_SUBSCRIPTIONS_NOT_SUPPORTED = 0xA2


class ConnectReturnCode(IntEnum):
    """MQTT 3.1 / 3.1.1 CONNACK return codes."""

    ACCEPTED = 0
    UNACCEPTABLE_PROTOCOL_VERSION = 1
    IDENTIFIER_REJECTED = 2
    SERVER_UNAVAILABLE = 3
    BAD_USER_NAME_OR_PASSWORD = 4
    NOT_AUTHORIZED = 5


# 3.1.1 SUBACK has only one failure value.
SUBACK_FAILURE_V3 = 0x80

# Reason codes each v5 packet may carry (spec 2.4, table 2-6 and each packet's section).
ALLOWED_REASON_CODES: dict[str, frozenset[int]] = {
    "CONNACK": frozenset(
        {0x00, 0x80, 0x81, 0x82, 0x83, 0x84, 0x85, 0x86, 0x87, 0x88, 0x89, 0x8A,
         0x8C, 0x90, 0x95, 0x97, 0x99, 0x9A, 0x9B, 0x9C, 0x9D, 0x9F}
    ),
    "PUBACK": frozenset({0x00, 0x10, 0x80, 0x83, 0x87, 0x90, 0x91, 0x97, 0x99}),
    "PUBREC": frozenset({0x00, 0x10, 0x80, 0x83, 0x87, 0x90, 0x91, 0x97, 0x99}),
    "PUBREL": frozenset({0x00, 0x92}),
    "PUBCOMP": frozenset({0x00, 0x92}),
    "SUBACK": frozenset({0x00, 0x01, 0x02, 0x80, 0x83, 0x87, 0x8F, 0x91, 0x97, 0x9E, 0xA1, 0xA2}),
    "UNSUBACK": frozenset({0x00, 0x11, 0x80, 0x83, 0x87, 0x8F, 0x91}),
    "DISCONNECT": frozenset(
        {0x00, 0x04, 0x80, 0x81, 0x82, 0x83, 0x87, 0x89, 0x8B, 0x8D, 0x8E, 0x8F, 0x90,
         0x93, 0x94, 0x95, 0x96, 0x97, 0x98, 0x99, 0x9A, 0x9B, 0x9C, 0x9D, 0x9E, 0x9F,
         0xA0, 0xA1, 0xA2}
    ),
    "AUTH": frozenset({0x00, 0x18, 0x19}),
}


def v3_connack_code(reason: int) -> int:
    """Map a v5 CONNACK reason code to the closest 3.1.1 return code."""
    if reason == ReasonCode.SUCCESS:
        return ConnectReturnCode.ACCEPTED
    if reason == ReasonCode.UNSUPPORTED_PROTOCOL_VERSION:
        return ConnectReturnCode.UNACCEPTABLE_PROTOCOL_VERSION
    if reason == ReasonCode.CLIENT_IDENTIFIER_NOT_VALID:
        return ConnectReturnCode.IDENTIFIER_REJECTED
    if reason == ReasonCode.BAD_USER_NAME_OR_PASSWORD:
        return ConnectReturnCode.BAD_USER_NAME_OR_PASSWORD
    if reason in (ReasonCode.NOT_AUTHORIZED, ReasonCode.BANNED, ReasonCode.TOPIC_NAME_INVALID):
        return ConnectReturnCode.NOT_AUTHORIZED
    return ConnectReturnCode.SERVER_UNAVAILABLE
