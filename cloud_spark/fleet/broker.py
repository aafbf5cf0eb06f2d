"""A small MQTT session with the cloud broker for the fleet commands (paho, in a thread).

How this works: `CloudSession` connects (TLS and a client certificate, or a user name, as the
broker wants), keeps the latest message of every topic it subscribed to (the retained
statuses of the gateways arrive at once), and apart the latest one published while it was
subscribed (an answer to what it sent, not a report left from before), and lets the caller
wait for a condition on them.
"""

from __future__ import annotations

import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion


@dataclass(frozen=True)
class BrokerOptions:
    """Where the cloud broker is and how to log in."""

    host: str
    port: int
    client_id: str
    tls_ca: Path | None = None
    tls_cert: Path | None = None
    tls_key: Path | None = None
    username: str | None = None
    password: str | None = None


class CloudSession:
    """Connected to the cloud broker; the latest payload per topic in `latest`."""

    def __init__(self, options: BrokerOptions,
                 on_message: Callable[[str, bytes], None] | None = None) -> None:
        self.options = options
        self.latest: dict[str, bytes] = {}
        self.fresh: dict[str, bytes] = {}  # published since we subscribed (not the retained)
        self.changed = threading.Condition()
        self.on_message = on_message
        self.client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=options.client_id,
                                  protocol=mqtt.MQTTv311, clean_session=True)
        if options.tls_ca is not None:
            self.client.tls_set(ca_certs=str(options.tls_ca),
                                certfile=str(options.tls_cert) if options.tls_cert else None,
                                keyfile=str(options.tls_key) if options.tls_key else None,
                                cert_reqs=ssl.CERT_REQUIRED)
        if options.username is not None:
            self.client.username_pw_set(options.username, options.password)
        self.client.on_message = self._message
        self.connected = threading.Event()
        self.client.on_connect = lambda *_: self.connected.set()

    def __enter__(self) -> CloudSession:
        self.client.connect(self.options.host, self.options.port, keepalive=30)
        self.client.loop_start()
        if not self.connected.wait(30):
            self.client.loop_stop()
            raise ConnectionError(f"no CONNACK from {self.options.host}:{self.options.port}")
        return self

    def __exit__(self, *exc: object) -> None:
        self.client.disconnect()
        self.client.loop_stop()

    def subscribe(self, *filters: str) -> None:
        for topic in filters:
            self.client.subscribe(topic, qos=1)

    def forget(self, topics: list[str]) -> None:
        """Drop the fresh messages of `topics` (before asking again)."""
        with self.changed:
            for topic in topics:
                self.fresh.pop(topic, None)

    def publish(self, topic: str, payload: bytes, retain: bool = False) -> None:
        """QoS 1, returns once the broker acknowledged it."""
        self.client.publish(topic, payload, qos=1, retain=retain).wait_for_publish(30)

    def _message(self, client: Any, userdata: Any, message: Any) -> None:
        with self.changed:
            self.latest[message.topic] = bytes(message.payload)
            if not message.retain:
                self.fresh[message.topic] = bytes(message.payload)
            self.changed.notify_all()
        if self.on_message is not None:
            self.on_message(message.topic, bytes(message.payload))

    def wait(self, done: Callable[[dict[str, bytes]], bool], timeout: float,
             fresh: bool = False) -> bool:
        """Wait until `done(latest)` (`fresh`: `done(fresh)`) holds; False at the timeout."""
        end = time.monotonic() + timeout
        with self.changed:
            while not done(self.fresh if fresh else self.latest):
                left = end - time.monotonic()
                if left <= 0:
                    return False
                self.changed.wait(min(left, 0.5))
        return True
