"""Sans-I/O MQTT 3.1 / 3.1.1 / 5.0 codec.

How this works: `decode(buf, version, max_packet_size, offset)` parses one packet at `offset`
in a buffer and returns `(packet, bytes_consumed)` or `NEED_DATA`; `encode(packet, version)`
returns the wire bytes. Nothing here does I/O, reads a clock or keeps state between calls:
the caller owns the buffer and the negotiated version. Errors from the peer are
`MQTTProtocolError` subclasses carrying the MQTT reason code; misuse of the encoder raises
`LocalProtocolError`. See `decoder.py` for the decode pipeline, one module per packet
family for the formats, `properties.py` for the v5 property table.
"""

from gateway.broker.codec.decoder import (
    DEFAULT_MAX_PACKET_SIZE,
    NEED_DATA,
    NeedData,
    decode,
    encode,
)
from gateway.broker.codec.errors import (
    LocalProtocolError,
    MalformedPacket,
    MQTTProtocolError,
    PacketTooLarge,
    ProtocolError,
    TopicFilterInvalid,
    TopicNameInvalid,
    UnsupportedProtocolVersion,
)
from gateway.broker.codec.packets import (
    MQTT_3_1,
    MQTT_3_1_1,
    MQTT_5,
    NO_PROPERTIES,
    Auth,
    ConnAck,
    Connect,
    Disconnect,
    Packet,
    PacketType,
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
from gateway.broker.codec.publish import reemit_qos0
from gateway.broker.codec.reason_codes import ALLOWED_REASON_CODES, ConnectReturnCode, ReasonCode

__all__ = [
    "ALLOWED_REASON_CODES",
    "DEFAULT_MAX_PACKET_SIZE",
    "MQTT_3_1",
    "MQTT_3_1_1",
    "MQTT_5",
    "NEED_DATA",
    "NO_PROPERTIES",
    "Auth",
    "ConnAck",
    "Connect",
    "ConnectReturnCode",
    "Disconnect",
    "LocalProtocolError",
    "MQTTProtocolError",
    "MalformedPacket",
    "NeedData",
    "Packet",
    "PacketTooLarge",
    "PacketType",
    "PingReq",
    "PingResp",
    "Properties",
    "ProtocolError",
    "PubAck",
    "PubComp",
    "PubRec",
    "PubRel",
    "Publish",
    "ReasonCode",
    "SubAck",
    "Subscribe",
    "Subscription",
    "TopicFilterInvalid",
    "TopicNameInvalid",
    "UnsubAck",
    "Unsubscribe",
    "UnsupportedProtocolVersion",
    "Will",
    "decode",
    "encode",
    "reemit_qos0",
]
