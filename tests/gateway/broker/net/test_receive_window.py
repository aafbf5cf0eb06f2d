"""A v5 publisher past our Receive Maximum, on a real `Server` (127.0.0.1, in process) with a
durable hook whose commits the test lets through: reading stops while the client's window is
full of PUBACKs held for a commit, goes on when the commit sends them, and a held
acknowledgement never waits for the ack hold while reading is stopped. A window full of QoS 2
ids awaiting PUBREL is still DISCONNECT 0x93 (docs/flow-control.md)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from gateway.broker.codec import MQTT_5, Connect, Publish, encode
from gateway.broker.codec.reason_codes import ReasonCode
from gateway.broker.contracts.config import BrokerConfig, LimitsConfig, ListenerConfig
from gateway.broker.contracts.hooks import BrokerHooks, ClientInfo
from gateway.broker.core.message import Message
from gateway.broker.engine.broker import Broker
from gateway.broker.net.server import Server

WINDOW = 8  # our Receive Maximum
HOLD = 600.0  # the ack hold: a test that finishes shows the hold did not keep anything
TIMEOUT = 30.0


class GatedStore(BrokerHooks):
    """Durable: acknowledgements wait for `flush`, which waits until the test opens the gate."""

    durable = True

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.flushing = asyncio.Event()
        self.routed = 0

    def published(self, client: ClientInfo | None, message: Message) -> None:
        self.routed += 1

    async def flush(self) -> None:
        self.flushing.set()
        await self.gate.wait()

    async def close(self) -> None:
        return None


async def until(predicate: Callable[[], bool]) -> None:
    async def poll() -> None:
        while not predicate():
            await asyncio.sleep(0.005)

    await asyncio.wait_for(poll(), TIMEOUT)


def run(scenario: Callable[[Server, GatedStore, asyncio.StreamReader, asyncio.StreamWriter],
                           Awaitable[None]]) -> None:
    async def main() -> None:
        store = GatedStore()
        broker = Broker(BrokerConfig(limits=LimitsConfig(receive_maximum=WINDOW)), store)
        server = Server(broker, ack_hold=HOLD)
        [(_host, port)] = await server.start([ListenerConfig(bind="127.0.0.1:0")])
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(encode(Connect("windowed", MQTT_5, True, 60), MQTT_5))
        store.gate.set()  # the CONNACK's commit
        connack = await asyncio.wait_for(reader.readexactly(3), TIMEOUT)
        await asyncio.wait_for(reader.readexactly(connack[1] - 1), TIMEOUT)
        store.gate.clear()
        store.flushing.clear()
        try:
            await scenario(server, store, reader, writer)
        finally:
            store.gate.set()
            await asyncio.wait_for(server.stop(), TIMEOUT)
            writer.close()

    asyncio.run(main())


def test_reading_stops_while_the_window_is_full_of_held_pubacks() -> None:
    count = 3 * WINDOW

    async def scenario(server: Server, store: GatedStore, reader: asyncio.StreamReader,
                       writer: asyncio.StreamWriter) -> None:
        writer.write(b"".join(encode(Publish("w/t", b"%d" % n, 1, packet_id=n), MQTT_5)
                              for n in range(1, count + 1)))  # all at once, like MQTT.js
        [connection] = server.connections()
        await until(lambda: connection.windowed)
        await store.flushing.wait()
        # The window is full and its PUBACKs wait for the commit: nothing more is taken.
        assert store.routed == WINDOW
        store.gate.set()
        acks = await asyncio.wait_for(reader.readexactly(4 * count), TIMEOUT)
        assert acks == b"".join(bytes([0x40, 0x02, 0, n]) for n in range(1, count + 1))
        assert store.routed == count and not connection.windowed

    run(scenario)


def test_a_held_window_is_committed_without_waiting_for_the_hold() -> None:
    async def scenario(server: Server, store: GatedStore, reader: asyncio.StreamReader,
                       writer: asyncio.StreamWriter) -> None:
        store.gate.set()  # commits go through; only the ack hold could keep a PUBACK
        # A slow pipelining publisher (the pace the hold waits for), then one more than
        # the window at once: reading stops, and the held PUBACKs must go out.
        for n in range(1, 4):
            writer.write(encode(Publish("w/h", b"x", 1, packet_id=n), MQTT_5))
            await asyncio.sleep(0.05)
        writer.write(b"".join(encode(Publish("w/h", b"x", 1, packet_id=n), MQTT_5)
                              for n in range(4, 4 + WINDOW + 1)))
        acks = await asyncio.wait_for(reader.readexactly(4 * (3 + WINDOW + 1)), TIMEOUT)
        assert acks == b"".join(bytes([0x40, 0x02, 0, n]) for n in range(1, 4 + WINDOW + 1))

    run(scenario)


def test_a_window_full_of_qos2_awaiting_pubrel_is_still_0x93() -> None:
    async def scenario(server: Server, store: GatedStore, reader: asyncio.StreamReader,
                       writer: asyncio.StreamWriter) -> None:
        store.gate.set()
        writer.write(b"".join(encode(Publish("w/q2", b"x", 2, packet_id=n), MQTT_5)
                              for n in range(1, WINDOW + 2)))
        pubrecs = await asyncio.wait_for(reader.readexactly(4 * WINDOW), TIMEOUT)
        assert pubrecs == b"".join(bytes([0x50, 0x02, 0, n]) for n in range(1, WINDOW + 1))
        disconnect = await asyncio.wait_for(reader.readexactly(3), TIMEOUT)
        assert disconnect[0] == 0xE0 and disconnect[2] == ReasonCode.RECEIVE_MAXIMUM_EXCEEDED

    run(scenario)
