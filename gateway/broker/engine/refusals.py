"""Whether the broker refuses a CONNECT or a PUBLISH, decided from the packet and the limits.

Pure functions: no broker, no hooks, no clock, no counters. The handlers
(gateway/broker/engine/handle_connect.py, handle_publish.py) call them first, act on the
`Refusal` (answer, close, count, log), and only then ask the hooks (authentication, access
control, store space), which are not pure. The order of the checks is the order in which a
client meets them, so a packet that breaks two rules always gets the same reason code.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

from gateway.broker.codec.packets import MQTT_3_1, MQTT_5, NO_PROPERTIES, Connect, Publish
from gateway.broker.codec.reason_codes import ReasonCode
from gateway.broker.contracts.config import LimitsConfig


@dataclass(frozen=True, slots=True)
class Refusal:
    """A packet the broker does not accept, and how it says so."""

    reason: int  # the MQTT reason code (3.1.x: mapped by the answer)
    why: str  # for the log, and the v5 reason string of a DISCONNECT
    disconnect: bool = False  # a protocol error: DISCONNECT and close, not a refusing answer


def connect_refusal(
    packet: Connect, limits: LimitsConfig, clients_connected: int, internal: bool,
    held_by_link: bool = False,
) -> Refusal | None:
    """Why a CONNECT is refused before authentication, or None.

    `clients_connected` counts network clients only; `internal` is true for the in-process
    links (bridge, uplink), which are part of the gateway: never refused for being too many.
    `held_by_link`: an in-process link is connected with this client identifier. A network
    client may not take such a session over (it would cut the gateway's own link and receive
    what was meant for it), nor use a `$` identifier, which the gateway keeps for its links.
    """
    v5 = packet.protocol_level == MQTT_5
    if not packet.client_id:
        if packet.protocol_level == MQTT_3_1 or (not v5 and not packet.clean_start):
            return Refusal(ReasonCode.CLIENT_IDENTIFIER_NOT_VALID, "empty client identifier")
    elif len(packet.client_id) > limits.max_client_id_length:
        return Refusal(ReasonCode.CLIENT_IDENTIFIER_NOT_VALID,
                       "client identifier longer than limits.max_client_id_length")
    elif not internal and (held_by_link or packet.client_id.startswith("$")):
        return Refusal(ReasonCode.CLIENT_IDENTIFIER_NOT_VALID,
                       "client identifier reserved for the gateway's own links")
    if packet.properties.authentication_method is not None:
        return Refusal(ReasonCode.BAD_AUTHENTICATION_METHOD, "no authentication method is offered")
    if not internal and clients_connected >= limits.max_connections:
        return Refusal(ReasonCode.SERVER_BUSY, "limits.max_connections clients connected")
    if not v5 and keep_alive_over_limit(packet.keep_alive, limits):
        # 3.1.x cannot be told another keep alive: identifier rejected is its only answer.
        return Refusal(ReasonCode.CLIENT_IDENTIFIER_NOT_VALID,
                       "keep alive outside limits.max_keepalive")
    return None


def keep_alive_over_limit(keep_alive: int, limits: LimitsConfig) -> bool:
    """Does a client's keep alive (0: none) exceed `limits.max_keepalive` (0: no limit)?"""
    maximum = limits.max_keepalive
    return bool(maximum) and (keep_alive == 0 or keep_alive > maximum)


def publish_topic(packet: Publish, aliases: Mapping[int, str] | None) -> str | None:
    """The topic a PUBLISH is for, through its topic alias if it has one (None: unknown alias;
    `aliases` None: the connection has set none yet)."""
    alias = packet.properties.topic_alias
    if alias is None or packet.topic:
        return packet.topic
    return aliases.get(alias) if aliases is not None else None


def publish_refusal(
    packet: Publish,
    topic: str | None,
    v5: bool,
    awaiting_release: Collection[int],
    incoming_inflight: int,
    limits: LimitsConfig,
    internal: bool,
) -> Refusal | None:
    """Why a PUBLISH is refused before access control, or None.

    `topic` is `publish_topic`'s answer; `awaiting_release` holds the publisher's QoS 2
    packet ids not yet released, `incoming_inflight` its QoS 1 publishes whose PUBACK has not
    left the process yet. A QoS 2 resend of an id awaiting release is not refused: it is
    answered again.
    """
    props = packet.properties
    if v5 and props is not NO_PROPERTIES:
        if props.subscription_identifiers:
            # [MQTT-3.3.4-6]: only the server puts subscription identifiers in PUBLISH.
            return Refusal(ReasonCode.PROTOCOL_ERROR, "subscription identifier in PUBLISH", True)
        alias = props.topic_alias
        if alias is not None and alias > limits.topic_alias_maximum:
            return Refusal(ReasonCode.TOPIC_ALIAS_INVALID, "topic alias too big", True)
        if topic is None:
            return Refusal(ReasonCode.PROTOCOL_ERROR, "unknown topic alias", True)
        if props.payload_format_indicator == 1 and not _is_utf8(packet.payload):
            return Refusal(ReasonCode.PAYLOAD_FORMAT_INVALID, "payload is not valid UTF-8")
    assert topic is not None  # an alias without a topic is a 5.0 property
    if packet.qos == 2 and packet.packet_id in awaiting_release:
        return None
    # Receive Maximum is a 5.0 promise; a 3.1.x client was never told of a limit (its packet
    # ids bound the set at 65535). In flight: QoS 2 ids awaiting PUBREL and QoS 1 publishes
    # whose PUBACK the client cannot have seen yet. The I/O layer sends (or waits for) the
    # PUBACKs it owes before it hands over a publish that finds the window full, so what
    # is refused here is a window full of QoS 2 ids, which only the client's PUBRELs free.
    if (packet.qos and v5
            and incoming_inflight + len(awaiting_release) >= limits.receive_maximum):
        return Refusal(ReasonCode.RECEIVE_MAXIMUM_EXCEEDED, "receive maximum exceeded", True)
    if topic_over_limits(topic, limits, internal):
        return Refusal(ReasonCode.TOPIC_NAME_INVALID, "topic over limits.max_topic_length or "
                       "limits.max_topic_levels")
    if topic.startswith("$SYS"):
        # $SYS belongs to the broker and its in-process producers, never to clients.
        return Refusal(ReasonCode.NOT_AUTHORIZED, "$SYS is written by the broker only")
    return None


def topic_over_limits(topic: str, limits: LimitsConfig, internal: bool) -> bool:
    """Is a topic or filter longer or deeper than `[limits]` allow?

    The in-process links are exempt: their topics come from the configuration.
    """
    # Cheap pre-check: a str of n characters encodes to at most 4n bytes.
    if len(topic) * 4 <= limits.max_topic_length and topic.count("/") < limits.max_topic_levels:
        return False
    if internal:
        return False
    size, levels = topic_size(topic)
    return size > limits.max_topic_length or levels > limits.max_topic_levels


def topic_size(topic: str) -> tuple[int, int]:
    """A topic's length in UTF-8 bytes and its number of levels."""
    return len(topic.encode("utf-8", "surrogatepass")), topic.count("/") + 1


def _is_utf8(payload: bytes) -> bool:
    try:
        payload.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True
