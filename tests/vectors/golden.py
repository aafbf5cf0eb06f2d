"""Golden wire vectors: one table shared by the codec, encoder and end-to-end tests.

Each case is `(name, version, hex, packet)`: the exact bytes for protocol level `version`
(3 = 3.1, 4 = 3.1.1, 5 = 5.0) and the packet they decode to. The bytes were written by hand
from the specification, one commented field per line; they are never produced by `encode`.
Every case is canonical (the encoder must produce exactly these bytes). `NON_CANONICAL`
lists valid encodings the decoder must accept but the encoder never writes (long forms of
v5 acks), each with the canonical bytes it re-encodes to.
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway.broker.codec.packets import (
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


@dataclass(frozen=True)
class Golden:
    """One golden vector."""

    name: str
    version: int
    hex: str
    packet: Packet

    @property
    def data(self) -> bytes:
        """The wire bytes."""
        return bytes.fromhex(self.hex)


@dataclass(frozen=True)
class NonCanonical:
    """A valid encoding the encoder does not produce; `canonical` is what it re-encodes to."""

    name: str
    version: int
    hex: str
    packet: Packet
    canonical: str

    @property
    def data(self) -> bytes:
        """The wire bytes."""
        return bytes.fromhex(self.hex)


def h(*fields: str) -> str:
    """Join commented hex fields into one hex string."""
    return "".join(fields).replace(" ", "").lower()


KV = (("k", "v"),)

CONNECT_CASES = (
    Golden("connect-v31-minimal", 3, h(
        "10 11",                    # CONNECT, remaining length 17
        "00 06 4d 51 49 73 64 70",  # protocol name "MQIsdp"
        "03",                       # protocol level 3 (3.1)
        "02",                       # flags: clean session
        "00 3c",                    # keep alive 60
        "00 03 63 33 31",           # client id "c31"
    ), Connect("c31", protocol_level=3, clean_start=True, keep_alive=60)),
    Golden("connect-v311-minimal", 4, h(
        "10 10",                    # CONNECT, remaining length 16
        "00 04 4d 51 54 54",        # protocol name "MQTT"
        "04",                       # protocol level 4 (3.1.1)
        "02",                       # flags: clean session
        "00 3c",                    # keep alive 60
        "00 04 74 65 73 74",        # client id "test"
    ), Connect("test", protocol_level=4, clean_start=True, keep_alive=60)),
    Golden("connect-v311-empty-client-id", 4, h(
        "10 0c",                    # CONNECT, remaining length 12
        "00 04 4d 51 54 54",        # "MQTT"
        "04",                       # level 4
        "02",                       # flags: clean session
        "00 00",                    # keep alive 0 (disabled)
        "00 00",                    # client id "" (the session decides)
    ), Connect("", protocol_level=4, clean_start=True, keep_alive=0)),
    Golden("connect-v311-will-user-password", 4, h(
        "10 34",                    # CONNECT, remaining length 52
        "00 04 4d 51 54 54",        # "MQTT"
        "04",                       # level 4
        "ec",                       # flags: user, password, will retain, will QoS 1, will
        "00 1e",                    # keep alive 30
        "00 08 63 6c 69 65 6e 74 2d 31",     # client id "client-1"
        "00 0a 77 69 6c 6c 2f 74 6f 70 69 63",  # will topic "will/topic"
        "00 03 62 79 65",           # will payload "bye"
        "00 05 61 6c 69 63 65",     # user name "alice"
        "00 06 73 65 63 72 65 74",  # password "secret"
    ), Connect("client-1", 4, False, 30, "alice", b"secret",
               Will("will/topic", b"bye", qos=1, retain=True))),
    Golden("connect-v311-username-only", 4, h(
        "10 18",                    # CONNECT, remaining length 24
        "00 04 4d 51 54 54",        # "MQTT"
        "04",                       # level 4
        "82",                       # flags: user name, clean session
        "00 3c",                    # keep alive 60
        "00 05 64 65 76 34 32",     # client id "dev42"
        "00 05 61 6c 69 63 65",     # user name "alice"
    ), Connect("dev42", 4, True, 60, username="alice")),
    Golden("connect-v31-will-qos2-user-password", 3, h(
        "10 2b",                    # CONNECT, remaining length 43
        "00 06 4d 51 49 73 64 70",  # "MQIsdp"
        "03",                       # level 3
        "d6",                       # flags: user, password, will QoS 2, will, clean session
        "00 0a",                    # keep alive 10
        "00 03 63 33 31",           # client id "c31"
        "00 03 61 2f 62",           # will topic "a/b"
        "00 04 67 6f 6e 65",        # will payload "gone"
        "00 05 61 6c 69 63 65",     # user name "alice"
        "00 06 73 65 63 72 65 74",  # password "secret"
    ), Connect("c31", 3, True, 10, "alice", b"secret", Will("a/b", b"gone", qos=2))),
    Golden("connect-v5-minimal", 5, h(
        "10 11",                    # CONNECT, remaining length 17
        "00 04 4d 51 54 54",        # "MQTT"
        "05",                       # level 5
        "02",                       # flags: clean start
        "00 3c",                    # keep alive 60
        "00",                       # property length 0
        "00 04 74 65 73 74",        # client id "test"
    ), Connect("test", protocol_level=5, clean_start=True, keep_alive=60)),
    Golden("connect-v5-properties", 5, h(
        "10 3c",                    # CONNECT, remaining length 60
        "00 04 4d 51 54 54",        # "MQTT"
        "05",                       # level 5
        "02",                       # flags: clean start
        "00 3c",                    # keep alive 60
        "2a",                       # property length 42
        "11 00 00 0e 10",           # session expiry interval 3600
        "15 00 05 53 43 52 41 4d",  # authentication method "SCRAM"
        "16 00 04 63 68 61 6c",     # authentication data b"chal"
        "17 00",                    # request problem information 0
        "19 01",                    # request response information 1
        "21 00 14",                 # receive maximum 20
        "22 00 0a",                 # topic alias maximum 10
        "26 00 01 6b 00 01 76",     # user property ("k", "v")
        "27 00 10 00 00",           # maximum packet size 1048576
        "00 05 61 70 70 2d 31",     # client id "app-1"
    ), Connect("app-1", 5, True, 60, properties=Properties(
        session_expiry_interval=3600, authentication_method="SCRAM",
        authentication_data=b"chal", request_problem_information=0,
        request_response_information=1, receive_maximum=20, topic_alias_maximum=10,
        user_properties=KV, maximum_packet_size=1048576))),
    Golden("connect-v5-will-properties", 5, h(
        "10 58",                    # CONNECT, remaining length 88
        "00 04 4d 51 54 54",        # "MQTT"
        "05",                       # level 5
        "06",                       # flags: will (QoS 0, no retain), clean start
        "00 3c",                    # keep alive 60
        "00",                       # property length 0
        "00 05 64 65 76 34 32",     # client id "dev42"
        "34",                       # will property length 52
        "01 01",                    # payload format indicator 1 (UTF-8)
        "02 00 00 00 3c",           # message expiry interval 60
        "03 00 0a 74 65 78 74 2f 70 6c 61 69 6e",  # content type "text/plain"
        "08 00 08 61 70 70 2f 72 65 73 70",        # response topic "app/resp"
        "09 00 06 63 6f 72 72 2d 31",              # correlation data b"corr-1"
        "18 00 00 00 05",           # will delay interval 5
        "26 00 01 6b 00 01 76",     # user property ("k", "v")
        "00 0a 77 69 6c 6c 2f 74 6f 70 69 63",     # will topic "will/topic"
        "00 03 62 79 65",           # will payload "bye"
    ), Connect("dev42", 5, True, 60, will=Will("will/topic", b"bye", properties=Properties(
        payload_format_indicator=1, message_expiry_interval=60, content_type="text/plain",
        response_topic="app/resp", correlation_data=b"corr-1", will_delay_interval=5,
        user_properties=KV)))),
    Golden("connect-v5-password-without-username", 5, h(
        "10 14",                    # CONNECT, remaining length 20
        "00 04 4d 51 54 54",        # "MQTT"
        "05",                       # level 5
        "42",                       # flags: password (allowed alone in 5.0), clean start
        "00 00",                    # keep alive 0
        "00",                       # property length 0
        "00 02 67 77",              # client id "gw"
        "00 03 74 6f 6b",           # password b"tok"
    ), Connect("gw", 5, True, 0, password=b"tok")),
    Golden("connect-v5-will-qos2-retain-username", 5, h(
        "10 1d",                    # CONNECT, remaining length 29
        "00 04 4d 51 54 54",        # "MQTT"
        "05",                       # level 5
        "b4",                       # flags: user name, will retain, will QoS 2, will
        "02 58",                    # keep alive 600
        "00",                       # property length 0
        "00 01 78",                 # client id "x"
        "00",                       # will property length 0
        "00 03 61 2f 62",           # will topic "a/b"
        "00 00",                    # will payload b"" (empty)
        "00 05 61 6c 69 63 65",     # user name "alice"
    ), Connect("x", 5, False, 600, username="alice", will=Will("a/b", b"", qos=2, retain=True))),
)

CONNACK_CASES = (
    Golden("connack-v311-accepted", 4, h(
        "20 02",                    # CONNACK, remaining length 2
        "00",                       # flags: no session present
        "00",                       # return code 0 accepted
    ), ConnAck()),
    Golden("connack-v311-session-present", 4, h(
        "20 02", "01",              # session present
        "00",                       # accepted
    ), ConnAck(session_present=True)),
    Golden("connack-v311-bad-credentials", 4, h(
        "20 02", "00",
        "04",                       # return code 4: bad user name or password
    ), ConnAck(reason_code=4)),
    Golden("connack-v31-identifier-rejected", 3, h(
        "20 02", "00",
        "02",                       # return code 2: identifier rejected
    ), ConnAck(reason_code=2)),
    Golden("connack-v5-minimal", 5, h(
        "20 03",                    # CONNACK, remaining length 3
        "00",                       # flags
        "00",                       # reason code success
        "00",                       # property length 0
    ), ConnAck()),
    Golden("connack-v5-not-authorized", 5, h(
        "20 03", "00",
        "87",                       # reason code 0x87 not authorized
        "00",                       # property length 0
    ), ConnAck(reason_code=0x87)),
    Golden("connack-v5-all-properties", 5, h(
        "20 60",                    # CONNACK, remaining length 96
        "01",                       # session present
        "00",                       # success
        "5d",                       # property length 93
        "11 ff ff ff ff",           # session expiry interval 0xFFFFFFFF (never)
        "12 00 0a 61 73 73 69 67 6e 65 64 2d 37",  # assigned client id "assigned-7"
        "13 00 78",                 # server keep alive 120
        "15 00 05 53 43 52 41 4d",  # authentication method "SCRAM"
        "16 00 03 74 6f 6b",        # authentication data b"tok"
        "1a 00 09 72 65 73 70 2f 69 6e 66 6f",     # response information "resp/info"
        "1c 00 0a 6f 74 68 65 72 3a 31 38 38 33",  # server reference "other:1883"
        "1f 00 02 6f 6b",           # reason string "ok"
        "21 00 64",                 # receive maximum 100
        "22 00 10",                 # topic alias maximum 16
        "24 01",                    # maximum QoS 1
        "25 00",                    # retain available 0
        "26 00 01 6b 00 01 76",     # user property ("k", "v")
        "27 00 01 00 00",           # maximum packet size 65536
        "28 01",                    # wildcard subscription available 1
        "29 00",                    # subscription identifiers available 0
        "2a 01",                    # shared subscription available 1
    ), ConnAck(True, 0, Properties(
        session_expiry_interval=0xFFFFFFFF, assigned_client_identifier="assigned-7",
        server_keep_alive=120, authentication_method="SCRAM", authentication_data=b"tok",
        response_information="resp/info", server_reference="other:1883", reason_string="ok",
        receive_maximum=100, topic_alias_maximum=16, maximum_qos=1, retain_available=0,
        user_properties=KV, maximum_packet_size=65536, wildcard_subscription_available=1,
        subscription_identifier_available=0, shared_subscription_available=1))),
    Golden("connack-v5-use-another-server", 5, h(
        "20 10",                    # CONNACK, remaining length 16
        "00",                       # flags
        "9c",                       # reason code 0x9C use another server
        "0d",                       # property length 13
        "1c 00 0a 6f 74 68 65 72 3a 31 38 38 33",  # server reference "other:1883"
    ), ConnAck(False, 0x9C, Properties(server_reference="other:1883"))),
)

PUBLISH_CASES = (
    Golden("publish-v311-qos0", 4, h(
        "30 0a",                    # PUBLISH QoS 0, remaining length 10
        "00 03 61 2f 62",           # topic "a/b"
        "68 65 6c 6c 6f",           # payload "hello"
    ), Publish("a/b", b"hello")),
    Golden("publish-v311-qos0-retain-empty-payload", 4, h(
        "31 05",                    # PUBLISH QoS 0 retain, remaining length 5
        "00 03 61 2f 62",           # topic "a/b", no payload
    ), Publish("a/b", b"", retain=True)),
    Golden("publish-v311-qos1", 4, h(
        "32 0c",                    # PUBLISH QoS 1, remaining length 12
        "00 03 61 2f 62",           # topic "a/b"
        "00 0a",                    # packet id 10
        "68 65 6c 6c 6f",           # payload "hello"
    ), Publish("a/b", b"hello", qos=1, packet_id=10)),
    Golden("publish-v311-qos2-dup-retain", 4, h(
        "3d 09",                    # PUBLISH DUP QoS 2 retain, remaining length 9
        "00 03 61 2f 62",           # topic "a/b"
        "12 34",                    # packet id 0x1234
        "68 69",                    # payload "hi"
    ), Publish("a/b", b"hi", qos=2, retain=True, dup=True, packet_id=0x1234)),
    Golden("publish-v31-qos1", 3, h(
        "32 0a",                    # PUBLISH QoS 1, remaining length 10
        "00 04 74 65 6d 70",        # topic "temp"
        "00 01",                    # packet id 1
        "31 32",                    # payload "12"
    ), Publish("temp", b"12", qos=1, packet_id=1)),
    Golden("publish-v311-two-byte-remaining-length", 4, h(
        "30 cd 01",                 # PUBLISH QoS 0, remaining length 205 (0x4D|0x80, 0x01)
        "00 03 61 2f 62",           # topic "a/b"
        "61" * 200,                 # payload: 200 x "a"
    ), Publish("a/b", b"a" * 200)),
    Golden("publish-v311-utf8-topic", 4, h(
        "30 12",                    # PUBLISH QoS 0, remaining length 18
        "00 0f 74 65 6d 70 c3 a9 72 61 74 75 72 65 2f c3 bc",  # topic "température/ü"
        "78",                       # payload "x"
    ), Publish("température/ü", b"x")),
    Golden("publish-v311-sys-topic", 4, h(
        "30 16",                    # PUBLISH QoS 0, remaining length 22
        "00 12 24 53 59 53 2f 62 72 6f 6b 65 72 2f 75 70 74 69 6d 65",  # "$SYS/broker/uptime"
        "31 32",                    # payload "12"
    ), Publish("$SYS/broker/uptime", b"12")),
    Golden("publish-v5-qos0-no-properties", 5, h(
        "30 0b",                    # PUBLISH QoS 0, remaining length 11
        "00 03 61 2f 62",           # topic "a/b"
        "00",                       # property length 0
        "68 65 6c 6c 6f",           # payload "hello"
    ), Publish("a/b", b"hello")),
    Golden("publish-v5-qos1-properties", 5, h(
        "32 43",                    # PUBLISH QoS 1, remaining length 67
        "00 03 61 2f 62",           # topic "a/b"
        "00 07",                    # packet id 7
        "36",                       # property length 54
        "01 01",                    # payload format indicator 1
        "02 00 00 0e 10",           # message expiry interval 3600
        "03 00 0a 74 65 78 74 2f 70 6c 61 69 6e",  # content type "text/plain"
        "08 00 08 61 70 70 2f 72 65 73 70",        # response topic "app/resp"
        "09 00 06 63 6f 72 72 2d 31",              # correlation data b"corr-1"
        "26 00 01 78 00 01 79",     # user property ("x", "y") - stored order kept
        "26 00 01 6b 00 01 76",     # user property ("k", "v")
        "68 65 6c 6c 6f",           # payload "hello"
    ), Publish("a/b", b"hello", qos=1, packet_id=7, properties=Properties(
        payload_format_indicator=1, message_expiry_interval=3600, content_type="text/plain",
        response_topic="app/resp", correlation_data=b"corr-1",
        user_properties=(("x", "y"), ("k", "v"))))),
    Golden("publish-v5-topic-alias-empty-topic", 5, h(
        "30 08",                    # PUBLISH QoS 0, remaining length 8
        "00 00",                    # topic "" (resolved through the alias)
        "03",                       # property length 3
        "23 00 05",                 # topic alias 5
        "68 69",                    # payload "hi"
    ), Publish("", b"hi", properties=Properties(topic_alias=5))),
    Golden("publish-v5-topic-alias-with-topic", 5, h(
        "30 0e",                    # PUBLISH QoS 0, remaining length 14
        "00 03 61 2f 62",           # topic "a/b"
        "03",                       # property length 3
        "23 00 01",                 # topic alias 1 (sets the mapping)
        "68 65 6c 6c 6f",           # payload "hello"
    ), Publish("a/b", b"hello", properties=Properties(topic_alias=1))),
    Golden("publish-v5-subscription-identifiers", 5, h(
        "32 12",                    # PUBLISH QoS 1, remaining length 18
        "00 03 61 2f 62",           # topic "a/b"
        "00 02",                    # packet id 2
        "0a",                       # property length 10
        "0b 01",                    # subscription identifier 1
        "0b ac 02",                 # subscription identifier 300 (varint 0xAC 0x02)
        "0b ff ff ff 7f",           # subscription identifier 268435455 (largest)
    ), Publish("a/b", b"", qos=1, packet_id=2, properties=Properties(
        subscription_identifiers=(1, 300, 268435455)))),
    Golden("publish-v5-qos2-dup-retain", 5, h(
        "3d 09",                    # PUBLISH DUP QoS 2 retain, remaining length 9
        "00 03 61 2f 62",           # topic "a/b"
        "ff ff",                    # packet id 65535
        "00",                       # property length 0
        "78",                       # payload "x"
    ), Publish("a/b", b"x", qos=2, retain=True, dup=True, packet_id=0xFFFF)),
)

ACK_CASES = (
    Golden("puback-v311", 4, h("40 02", "00 01"), PubAck(1)),      # PUBACK, packet id 1
    Golden("pubrec-v311", 4, h("50 02", "ab cd"), PubRec(0xABCD)),  # PUBREC, packet id 0xABCD
    Golden("pubrel-v311", 4, h("62 02", "00 07"), PubRel(7)),      # PUBREL (flags 0b0010)
    Golden("pubcomp-v311", 4, h("70 02", "ff ff"), PubComp(0xFFFF)),
    Golden("puback-v31", 3, h("40 02", "12 34"), PubAck(0x1234)),
    Golden("pubrec-v31", 3, h("50 02", "00 08"), PubRec(8)),
    Golden("pubrel-v31", 3, h("62 02", "00 09"), PubRel(9)),
    Golden("pubcomp-v31", 3, h("70 02", "00 08"), PubComp(8)),
    Golden("puback-v5-short-form", 5, h(
        "40 02",                    # PUBACK, remaining length 2: success, no properties
        "00 01",                    # packet id 1
    ), PubAck(1)),
    Golden("puback-v5-reason-only", 5, h(
        "40 03",                    # remaining length 3: reason code, no properties
        "00 01",                    # packet id 1
        "10",                       # 0x10 no matching subscribers
    ), PubAck(1, 0x10)),
    Golden("puback-v5-properties", 5, h(
        "40 13",                    # PUBACK, remaining length 19
        "00 05",                    # packet id 5
        "80",                       # 0x80 unspecified error
        "0f",                       # property length 15
        "1f 00 05 72 65 74 72 79",  # reason string "retry"
        "26 00 01 6b 00 01 76",     # user property ("k", "v")
    ), PubAck(5, 0x80, Properties(reason_string="retry", user_properties=KV))),
    Golden("pubrec-v5-quota-exceeded", 5, h(
        "50 03", "00 02",
        "97",                       # 0x97 quota exceeded
    ), PubRec(2, 0x97)),
    Golden("pubrec-v5-success-with-properties", 5, h(
        "50 0b",                    # PUBREC, remaining length 11
        "00 03",                    # packet id 3
        "00",                       # success (must be written: properties follow)
        "07",                       # property length 7
        "26 00 01 6b 00 01 76",     # user property ("k", "v")
    ), PubRec(3, 0, Properties(user_properties=KV))),
    Golden("pubrel-v5-not-found", 5, h(
        "62 03", "00 03",
        "92",                       # 0x92 packet identifier not found
    ), PubRel(3, 0x92)),
    Golden("pubrel-v5-short-form", 5, h("62 02", "00 03"), PubRel(3)),
    Golden("pubcomp-v5-short-form", 5, h("70 02", "00 04"), PubComp(4)),
    Golden("pubcomp-v5-reason-string", 5, h(
        "70 0b",                    # PUBCOMP, remaining length 11
        "00 04",                    # packet id 4
        "92",                       # 0x92 packet identifier not found
        "07",                       # property length 7
        "1f 00 04 67 6f 6e 65",     # reason string "gone"
    ), PubComp(4, 0x92, Properties(reason_string="gone"))),
)

SUBSCRIBE_CASES = (
    Golden("subscribe-v311-single", 4, h(
        "82 08",                    # SUBSCRIBE (flags 0b0010), remaining length 8
        "00 01",                    # packet id 1
        "00 03 61 2f 62",           # filter "a/b"
        "01",                       # QoS 1
    ), Subscribe(1, [Subscription("a/b", qos=1)])),
    Golden("subscribe-v311-multi", 4, h(
        "82 20",                    # SUBSCRIBE, remaining length 32
        "01 02",                    # packet id 0x0102
        "00 0e 73 65 6e 73 6f 72 73 2f 2b 2f 74 65 6d 70",  # "sensors/+/temp"
        "00",                       # QoS 0
        "00 06 68 6f 6d 65 2f 23",  # "home/#"
        "01",                       # QoS 1
        "00 01 23",                 # "#"
        "02",                       # QoS 2
    ), Subscribe(0x0102, [Subscription("sensors/+/temp", 0), Subscription("home/#", 1),
                          Subscription("#", 2)])),
    Golden("subscribe-v31", 3, h(
        "82 13",                    # SUBSCRIBE, remaining length 19
        "00 03",                    # packet id 3
        "00 0e 73 70 6f 72 74 2f 74 65 6e 6e 69 73 2f 2b",  # "sport/tennis/+"
        "02",                       # QoS 2
    ), Subscribe(3, [Subscription("sport/tennis/+", qos=2)])),
    Golden("subscribe-v5-properties", 5, h(
        "82 12",                    # SUBSCRIBE, remaining length 18
        "00 0a",                    # packet id 10
        "09",                       # property length 9
        "0b 2a",                    # subscription identifier 42
        "26 00 01 6b 00 01 76",     # user property ("k", "v")
        "00 03 61 2f 62",           # filter "a/b"
        "2d",                       # options: retain handling 2, RAP, No Local, QoS 1
    ), Subscribe(10, [Subscription("a/b", 1, True, True, 2)],
                 Properties(subscription_identifiers=(42,), user_properties=KV))),
    Golden("subscribe-v5-shared", 5, h(
        "82 19",                    # SUBSCRIBE, remaining length 25
        "00 0b",                    # packet id 11
        "00",                       # property length 0
        "00 13 24 73 68 61 72 65 2f 67 31 2f 73 65 6e 73 6f 72 73 2f 23",  # "$share/g1/sensors/#"
        "11",                       # options: retain handling 1, QoS 1
    ), Subscribe(11, [Subscription("$share/g1/sensors/#", qos=1, retain_handling=1)])),
    Golden("subscribe-v5-multi", 5, h(
        "82 23",                    # SUBSCRIBE, remaining length 35
        "00 0c",                    # packet id 12
        "00",                       # property length 0
        "00 03 61 2f 62",           # "a/b"
        "00",                       # QoS 0
        "00 06 24 53 59 53 2f 23",  # "$SYS/#"
        "06",                       # No Local, QoS 2
        "00 0e 73 70 6f 72 74 2f 74 65 6e 6e 69 73 2f 2b",  # "sport/tennis/+"
        "19",                       # retain handling 1, RAP, QoS 1
    ), Subscribe(12, [Subscription("a/b"), Subscription("$SYS/#", 2, no_local=True),
                      Subscription("sport/tennis/+", 1, retain_as_published=True,
                                   retain_handling=1)])),
)

# Every v5 subscription option combination: (options byte, QoS, No Local, RAP, retain handling).
# Bits: 0-1 QoS, 2 No Local, 3 Retain As Published, 4-5 Retain Handling, 6-7 reserved.
SUBSCRIPTION_OPTIONS = (
    ("00", 0, False, False, 0), ("01", 1, False, False, 0), ("02", 2, False, False, 0),
    ("04", 0, True, False, 0), ("05", 1, True, False, 0), ("06", 2, True, False, 0),
    ("08", 0, False, True, 0), ("09", 1, False, True, 0), ("0a", 2, False, True, 0),
    ("0c", 0, True, True, 0), ("0d", 1, True, True, 0), ("0e", 2, True, True, 0),
    ("10", 0, False, False, 1), ("11", 1, False, False, 1), ("12", 2, False, False, 1),
    ("14", 0, True, False, 1), ("15", 1, True, False, 1), ("16", 2, True, False, 1),
    ("18", 0, False, True, 1), ("19", 1, False, True, 1), ("1a", 2, False, True, 1),
    ("1c", 0, True, True, 1), ("1d", 1, True, True, 1), ("1e", 2, True, True, 1),
    ("20", 0, False, False, 2), ("21", 1, False, False, 2), ("22", 2, False, False, 2),
    ("24", 0, True, False, 2), ("25", 1, True, False, 2), ("26", 2, True, False, 2),
    ("28", 0, False, True, 2), ("29", 1, False, True, 2), ("2a", 2, False, True, 2),
    ("2c", 0, True, True, 2), ("2d", 1, True, True, 2), ("2e", 2, True, True, 2),
)

SUBSCRIBE_OPTION_CASES = tuple(
    Golden(f"subscribe-v5-options-{opt}", 5, h(
        "82 07",                    # SUBSCRIBE, remaining length 7
        "00 01",                    # packet id 1
        "00",                       # property length 0
        "00 01 61",                 # filter "a"
        opt,                        # subscription options
    ), Subscribe(1, [Subscription("a", qos, no_local, rap, rh)]))
    for opt, qos, no_local, rap, rh in SUBSCRIPTION_OPTIONS
)

SUBACK_CASES = (
    Golden("suback-v311", 4, h("90 03", "00 01", "01"), SubAck(1, [1])),  # granted QoS 1
    Golden("suback-v311-multi", 4, h(
        "90 06",                    # SUBACK, remaining length 6
        "01 02",                    # packet id 0x0102
        "00 01 02 80",              # granted 0, 1, 2, failure 0x80
    ), SubAck(0x0102, [0, 1, 2, 0x80])),
    Golden("suback-v31", 3, h("90 03", "00 03", "02"), SubAck(3, [2])),
    Golden("suback-v5", 5, h(
        "90 04",                    # SUBACK, remaining length 4
        "00 0a",                    # packet id 10
        "00",                       # property length 0
        "01",                       # granted QoS 1
    ), SubAck(10, [1])),
    Golden("suback-v5-properties", 5, h(
        "90 13",                    # SUBACK, remaining length 19
        "00 0c",                    # packet id 12
        "0b",                       # property length 11
        "1f 00 08 72 65 6a 65 63 74 65 64",  # reason string "rejected"
        "00 8f a2 9e 02",  # QoS 0, filter invalid, no wildcards, no shared, QoS 2
    ), SubAck(12, [0x00, 0x8F, 0xA2, 0x9E, 0x02], Properties(reason_string="rejected"))),
)

UNSUBSCRIBE_CASES = (
    Golden("unsubscribe-v311", 4, h(
        "a2 07",                    # UNSUBSCRIBE (flags 0b0010), remaining length 7
        "00 02",                    # packet id 2
        "00 03 61 2f 62",           # "a/b"
    ), Unsubscribe(2, ["a/b"])),
    Golden("unsubscribe-v311-multi", 4, h(
        "a2 24",                    # UNSUBSCRIBE, remaining length 36
        "00 03",                    # packet id 3
        "00 03 61 2f 62",           # "a/b"
        "00 06 68 6f 6d 65 2f 23",  # "home/#"
        "00 13 24 73 68 61 72 65 2f 67 31 2f 73 65 6e 73 6f 72 73 2f 23",  # "$share/g1/sensors/#"
    ), Unsubscribe(3, ["a/b", "home/#", "$share/g1/sensors/#"])),
    Golden("unsubscribe-v31", 3, h("a2 05", "00 04", "00 01 23"), Unsubscribe(4, ["#"])),
    Golden("unsubscribe-v5-multi", 5, h(
        "a2 1f",                    # UNSUBSCRIBE, remaining length 31
        "00 05",                    # packet id 5
        "07",                       # property length 7
        "26 00 01 6b 00 01 76",     # user property ("k", "v")
        "00 03 61 2f 62",           # "a/b"
        "00 0e 73 65 6e 73 6f 72 73 2f 2b 2f 74 65 6d 70",  # "sensors/+/temp"
    ), Unsubscribe(5, ["a/b", "sensors/+/temp"], Properties(user_properties=KV))),
    Golden("unsubscribe-v5-single", 5, h(
        "a2 06", "00 06",
        "00",                       # property length 0
        "00 01 61",                 # "a"
    ), Unsubscribe(6, ["a"])),
)

UNSUBACK_CASES = (
    Golden("unsuback-v311", 4, h("b0 02", "00 05"), UnsubAck(5)),  # no reason codes in 3.1.1
    Golden("unsuback-v31", 3, h("b0 02", "00 06"), UnsubAck(6)),
    Golden("unsuback-v5", 5, h(
        "b0 05",                    # UNSUBACK, remaining length 5
        "00 05",                    # packet id 5
        "00",                       # property length 0
        "00 11",                    # success, no subscription existed
    ), UnsubAck(5, [0x00, 0x11])),
    Golden("unsuback-v5-properties", 5, h(
        "b0 0b",                    # UNSUBACK, remaining length 11
        "00 07",                    # packet id 7
        "07",                       # property length 7
        "1f 00 04 6e 6f 74 65",     # reason string "note"
        "87",                       # not authorized
    ), UnsubAck(7, [0x87], Properties(reason_string="note"))),
)

CONTROL_CASES = (
    Golden("pingreq-v31", 3, h("c0 00"), PingReq()),
    Golden("pingreq-v311", 4, h("c0 00"), PingReq()),
    Golden("pingreq-v5", 5, h("c0 00"), PingReq()),
    Golden("pingresp-v31", 3, h("d0 00"), PingResp()),
    Golden("pingresp-v311", 4, h("d0 00"), PingResp()),
    Golden("pingresp-v5", 5, h("d0 00"), PingResp()),
    Golden("disconnect-v31", 3, h("e0 00"), Disconnect()),
    Golden("disconnect-v311", 4, h("e0 00"), Disconnect()),
    Golden("disconnect-v5-short-form", 5, h("e0 00"), Disconnect()),  # normal, no properties
    Golden("disconnect-v5-with-will", 5, h(
        "e0 01",                    # DISCONNECT, remaining length 1
        "04",                       # 0x04 disconnect with will message
    ), Disconnect(0x04)),
    Golden("disconnect-v5-properties", 5, h(
        "e0 23",                    # DISCONNECT, remaining length 35
        "9c",                       # 0x9C use another server
        "21",                       # property length 33
        "11 00 00 00 00",           # session expiry interval 0
        "1c 00 0a 6f 74 68 65 72 3a 31 38 38 33",  # server reference "other:1883"
        "1f 00 05 6d 6f 76 65 64",  # reason string "moved"
        "26 00 01 6b 00 01 76",     # user property ("k", "v")
    ), Disconnect(0x9C, Properties(session_expiry_interval=0, server_reference="other:1883",
                                   reason_string="moved", user_properties=KV))),
    Golden("disconnect-v5-normal-with-reason-string", 5, h(
        "e0 08",                    # DISCONNECT, remaining length 8
        "00",                       # normal disconnection
        "06",                       # property length 6
        "1f 00 03 62 79 65",        # reason string "bye"
    ), Disconnect(0, Properties(reason_string="bye"))),
    Golden("auth-v5-short-form", 5, h("f0 00"), Auth()),  # success, no properties
    Golden("auth-v5-reauthenticate", 5, h("f0 01", "19"), Auth(0x19)),  # re-authenticate
    Golden("auth-v5-continue", 5, h(
        "f0 20",                    # AUTH, remaining length 32
        "18",                       # 0x18 continue authentication
        "1e",                       # property length 30
        "15 00 05 53 43 52 41 4d",  # authentication method "SCRAM"
        "16 00 04 63 68 61 6c",     # authentication data b"chal"
        "1f 00 05 72 65 74 72 79",  # reason string "retry"
        "26 00 01 6b 00 01 76",     # user property ("k", "v")
    ), Auth(0x18, Properties(authentication_method="SCRAM", authentication_data=b"chal",
                             reason_string="retry", user_properties=KV))),
)

GOLDEN: tuple[Golden, ...] = (
    CONNECT_CASES + CONNACK_CASES + PUBLISH_CASES + ACK_CASES + SUBSCRIBE_CASES
    + SUBSCRIBE_OPTION_CASES + SUBACK_CASES + UNSUBSCRIBE_CASES + UNSUBACK_CASES
    + CONTROL_CASES
)

NON_CANONICAL: tuple[NonCanonical, ...] = (
    NonCanonical("puback-v5-long-form-success", 5,
                 h("40 04", "00 01", "00", "00"),  # reason 0 and property length 0 written out
                 PubAck(1), h("40 02 00 01")),
    NonCanonical("puback-v5-long-form-reason", 5,
                 h("40 04", "00 01", "10", "00"),  # reason 0x10 and empty property block
                 PubAck(1, 0x10), h("40 03 00 01 10")),
    NonCanonical("pubrel-v5-reason-zero-only", 5,
                 h("62 03", "00 03", "00"),        # reason 0 written, no properties
                 PubRel(3), h("62 02 00 03")),
    NonCanonical("disconnect-v5-long-form", 5,
                 h("e0 02", "00", "00"),           # reason 0 and property length 0
                 Disconnect(), h("e0 00")),
    NonCanonical("disconnect-v5-reason-zero-only", 5,
                 h("e0 01", "00"),                 # reason 0 written, no properties
                 Disconnect(), h("e0 00")),
    NonCanonical("auth-v5-long-form", 5,
                 h("f0 02", "00", "00"),           # reason 0 and property length 0
                 Auth(), h("f0 00")),
)
