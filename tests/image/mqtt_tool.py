"""A tiny MQTT client for the image tests (paho-mqtt), as functions and as a command.

The command form runs inside a container's network namespace (`nsenter -n`), where the
gateway listens on the container's own loopback:

    python -m tests.image.mqtt_tool HOST PORT publish-retained TOPIC PAYLOAD
    python -m tests.image.mqtt_tool HOST PORT read-retained TOPIC      # prints the payload
    python -m tests.image.mqtt_tool HOST PORT roundtrip TOPIC PAYLOAD  # subscribe, publish

The functions also keep a persistent session's queue across reboots of the gateway
(`subscribe_persistent`, `publish`, `receive_queued`).
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
import uuid
from collections.abc import Callable

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion

CONNECT_TIMEOUT = 10.0


def _client(host: str, port: int, deadline: float, client_id: str | None = None,
            clean_session: bool = True,
            on_message: Callable[[mqtt.Client, object, mqtt.MQTTMessage], None] | None = None,
            manual_ack: bool = False) -> mqtt.Client:
    """A connected client with its network loop running; retries until `deadline`.
    `on_message` is set before connecting, so messages a persistent session had queued are
    seen from the first one."""
    last: Exception | None = None
    while time.monotonic() < deadline:
        client = mqtt.Client(
            CallbackAPIVersion.VERSION2,
            client_id=client_id or f"image-test-{uuid.uuid4().hex[:8]}",
            protocol=mqtt.MQTTv311, clean_session=clean_session, manual_ack=manual_ack,
        )
        connected = threading.Event()

        def on_connect(_c: mqtt.Client, _u: object, _f: object, rc: object, _p: object = None,
                       event: threading.Event = connected) -> None:
            if rc == 0:
                event.set()

        client.on_connect = on_connect
        if on_message is not None:
            client.on_message = on_message
        try:
            client.connect(host, port, keepalive=30)
        except OSError as exc:
            last = exc
            time.sleep(1.0)
            continue
        client.loop_start()
        if connected.wait(CONNECT_TIMEOUT):
            return client
        client.loop_stop()
        client.disconnect()
        last = TimeoutError(f"no CONNACK from {host}:{port}")
        time.sleep(1.0)
    raise ConnectionError(f"cannot connect to {host}:{port}: {last}")


def publish_retained(host: str, port: int, topic: str, payload: bytes,
                     timeout: float = 60.0) -> None:
    """Publish a retained QoS 1 message and wait for its PUBACK."""
    publish(host, port, topic, [payload], timeout, retain=True)


def read_retained(host: str, port: int, topic: str, timeout: float = 60.0) -> bytes | None:
    """The retained payload of `topic` (None when the broker has none)."""
    client = _client(host, port, time.monotonic() + timeout)
    got: list[bytes] = []
    done = threading.Event()

    def on_message(_c: mqtt.Client, _u: object, message: mqtt.MQTTMessage) -> None:
        if message.retain:
            got.append(bytes(message.payload))
            done.set()

    client.on_message = on_message
    try:
        client.subscribe(topic, qos=1)
        done.wait(5.0)
    finally:
        client.loop_stop()
        client.disconnect()
    return got[0] if got else None


def roundtrip(host: str, port: int, topic: str, payload: bytes, timeout: float = 60.0) -> bytes:
    """Subscribe with one client, publish with another, return what the subscriber got."""
    subscriber = _client(host, port, time.monotonic() + timeout)
    got: list[bytes] = []
    done = threading.Event()
    subscribed = threading.Event()

    def on_message(_c: mqtt.Client, _u: object, message: mqtt.MQTTMessage) -> None:
        got.append(bytes(message.payload))
        done.set()

    subscriber.on_message = on_message
    subscriber.on_subscribe = lambda *_args: subscribed.set()
    publisher: mqtt.Client | None = None
    try:
        subscriber.subscribe(topic, qos=1)
        if not subscribed.wait(10.0):
            raise TimeoutError("no SUBACK")
        publisher = _client(host, port, time.monotonic() + timeout)
        publisher.publish(topic, payload, qos=1).wait_for_publish(10.0)
        if not done.wait(10.0):
            raise TimeoutError(f"the subscriber got nothing on {topic}")
    finally:
        for client in (subscriber, publisher):
            if client is not None:
                client.loop_stop()
                client.disconnect()
    return got[0]


def subscribe_persistent(host: str, port: int, client_id: str, topic: str,
                         timeout: float = 60.0) -> None:
    """Make a persistent session (clean session off) subscribed to `topic` at QoS 1, then go
    offline: the broker queues what is published to `topic` for it."""
    subscribed = threading.Event()
    client = _client(host, port, time.monotonic() + timeout, client_id, clean_session=False)
    client.on_subscribe = lambda *_args: subscribed.set()
    try:
        client.subscribe(topic, qos=1)
        if not subscribed.wait(10.0):
            raise TimeoutError("no SUBACK")
    finally:
        client.loop_stop()
        client.disconnect()


def publish(host: str, port: int, topic: str, payloads: list[bytes],
            timeout: float = 60.0, retain: bool = False) -> None:
    """Publish each payload at QoS 1 and wait for its PUBACK."""
    client = _client(host, port, time.monotonic() + timeout)
    try:
        for payload in payloads:
            info = client.publish(topic, payload, qos=1, retain=retain)
            info.wait_for_publish(timeout)
            if not info.is_published():
                raise TimeoutError(f"no PUBACK for {topic}")
    finally:
        client.loop_stop()
        client.disconnect()


def receive_queued(host: str, port: int, client_id: str, count: int,
                   timeout: float = 60.0) -> list[bytes]:
    """Resume the persistent session `client_id` and return the first `count` messages the
    broker delivers (what it had queued), in order; fewer if they do not come in `timeout`.
    Only those are acknowledged, before the DISCONNECT, so none is delivered again later."""
    got: list[mqtt.MQTTMessage] = []
    done = threading.Event()

    def on_message(_c: mqtt.Client, _u: object, message: mqtt.MQTTMessage) -> None:
        got.append(message)
        if len(got) >= count:
            done.set()

    client = _client(host, port, time.monotonic() + timeout, client_id, clean_session=False,
                     on_message=on_message, manual_ack=True)
    try:
        done.wait(timeout)
        taken = got[:count]
        for message in taken:
            client.ack(message.mid, message.qos)
    finally:
        client.disconnect()  # queued after the acknowledgements
        client.loop_stop()
    return [bytes(message.payload) for message in taken]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="mqtt_tool")
    parser.add_argument("host")
    parser.add_argument("port", type=int)
    parser.add_argument("action", choices=("publish-retained", "read-retained", "roundtrip"))
    parser.add_argument("topic")
    parser.add_argument("payload", nargs="?", default="")
    args = parser.parse_args(argv)
    if args.action == "publish-retained":
        publish_retained(args.host, args.port, args.topic, args.payload.encode())
    elif args.action == "read-retained":
        value = read_retained(args.host, args.port, args.topic)
        if value is None:
            return 3
        sys.stdout.write(value.decode())
    else:
        got = roundtrip(args.host, args.port, args.topic, args.payload.encode())
        sys.stdout.write(got.decode())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
