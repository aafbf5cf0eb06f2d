"""A fake transport and clock for driving the pure broker core."""

from __future__ import annotations

from collections.abc import Callable

from gateway.broker.codec import NEED_DATA, decode
from gateway.broker.codec.packets import MQTT_3_1_1, Connect, Packet, Subscribe, Subscription
from gateway.broker.contracts.config import LimitsConfig
from gateway.broker.contracts.hooks import BrokerHooks
from gateway.broker.core.session import Connection
from gateway.broker.engine.broker import Broker
from outpost.config import Config


class FakeSink:
    """Records what the core writes; `packets()` decodes it."""

    def __init__(self, version: int = MQTT_3_1_1) -> None:
        self.data = bytearray()
        self.gated: list[bytes] = []
        self.closed = False
        self.version = version
        self.pending = 0
        self.reading = True  # False while the broker pauses this client (flow control)
        self.on_close: Callable[[], None] | None = None

    def write(self, data: bytes, gated: bool = False) -> None:
        self.data += data
        if gated:
            self.gated.append(data)

    def close(self) -> None:
        # Like the server: closing the transport reports the connection as lost.
        if not self.closed and self.on_close is not None:
            self.closed = True
            self.on_close()
        self.closed = True

    def backlog(self) -> int:
        return self.pending

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True

    def packets(self) -> list[Packet]:
        """Decode and consume everything written so far."""
        out: list[Packet] = []
        view = bytes(self.data)
        offset = 0
        while offset < len(view):
            result = decode(view[offset:], self.version)
            assert result is not NEED_DATA, "incomplete packet written"
            packet, used = result
            out.append(packet)
            offset += used
        self.data.clear()
        return out


class Harness:
    """A broker plus helpers to connect clients with a fake clock."""

    def __init__(self, hooks: BrokerHooks | None = None, **limits: object) -> None:
        config = Config(limits=LimitsConfig(**limits), sys={"interval": 0})  # type: ignore[arg-type]
        self.now = 1000.0
        self.broker = Broker(config, hooks, now=self.now)

    def connect(
        self, client_id: str, version: int = MQTT_3_1_1, clean: bool = True, **kwargs: object
    ) -> tuple[Connection, FakeSink]:
        sink = FakeSink(version)
        conn = self.broker.open_connection(sink, "test", "127.0.0.1:1", True, self.now)
        sink.on_close = lambda: self.broker.connection_lost(conn, self.now)
        connect = Connect(client_id, version, clean, **kwargs)  # type: ignore[arg-type]
        self.broker.handle(conn, connect, self.now)
        return conn, sink

    def subscribe(
        self, conn: Connection, topic_filter: str, qos: int = 0, **options: object
    ) -> None:
        subscription = Subscription(topic_filter, qos, **options)  # type: ignore[arg-type]
        self.broker.handle(conn, Subscribe(1, [subscription]), self.now)

    def send(self, conn: Connection, packet: Packet) -> None:
        self.broker.handle(conn, packet, self.now)

    def drop(self, conn: Connection) -> None:
        self.broker.connection_lost(conn, self.now)

    def advance(self, seconds: float) -> None:
        self.now += seconds
        self.broker.tick(self.now)
