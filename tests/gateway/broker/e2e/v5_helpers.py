"""MQTT 5.0 test clients for the end-to-end tests: a raw-socket client and a paho wrapper.

How this works: `RawV5` speaks MQTT 5.0 over a plain socket with `gateway.broker.codec`, so a test
sees every packet the broker sends, byte for byte, including what client libraries hide
(topic aliases, receive maximum, DUP flags, DISCONNECT reason codes). `sync()` is the
ordering barrier used instead of sleeps: the broker handles one connection's packets in
order and writes its output in order, so once the PINGRESP for a PINGREQ arrives, every
packet the broker wrote to that client before it has arrived too. To assert that nothing
was delivered, a test makes the publisher wait for its acknowledgement (the message has
been routed by then) and then calls `sync()` on the subscriber.

`PahoV5` wraps a paho-mqtt 2.x client with `protocol=MQTTv5`: callbacks feed thread-safe
queues, and every wait has a deadline. `run_tool` runs mosquitto_pub / mosquitto_sub.
"""

from __future__ import annotations

import contextlib
import queue
import subprocess
import threading
import time
from collections.abc import Iterable
from typing import Any, TypeVar

import paho.mqtt.client as paho
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties as PahoProperties
from paho.mqtt.subscribeoptions import SubscribeOptions

from gateway.broker.codec import (
    MQTT_5,
    NEED_DATA,
    NO_PROPERTIES,
    ConnAck,
    Connect,
    Disconnect,
    Packet,
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
    decode,
)
from tests.gateway.broker.e2e.helpers import RawConnection
from tests.support.broker_proc import BrokerProcess

__all__ = [
    "PacketTypes",
    "PahoProperties",
    "PahoV5",
    "RawV5",
    "SubscribeOptions",
    "run_tool",
]

TIMEOUT = 5.0
P = TypeVar("P")


class RawV5(RawConnection):
    """One MQTT 5.0 connection over a raw socket (reading and framing: `RawConnection`)."""

    def __init__(self, broker: BrokerProcess, timeout: float = TIMEOUT) -> None:
        super().__init__(broker.host, broker.port, MQTT_5, timeout)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            super().close()

    def send_raw(self, data: bytes) -> None:
        """Send exact bytes (`send` encodes a packet)."""
        self.send(data)

    def packet_id(self) -> int:
        return self.next_id()

    def expect(self, kind: type[P], timeout: float | None = None) -> P:
        """The next packet, which must be a `kind`."""
        packet = self.recv(timeout)
        assert isinstance(packet, kind), f"expected {kind.__name__}, got {packet!r}"
        return packet

    def reply(self, kind: type[P], packet_id: int, timeout: float | None = None) -> P:
        """The broker's `kind` answer for `packet_id`; other packets that arrive first (a
        PUBLISH to this client) are kept for the next `recv` / `sync`."""
        skipped: list[bytes] = []
        try:
            while True:
                frame = self.recv_frame(timeout)
                packet = self.decode(frame)
                if isinstance(packet, kind) and getattr(packet, "packet_id", None) == packet_id:
                    return packet
                if isinstance(packet, PubRel | PubAck | PubRec | PubComp | SubAck | UnsubAck):
                    raise AssertionError(f"expected {kind.__name__} {packet_id}, got {packet!r}")
                skipped.append(frame)
        finally:
            self.stash[:0] = skipped

    def wait_closed(self, timeout: float | None = None) -> list[Packet]:
        """Read until the broker closes the connection; returns the packets before EOF."""
        data = self.expect_closed(timeout)
        packets: list[Packet] = []
        while (result := decode(data, self.version)) is not NEED_DATA:
            packet, used = result
            packets.append(packet)
            data = data[used:]
        return packets

    def expect_disconnect(self, reason: int, timeout: float | None = None) -> Disconnect:
        """The broker sends DISCONNECT with `reason` and closes the connection."""
        packets = self.wait_closed(timeout)
        assert packets, "connection closed without a DISCONNECT"
        last = packets[-1]
        assert isinstance(last, Disconnect), f"expected DISCONNECT, got {packets!r}"
        assert last.reason_code == reason, (
            f"DISCONNECT reason 0x{last.reason_code:02X}, expected 0x{reason:02X}"
        )
        return last

    # -- MQTT operations ---------------------------------------------------------------

    def connect(
        self,
        client_id: str,
        *,
        clean_start: bool = True,
        keep_alive: int = 60,
        will: Will | None = None,
        properties: Properties = NO_PROPERTIES,
        **props: Any,
    ) -> ConnAck:
        """CONNECT and return the CONNACK (extra keywords are CONNECT properties)."""
        if props:
            properties = Properties(**props)
        self.send(Connect(client_id, MQTT_5, clean_start, keep_alive, will=will,
                          properties=properties))
        return self.expect(ConnAck)

    def subscribe(
        self,
        *subscriptions: Subscription | str,
        qos: int = 0,
        subscription_id: int | None = None,
    ) -> SubAck:
        """SUBSCRIBE (a plain string subscribes with `qos`) and return the SUBACK."""
        subs = [s if isinstance(s, Subscription) else Subscription(s, qos) for s in subscriptions]
        props = NO_PROPERTIES
        if subscription_id is not None:
            props = Properties(subscription_identifiers=(subscription_id,))
        pid = self.packet_id()
        self.send(Subscribe(pid, subs, props))
        return self.reply(SubAck, pid)

    def unsubscribe(self, *filters: str) -> UnsubAck:
        pid = self.packet_id()
        self.send(Unsubscribe(pid, list(filters)))
        return self.reply(UnsubAck, pid)

    def publish(
        self,
        topic: str,
        payload: bytes = b"",
        qos: int = 0,
        retain: bool = False,
        properties: Properties = NO_PROPERTIES,
        **props: Any,
    ) -> Packet | None:
        """PUBLISH; for QoS 1 returns the PUBACK, for QoS 2 completes the flow and returns
        the PUBREC (QoS 0: None)."""
        if props:
            properties = Properties(**props)
        pid = self.packet_id() if qos else None
        self.send(Publish(topic, payload, qos, retain, False, pid, properties))
        if qos == 1:
            return self.reply(PubAck, pid or 0)
        if qos == 2:
            pubrec = self.reply(PubRec, pid or 0)
            if pubrec.reason_code < 0x80:
                self.send(PubRel(pid or 0))
                self.reply(PubComp, pid or 0)
            return pubrec
        return None

    def ack(self, publish: Publish) -> None:
        """Acknowledge a received QoS 1 / QoS 2 PUBLISH (the whole QoS 2 flow)."""
        assert publish.packet_id is not None
        if publish.qos == 1:
            self.send(PubAck(publish.packet_id))
        elif publish.qos == 2:
            self.send(PubRec(publish.packet_id))
            self.reply(PubRel, publish.packet_id)
            self.send(PubComp(publish.packet_id))

    def publishes(self, count: int, timeout: float | None = None) -> list[Publish]:
        """Exactly the next `count` packets, all PUBLISH."""
        return [self.expect(Publish, timeout) for _ in range(count)]

    def disconnect(self, reason: int = 0, properties: Properties = NO_PROPERTIES) -> None:
        """DISCONNECT and wait until the broker closes the socket."""
        self.send(Disconnect(reason, properties))
        assert self.wait_closed() == []
        self.close()


def connected(
    broker: BrokerProcess, client_id: str, **kwargs: Any
) -> RawV5:
    """A RawV5 that has connected successfully."""
    client = RawV5(broker)
    try:
        connack = client.connect(client_id, **kwargs)
        assert connack.reason_code == 0, f"CONNACK 0x{connack.reason_code:02X}"
    except BaseException:
        client.close()
        raise
    return client


class PahoV5:
    """A paho-mqtt 2.x MQTT 5.0 client with its network loop in a background thread."""

    def __init__(self, broker: BrokerProcess, client_id: str = "") -> None:
        self.broker = broker
        self.client = paho.Client(
            CallbackAPIVersion.VERSION2, client_id=client_id, protocol=paho.MQTTv5,
            reconnect_on_failure=False,
        )
        self.messages: queue.Queue[paho.MQTTMessage] = queue.Queue()
        self.connacks: queue.Queue[tuple[Any, Any, Any]] = queue.Queue()
        self.subacks: queue.Queue[tuple[int, list[Any]]] = queue.Queue()
        self.unsubacks: queue.Queue[tuple[int, list[Any]]] = queue.Queue()
        self.disconnects: queue.Queue[Any] = queue.Queue()
        self.client.on_connect = self._on_connect
        self.client.on_message = lambda _c, _u, msg: self.messages.put(msg)
        self.client.on_subscribe = lambda _c, _u, mid, codes, _p: self.subacks.put((mid, codes))
        self.client.on_unsubscribe = lambda _c, _u, mid, codes, _p: self.unsubacks.put(
            (mid, codes)
        )
        self.client.on_disconnect = lambda _c, _u, _f, reason, _p: self.disconnects.put(reason)
        self.started = False

    def _on_connect(self, _c: Any, _u: Any, flags: Any, reason: Any, props: Any) -> None:
        self.connacks.put((flags, reason, props))

    def connect(
        self, clean_start: bool = True, properties: PahoProperties | None = None,
        keepalive: int = 60,
    ) -> tuple[Any, Any, Any]:
        """Connect and return (flags, reason code, CONNACK properties)."""
        self.client.connect(
            self.broker.host, self.broker.port, keepalive, clean_start=clean_start,
            properties=properties,
        )
        self.client.loop_start()
        self.started = True
        return self.connacks.get(timeout=TIMEOUT)

    def subscribe(
        self, topic: str, qos: int = 0, *, no_local: bool = False,
        retain_as_published: bool = False, retain_handling: int = 0,
        subscription_id: int | None = None,
    ) -> list[Any]:
        """SUBSCRIBE one filter; returns the SUBACK reason codes."""
        props = None
        if subscription_id is not None:
            props = PahoProperties(PacketTypes.SUBSCRIBE)
            props.SubscriptionIdentifier = subscription_id
        options = SubscribeOptions(qos, no_local, retain_as_published, retain_handling)
        _, mid = self.client.subscribe(topic, options=options, properties=props)
        got, codes = self.subacks.get(timeout=TIMEOUT)
        assert got == mid
        return codes

    def unsubscribe(self, topic: str) -> list[Any]:
        _, mid = self.client.unsubscribe(topic)
        got, codes = self.unsubacks.get(timeout=TIMEOUT)
        assert got == mid
        return codes

    def publish(
        self, topic: str, payload: bytes = b"", qos: int = 0, retain: bool = False,
        properties: PahoProperties | None = None,
    ) -> None:
        """Publish and wait until the broker acknowledged it (QoS > 0) or it was written."""
        info = self.client.publish(topic, payload, qos, retain, properties)
        info.wait_for_publish(TIMEOUT)
        assert info.is_published()

    def get(self, timeout: float = TIMEOUT) -> paho.MQTTMessage:
        """The next received message."""
        try:
            return self.messages.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError("no message before the deadline") from None

    def get_n(self, count: int, timeout: float = TIMEOUT) -> list[paho.MQTTMessage]:
        deadline = time.monotonic() + timeout
        return [self.get(max(0.01, deadline - time.monotonic())) for _ in range(count)]

    def pending(self) -> list[paho.MQTTMessage]:
        """Messages received and not yet taken."""
        out = []
        while True:
            try:
                out.append(self.messages.get_nowait())
            except queue.Empty:
                return out

    def sync(self) -> None:
        """Round trip to the broker (SUBSCRIBE to a private topic) so earlier deliveries
        to this client have been received and handed to `on_message`."""
        self.subscribe(f"sync/{id(self)}/{time.monotonic_ns()}")

    def close(self) -> None:
        if self.started:
            with contextlib.suppress(Exception):
                self.client.disconnect()
            self.client.loop_stop()
            self.started = False
        with contextlib.suppress(Exception):
            self.client.socket() and self.client.socket().close()  # type: ignore[union-attr]

    def __enter__(self) -> PahoV5:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def paho_props(packet_type: int, **values: Any) -> PahoProperties:
    """paho Properties for `packet_type` with attributes set (`UserProperty` is a list)."""
    props = PahoProperties(packet_type)
    for name, value in values.items():
        setattr(props, name, value)
    return props


def run_tool(args: Iterable[str], timeout: float = 10.0) -> subprocess.CompletedProcess[str]:
    """Run a mosquitto client tool to completion."""
    return subprocess.run(
        list(args), capture_output=True, text=True, timeout=timeout, check=False
    )


class Background:
    """A long-running tool (mosquitto_sub) read line by line from a thread."""

    def __init__(self, args: Iterable[str]) -> None:
        self.proc = subprocess.Popen(
            list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        self.lines: queue.Queue[str] = queue.Queue()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))

    def line(self, timeout: float = TIMEOUT) -> str:
        try:
            return self.lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError("no output before the deadline") from None

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            self.proc.wait(TIMEOUT)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(TIMEOUT)
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()
        return self.proc.returncode

    def __enter__(self) -> Background:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
