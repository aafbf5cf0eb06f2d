"""A CONNACK whose session the store cannot commit: the client is told (0x88 / 3), not left
without an answer. In-process: a real `Server` on 127.0.0.1 with a durable hook whose commits
fail (what a disk that filled between two space checks does), and raw socket clients."""

from __future__ import annotations

import asyncio

from gateway.broker.codec import MQTT_5, Connect, encode
from gateway.broker.codec.packets import Properties
from gateway.broker.contracts.config import BrokerConfig, ListenerConfig
from gateway.broker.contracts.hooks import BrokerHooks
from gateway.broker.engine.broker import Broker
from gateway.broker.net.server import Server


class FailingStore(BrokerHooks):
    """Durable, accepting, and every commit fails."""

    durable = True

    async def flush(self) -> None:
        raise OSError("database or disk is full")

    async def close(self) -> None:
        return None  # nothing to write at shutdown: every commit fails anyway


async def connack(port: int, packet: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(packet)
    answer = await asyncio.wait_for(reader.read(), 10)  # until the broker closes
    writer.close()
    return answer


def test_unstored_session_gets_a_refusal_not_silence() -> None:
    async def run() -> None:
        broker = Broker(BrokerConfig(), FailingStore())
        server = Server(broker)
        [(_host, port)] = await server.start([ListenerConfig(bind="127.0.0.1:0")])
        try:
            persistent5 = encode(Connect("s5", MQTT_5, False, 30,
                                         properties=Properties(session_expiry_interval=60)),
                                 MQTT_5)
            assert await connack(port, persistent5) == bytes.fromhex("2003008800")
            persistent3 = encode(Connect("s3", 4, False, 30), 4)
            assert await connack(port, persistent3) == bytes.fromhex("20020003")
            # a clean session needs no commit: accepted as usual
            clean = encode(Connect("c3", 4, True, 30), 4)
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(clean)
            assert await asyncio.wait_for(reader.readexactly(4), 10) == bytes.fromhex("20020000")
            writer.close()
        finally:
            await server.stop()

    asyncio.run(run())
