"""The baseline: a plain paho-mqtt subscriber that acknowledges every message at once.

    python -m bench.fleet.plain_sub --port P --client-id ID --count N [--subscribe-only]

MQTT 5, a persistent session (``clean_start=False``, a day's Session Expiry) subscribed
``outpost/#`` at QoS 1, paho's own network loop and automatic PUBACK; it does nothing with a
message but count it. Prints ``connected`` after CONNACK and ``done <n>`` once it has
received ``--count`` messages, then exits. ``--subscribe-only`` creates the session and
leaves (so the broker queues a backlog for it).
"""

from __future__ import annotations

import argparse
import sys

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--client-id", required=True)
    parser.add_argument("--count", type=int, default=0)
    parser.add_argument("--topic", default="outpost/#")
    parser.add_argument("--subscribe-only", action="store_true")
    args = parser.parse_args(argv)
    received = 0
    client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=args.client_id,
                         protocol=mqtt.MQTTv5)  # fmt: skip

    def on_connect(c: mqtt.Client, userdata: object, flags: object, rc: object, p: object) -> None:
        print("connected", flush=True)
        if args.subscribe_only:
            c.subscribe(args.topic, qos=1)

    def on_subscribe(c: mqtt.Client, *rest: object) -> None:
        if args.subscribe_only:
            c.disconnect()

    def on_message(c: mqtt.Client, userdata: object, message: mqtt.MQTTMessage) -> None:
        nonlocal received
        received += 1
        if received >= args.count:
            print(f"done {received}", flush=True)
            c.disconnect()

    client.on_connect = on_connect
    client.on_subscribe = on_subscribe
    client.on_message = on_message
    props = Properties(PacketTypes.CONNECT)  # type: ignore[no-untyped-call]
    props.SessionExpiryInterval = 86400
    props.ReceiveMaximum = 1000
    client.connect(args.host, args.port, clean_start=False, properties=props)
    client.loop_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
