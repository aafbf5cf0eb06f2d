"""Codec errors.

Two kinds, as in h11: the remote peer broke the protocol (`MQTTProtocolError` and its
subclasses, each carrying the MQTT reason code the broker answers with), or local code
asked the encoder for something the protocol cannot express (`LocalProtocolError`).
"""

from __future__ import annotations

from gateway.broker.codec.reason_codes import ReasonCode


class MQTTProtocolError(Exception):
    """The peer sent bytes that break the protocol. `reason_code` says how."""

    reason_code: int = ReasonCode.PROTOCOL_ERROR
    # Set by the CONNECT decoder once the protocol level is known, so the broker can answer
    # a v5 client with a v5 CONNACK carrying `reason_code` (None: level not known).
    protocol_level: int | None = None

    def __init__(self, message: str, reason_code: int | None = None) -> None:
        super().__init__(message)
        if reason_code is not None:
            self.reason_code = reason_code

    @property
    def reason(self) -> str:
        """The human-readable reason."""
        return str(self.args[0]) if self.args else ""


class MalformedPacket(MQTTProtocolError):  # noqa: N818 (MQTT names)
    """The packet cannot be parsed as the specification says (0x81)."""

    reason_code = ReasonCode.MALFORMED_PACKET


class ProtocolError(MQTTProtocolError):
    """The packet parses but breaks a protocol rule (0x82)."""

    reason_code = ReasonCode.PROTOCOL_ERROR


class TopicNameInvalid(MQTTProtocolError):  # noqa: N818 (MQTT names)
    """A topic name (PUBLISH, will, response topic) is empty or has wildcards (0x90)."""

    reason_code = ReasonCode.TOPIC_NAME_INVALID


class TopicFilterInvalid(MQTTProtocolError):  # noqa: N818 (MQTT names)
    """A topic filter (SUBSCRIBE/UNSUBSCRIBE) breaks the wildcard or $share rules (0x8F)."""

    reason_code = ReasonCode.TOPIC_FILTER_INVALID


class PacketTooLarge(MQTTProtocolError):  # noqa: N818 (MQTT names)
    """The fixed header announces a packet above the maximum packet size (0x95)."""

    reason_code = ReasonCode.PACKET_TOO_LARGE


class UnsupportedProtocolVersion(MQTTProtocolError):  # noqa: N818 (MQTT names)
    """CONNECT with a protocol name/level we do not speak (0x84 / 3.1.1 return code 1)."""

    reason_code = ReasonCode.UNSUPPORTED_PROTOCOL_VERSION

    def __init__(self, message: str, protocol_level: int) -> None:
        super().__init__(message)
        self.protocol_level = protocol_level


class LocalProtocolError(Exception):
    """Our own code asked to encode something the protocol cannot carry."""
