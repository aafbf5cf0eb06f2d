"""Small clients for the end-to-end tests, shared by the 3.1.1 and the 5.0 test files.

- `wait_for(predicate, timeout)`: poll with a deadline instead of sleeping.
- `RawConnection`: a blocking raw-socket MQTT connection built on `gateway.broker.codec`. It sends
  exact bytes (or encodes packets), reads whole frames (`recv_frame` gives the exact bytes,
  `recv` the decoded packet) and keeps frames read ahead (`stash`) for the next `recv`.
  `sync()` sends PINGREQ and returns every packet that arrived before the PINGRESP: since the
  broker handles packets in order, that proves what was (not) delivered without sleeping.
- `RawClient`: a `RawConnection` (any version) with the few handshakes tests need (`connect`,
  `subscribe`, `publish`) answered with exact bytes; packets that arrive while a handshake
  waits for its ack are kept, in order, for `recv`. `v5_helpers.RawV5` is the MQTT 5.0 one.
- `PahoClient`: paho-mqtt 2.x with a message list and blocking helpers.
- `MosquittoSub` / `mosquitto_pub`: the mosquitto command-line clients.

Every client is a context manager and must be closed; tests use `with` or `closing`.
"""

from __future__ import annotations

import socket
import subprocess
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Self

from gateway.broker.codec import (
    MQTT_3_1,
    MQTT_3_1_1,
    MQTT_5,
    NEED_DATA,
    NO_PROPERTIES,
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
    Subscribe,
    Subscription,
    Unsubscribe,
    Will,
    decode,
    encode,
)
from tests.support.broker_proc import BrokerProcess
from tests.support.waiting import TIMEOUT, wait_for

__all__ = [
    "MQTT_3_1",
    "MQTT_3_1_1",
    "MQTT_5",
    "TIMEOUT",
    "MosquittoSub",
    "PahoClient",
    "RawClient",
    "RawConnection",
    "frame_length",
    "mosquitto_pub",
    "wait_for",
]


def frame_length(buf: bytes | bytearray) -> int | None:
    """Total length of the MQTT frame at the start of `buf`, or None if not yet known."""
    multiplier = 1
    value = 0
    for index in range(1, min(len(buf), 5)):
        byte = buf[index]
        value += (byte & 0x7F) * multiplier
        if not byte & 0x80:
            return index + 1 + value
        multiplier *= 128
    return None


class ClosedError(AssertionError):
    """The broker closed the connection while the test expected a packet."""


class RawConnection:
    """A blocking raw-socket MQTT connection (3.1, 3.1.1 or 5.0): bytes and frames, no
    handshakes (`RawClient` and `v5_helpers.RawV5` add those)."""

    def __init__(self, host: str, port: int, version: int = MQTT_3_1_1,
                 timeout: float = TIMEOUT, rcvbuf: int | None = None) -> None:
        self.version = version
        self.timeout = timeout
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if rcvbuf is not None:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.sock.settimeout(timeout)
        try:
            self.sock.connect((host, port))
        except OSError:
            self.sock.close()
            raise
        self.buffer = bytearray()
        self.stash: list[bytes] = []  # frames read ahead while waiting for an ack
        self.eof = False
        self._next_id = 0

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.sock.close()

    def next_id(self) -> int:
        """A fresh packet identifier (1, 2, ...)."""
        self._next_id = self._next_id % 65535 + 1
        return self._next_id

    # -- bytes ---------------------------------------------------------------------------

    def send(self, data: bytes | Packet) -> None:
        """Send exact bytes, or a packet encoded for this client's version."""
        if not isinstance(data, bytes | bytearray):
            data = encode(data, self.version)
        self.sock.sendall(data)

    def _fill(self, deadline: float) -> bool:
        """Read more bytes; False at end of stream. Raises TimeoutError at the deadline."""
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError
        self.sock.settimeout(remaining)
        try:
            chunk = self.sock.recv(65536)
        except ConnectionResetError:
            chunk = b""
        if not chunk:
            self.eof = True
            return False
        self.buffer += chunk
        return True

    def recv_frame(self, timeout: float | None = None) -> bytes:
        """The exact bytes of the next packet from the broker."""
        if self.stash:
            return self.stash.pop(0)
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while True:
            total = frame_length(self.buffer)
            if total is not None and len(self.buffer) >= total:
                frame = bytes(self.buffer[:total])
                del self.buffer[:total]
                return frame
            try:
                if self.eof or not self._fill(deadline):
                    raise ClosedError(f"connection closed; unread bytes {bytes(self.buffer).hex()}")
            except TimeoutError:
                raise AssertionError(
                    f"no packet within the timeout; partial bytes {bytes(self.buffer).hex()}"
                ) from None

    def recv(self, timeout: float | None = None) -> Packet:
        """The next packet from the broker, decoded."""
        return self.decode(self.recv_frame(timeout))

    def decode(self, frame: bytes) -> Packet:
        result = decode(frame, self.version)
        assert result is not NEED_DATA
        packet, used = result
        assert used == len(frame)
        return packet

    def expect_closed(self, timeout: float | None = None) -> bytes:
        """Wait until the broker closes the connection; returns the bytes it sent first."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        try:
            while not self.eof and self._fill(deadline):
                pass
        except TimeoutError:
            raise AssertionError(
                f"connection still open; received {bytes(self.buffer).hex()}"
            ) from None
        data = b"".join(self.stash) + bytes(self.buffer)
        self.stash.clear()
        self.buffer.clear()
        return data

    def is_closed(self) -> bool:
        """True once the broker has closed the connection (does not wait)."""
        if self.eof:
            return True
        try:
            self._fill(time.monotonic() + 0.001)
        except TimeoutError:
            return False
        return self.eof

    def sync(self, timeout: float | None = None) -> list[Packet]:
        """PINGREQ; every packet received before the PINGRESP (the broker is in order)."""
        self.send(PingReq())
        packets: list[Packet] = []
        while True:
            packet = self.recv(timeout)
            if isinstance(packet, PingResp):
                return packets
            packets.append(packet)


class RawClient(RawConnection):
    """A blocking raw-socket MQTT client (3.1, 3.1.1 or 5.0) for byte-exact tests."""

    @classmethod
    def to(cls, broker: BrokerProcess, version: int = MQTT_3_1_1, **kwargs: Any) -> RawClient:
        """A raw client connected (TCP only) to `broker`."""
        return cls(broker.host, broker.port, version, **kwargs)

    # -- handshakes ----------------------------------------------------------------------

    def connect(self, client_id: str = "", clean: bool = True, keep_alive: int = 60,
                will: Will | None = None, username: str | None = None,
                password: bytes | None = None,
                properties: Properties = NO_PROPERTIES) -> bytes:
        """Send CONNECT and return the exact CONNACK bytes."""
        self.send(Connect(client_id, self.version, clean, keep_alive, username, password, will,
                          properties))
        return self.recv_frame()

    def subscribe(self, *filters: tuple[str, int], packet_id: int | None = None) -> bytes:
        """SUBSCRIBE to (filter, qos) pairs; returns the exact SUBACK bytes."""
        pid = packet_id or self.next_id()
        self.send(Subscribe(pid, [Subscription(f, q) for f, q in filters]))
        return self._recv_ack(0x90, pid)

    def unsubscribe(self, *filters: str, packet_id: int | None = None) -> bytes:
        """UNSUBSCRIBE; returns the exact UNSUBACK bytes."""
        pid = packet_id or self.next_id()
        self.send(Unsubscribe(pid, list(filters)))
        return self._recv_ack(0xB0, pid)

    def publish(self, topic: str, payload: bytes = b"", qos: int = 0, retain: bool = False,
                packet_id: int | None = None, dup: bool = False,
                properties: Properties = NO_PROPERTIES) -> list[bytes]:
        """PUBLISH and finish the QoS handshake; returns the broker's ack frames in order."""
        pid = (packet_id or self.next_id()) if qos else None
        self.send(Publish(topic, payload, qos, retain, dup, pid, properties))
        if qos == 0:
            return []
        acks = [self._recv_ack(0x40 if qos == 1 else 0x50, pid or 0)]
        if qos == 2:
            self.send(PubRel(pid or 0))
            acks.append(self._recv_ack(0x70, pid or 0))
        return acks

    def _recv_ack(self, first: int, packet_id: int) -> bytes:
        """The next ack of type `first` for `packet_id`; other frames stay for `recv`."""
        stashed: list[bytes] = []
        while True:
            frame = self.recv_frame()
            if frame[0] == first and frame[2:4] == packet_id.to_bytes(2, "big"):
                self.stash[:0] = stashed
                return frame
            stashed.append(frame)

    def ack(self, packet: Packet) -> None:
        """Acknowledge a PUBLISH (QoS 1: PUBACK, QoS 2: PUBREC) or a PUBREL (PUBCOMP)."""
        if isinstance(packet, Publish):
            if packet.qos == 1:
                self.send(PubAck(packet.packet_id or 0))
            elif packet.qos == 2:
                self.send(PubRec(packet.packet_id or 0))
        elif isinstance(packet, PubRel):
            self.send(PubComp(packet.packet_id))

    def receive_publishes(self, count: int, timeout: float | None = None,
                          ack: bool = True) -> list[Publish]:
        """Read `count` PUBLISH packets; with `ack`, complete each QoS 1/2 flow (PUBREL too)."""
        received: list[Publish] = []
        awaiting_pubrel: set[int] = set()
        while len(received) < count or awaiting_pubrel:
            packet = self.recv(timeout)
            if ack:
                self.ack(packet)
            if isinstance(packet, Publish):
                received.append(packet)
                if ack and packet.qos == 2:
                    awaiting_pubrel.add(packet.packet_id or 0)
            elif isinstance(packet, PubRel):
                awaiting_pubrel.discard(packet.packet_id)
        return received

    def disconnect(self) -> None:
        """Send DISCONNECT and wait for the broker to close the socket."""
        self.send(Disconnect())
        self.expect_closed()


# -- paho-mqtt ------------------------------------------------------------------------------


@dataclass
class Received:
    """One message seen by a `PahoClient`."""

    topic: str
    payload: bytes
    qos: int
    retain: bool
    mid: int
    dup: bool


@dataclass
class _PahoState:
    messages: list[Received] = field(default_factory=list)
    connack: list[Any] = field(default_factory=list)
    subacks: dict[int, list[Any]] = field(default_factory=dict)
    disconnects: list[Any] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


class PahoClient:
    """paho-mqtt 2.x (callback API 2) with a background loop and blocking helpers."""

    def __init__(self, broker: BrokerProcess, client_id: str = "", protocol: int = MQTT_3_1_1,
                 clean_session: bool = True, keepalive: int = 60,
                 will: tuple[str, bytes, int, bool] | None = None) -> None:
        import paho.mqtt.client as mqtt
        from paho.mqtt.enums import CallbackAPIVersion

        self.broker = broker
        self.keepalive = keepalive
        self.state = _PahoState()
        paho_protocol = {MQTT_3_1: mqtt.MQTTv31, MQTT_3_1_1: mqtt.MQTTv311}[protocol]
        self.client = mqtt.Client(
            callback_api_version=CallbackAPIVersion.VERSION2, client_id=client_id,
            protocol=paho_protocol, clean_session=clean_session,
        )
        self.client.reconnect_delay_set(60, 120)  # tests reconnect explicitly
        if will is not None:
            self.client.will_set(*will)
        self.client.on_message = self._on_message
        self.client.on_connect = self._on_connect
        self.client.on_subscribe = self._on_subscribe
        self.client.on_disconnect = self._on_disconnect
        self._started = False

    def __enter__(self) -> PahoClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _on_message(self, client: Any, userdata: Any, msg: Any) -> None:
        with self.state.lock:
            self.state.messages.append(
                Received(msg.topic, bytes(msg.payload), msg.qos, bool(msg.retain), msg.mid,
                         bool(msg.dup))
            )

    def _on_connect(self, client: Any, userdata: Any, flags: Any, reason: Any,
                    properties: Any) -> None:
        self.state.connack.append((flags.session_present, reason.value))

    def _on_subscribe(self, client: Any, userdata: Any, mid: int, reasons: Any,
                      properties: Any) -> None:
        self.state.subacks[mid] = [r.value for r in reasons]

    def _on_disconnect(self, client: Any, userdata: Any, flags: Any, reason: Any,
                       properties: Any) -> None:
        self.state.disconnects.append(reason)

    def connect(self) -> tuple[bool, int]:
        """Connect and wait for CONNACK; returns (session present, return code)."""
        before = len(self.state.connack)
        self.client.connect(self.broker.host, self.broker.port, self.keepalive)
        if not self._started:
            self.client.loop_start()
            self._started = True
        wait_for(lambda: len(self.state.connack) > before, message="paho: no CONNACK")
        result: tuple[bool, int] = self.state.connack[-1]
        return result

    def subscribe(self, topic: str, qos: int = 0) -> list[int]:
        """Subscribe and wait for SUBACK; returns the granted QoS list."""
        _, mid = self.client.subscribe(topic, qos)
        granted: list[int] = wait_for(lambda: self.state.subacks.get(mid),
                                      message="paho: no SUBACK")
        return granted

    def publish(self, topic: str, payload: bytes, qos: int = 0, retain: bool = False) -> None:
        """Publish and wait until the QoS handshake completes."""
        info = self.client.publish(topic, payload, qos, retain)
        info.wait_for_publish(TIMEOUT)
        assert info.is_published(), f"paho: {topic} not published"

    @property
    def messages(self) -> list[Received]:
        with self.state.lock:
            return list(self.state.messages)

    def wait_messages(self, count: int, timeout: float = TIMEOUT) -> list[Received]:
        """Wait until at least `count` messages arrived; returns them all."""
        wait_for(lambda: len(self.state.messages) >= count, timeout,
                 message=f"paho: expected {count} messages, got {len(self.state.messages)}")
        return self.messages

    def disconnect(self) -> None:
        """Normal DISCONNECT."""
        self.client.disconnect()

    def close(self) -> None:
        """Stop the loop and close the socket (DISCONNECT if still connected)."""
        try:
            self.client.disconnect()
        finally:
            if self._started:
                self.client.loop_stop()
            sock = self.client.socket()
            if sock is not None:
                sock.close()


# -- mosquitto command-line clients ----------------------------------------------------------


def mosquitto_pub(broker: BrokerProcess, *args: str, version: str = "mqttv311",
                  timeout: float = 10.0) -> subprocess.CompletedProcess[str]:
    """Run `mosquitto_pub` against `broker`; fails the test on a non-zero exit."""
    from tests.conftest import require

    cmd = [require("mosquitto_pub"), "-h", broker.host, "-p", str(broker.port), "-V", version,
           *args]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    assert result.returncode == 0, f"{cmd} failed: {result.stderr}"
    return result


class MosquittoSub:
    """`mosquitto_sub` in the background; `lines` are the messages it printed (`-F` format).

    Started with `-d` so the SUBACK is visible: `start` returns once it was received.
    Messages are printed as `MSG|<topic>|<qos>|<retain>|<payload>`.
    """

    def __init__(self, broker: BrokerProcess, *args: str, version: str = "mqttv311") -> None:
        from tests.conftest import require

        # stdbuf: mosquitto_sub's stdout is block-buffered when it is not a terminal
        cmd = [require("stdbuf"), "-oL", require("mosquitto_sub"), "-h", broker.host,
               "-p", str(broker.port), "-V", version, "-d", "-F", "MSG|%t|%q|%r|%p", *args]
        self.process = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                        text=True, bufsize=1)
        self.output: list[str] = []
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        wait_for(lambda: any("received SUBACK" in line for line in self.output),
                 message=f"mosquitto_sub did not subscribe: {self.output}")

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            with self._lock:
                self.output.append(line.rstrip("\n"))

    @property
    def lines(self) -> list[str]:
        """The printed messages, without the `MSG|` prefix."""
        with self._lock:
            return [line[4:] for line in self.output if line.startswith("MSG|")]

    def wait_lines(self, count: int, timeout: float = TIMEOUT) -> list[str]:
        wait_for(lambda: len(self.lines) >= count, timeout,
                 message=f"mosquitto_sub: expected {count} messages, output {self.output}")
        return self.lines

    def wait_exit(self, timeout: float = TIMEOUT) -> int:
        code = self.process.wait(timeout)
        self._reader.join(timeout)
        return code

    def __enter__(self) -> MosquittoSub:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(TIMEOUT)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._reader.join(TIMEOUT)
        if self.process.stdout is not None:
            self.process.stdout.close()
