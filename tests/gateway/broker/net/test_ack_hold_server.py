"""Held acknowledgements on a real `Server` (127.0.0.1, in process) with a durable hook that
counts its commits: a slow pipelining publisher's messages share commits, a lock-step
publisher and other output are never kept waiting for the hold, and stopping ends a hold.

The hold is set to ten minutes, so a test that finishes shows the hold was ended by the
publisher's behaviour, not by its time running out."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from gateway.broker.codec import MQTT_3_1_1, Connect, Publish, Subscribe, encode
from gateway.broker.codec.packets import Subscription
from gateway.broker.contracts.config import BrokerConfig, LimitsConfig, ListenerConfig
from gateway.broker.contracts.hooks import BrokerHooks
from gateway.broker.engine.broker import Broker
from gateway.broker.net.server import Server

HOLD = 600.0
TIMEOUT = 30.0
GAP = 0.05  # between a pipelining publisher's messages


class CountingStore(BrokerHooks):
    """Durable (acknowledgements wait for `flush`), and counts the flushes."""

    durable = True

    def __init__(self) -> None:
        self.flushes = 0
        self.promised: list[float] = []

    async def flush(self) -> None:
        self.flushes += 1

    def flush_coming(self, at: float) -> None:
        self.promised.append(at)

    async def close(self) -> None:
        return None


class Client:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def connect(cls, port: int, client_id: str) -> Client:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        client = cls(reader, writer)
        client.send(Connect(client_id, MQTT_3_1_1, True, 60))
        assert await client.read(4) == bytes.fromhex("20020000")
        return client

    def send(self, packet: Connect | Publish | Subscribe) -> None:
        self.writer.write(encode(packet, MQTT_3_1_1))

    def publish(self, n: int, topic: str = "t/x") -> None:
        self.send(Publish(topic, b"m", 1, packet_id=n))

    async def read(self, n: int) -> bytes:
        return await asyncio.wait_for(self.reader.readexactly(n), TIMEOUT)

    async def pubacks(self, count: int) -> list[int]:
        data = await self.read(4 * count)
        frames = [data[i:i + 4] for i in range(0, len(data), 4)]
        assert all(frame[:2] == b"\x40\x02" for frame in frames), data.hex()
        return [int.from_bytes(frame[2:], "big") for frame in frames]

    def close(self) -> None:
        self.writer.close()


async def holding(server: Server) -> None:
    """Until a commit waits for more acknowledgements."""
    async def poll() -> None:
        while not server.holding:
            await asyncio.sleep(0.01)

    await asyncio.wait_for(poll(), TIMEOUT)


def run(scenario: Callable[[Server, CountingStore, int], Awaitable[None]]) -> None:
    async def main() -> None:
        store = CountingStore()
        broker = Broker(BrokerConfig(limits=LimitsConfig(receive_maximum=1000)), store)
        server = Server(broker, ack_hold=HOLD)
        [(_host, port)] = await server.start([ListenerConfig(bind="127.0.0.1:0")])
        try:
            await scenario(server, store, port)
        finally:
            await asyncio.wait_for(server.stop(), TIMEOUT)

    asyncio.run(main())


def test_a_slow_pipelining_publisher_shares_commits() -> None:
    async def scenario(server: Server, store: CountingStore, port: int) -> None:
        client = await Client.connect(port, "pipelining")
        before = store.flushes
        for n in range(1, 13):
            client.publish(n)  # without waiting for PUBACKs, every GAP
            await asyncio.sleep(GAP)
        # it stops: its next message is late, so the hold ends (not after HOLD)
        assert await client.pubacks(12) == list(range(1, 13))
        # one commit each without holding; the first goes alone (no pace known yet), the rest
        # wait together (a few more when this machine stalls a send by several gaps)
        assert store.flushes - before <= 6
        # the store was told when the held messages would be flushed (its idle commit waits)
        assert store.promised
        client.close()

    run(scenario)


def test_a_lock_step_publisher_is_not_kept_waiting() -> None:
    async def scenario(server: Server, store: CountingStore, port: int) -> None:
        client = await Client.connect(port, "lock-step")
        before = store.flushes
        for n in range(1, 21):
            client.publish(n)
            assert await client.pubacks(1) == [n]  # each within TIMEOUT, far below HOLD
        assert store.flushes - before == 20  # one message per commit: nothing to gather
        client.close()

    run(scenario)


def test_a_delivery_to_a_held_publisher_is_not_delayed() -> None:
    async def scenario(server: Server, store: CountingStore, port: int) -> None:
        client = await Client.connect(port, "pipelining")
        client.send(Subscribe(1, [Subscription("echo", 0)]))
        assert await client.read(5) == bytes.fromhex("9003000100")
        sending = True

        async def keep_sending() -> None:  # never late: its hold does not end by itself
            n = 1
            while sending:
                client.publish(n)
                n += 1
                await asyncio.sleep(GAP)

        sender = asyncio.create_task(keep_sending())
        other = await Client.connect(port, "other")
        await holding(server)
        other.send(Publish("echo", b"now", 0))
        # the echo is behind the held PUBACKs on the same connection: it ends the hold
        data = b""
        echo = encode(Publish("echo", b"now", 0), MQTT_3_1_1)
        while echo not in data:
            data += await asyncio.wait_for(client.reader.read(4096), TIMEOUT)
        sending = False
        await sender
        client.close()
        other.close()

    run(scenario)


def test_stopping_the_server_ends_a_hold() -> None:
    async def scenario(server: Server, store: CountingStore, port: int) -> None:
        client = await Client.connect(port, "pipelining")
        for n in range(1, 4):
            client.publish(n)
            await asyncio.sleep(GAP)
        await holding(server)
        client.publish(4)  # the next one is never late: the hold would go on
        await asyncio.wait_for(server.stop(), TIMEOUT)
        data = await asyncio.wait_for(client.reader.read(), TIMEOUT)
        assert bytes.fromhex("40020003") in data  # committed and acknowledged on the way out
        client.close()

    run(scenario)
