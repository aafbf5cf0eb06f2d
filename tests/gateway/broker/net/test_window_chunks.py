"""A QoS 1 subscriber's in-flight window is written in chunks, and what a client's own read
produced for it leaves before that read returns, on a real `Server` (127.0.0.1, in process).

One write for a whole window made the window stop-and-wait (docs/flow-control.md, "Towards a
subscriber"): these tests record what reaches the subscriber's transport and check the
chunks, without any timing."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from gateway.broker.codec import MQTT_3_1_1, Connect, PubAck, Publish, Subscribe, Subscription
from gateway.broker.codec import encode as encode_packet
from gateway.broker.contracts.config import BrokerConfig, LimitsConfig, ListenerConfig
from gateway.broker.engine.broker import Broker
from gateway.broker.net.server import WINDOW_CHUNK, MQTTConnection, Server

WINDOW = 20  # [limits] max_inflight
TIMEOUT = 30.0
V3 = MQTT_3_1_1


def encode(packet: object) -> bytes:
    return encode_packet(packet, V3)  # type: ignore[arg-type]


def packet_types(data: bytes) -> list[int]:
    """The packet types in a buffer of whole MQTT packets."""
    types = []
    offset = 0
    while offset < len(data):
        kind = data[offset] >> 4
        length, shift, offset = 0, 0, offset + 1
        while True:
            byte = data[offset]
            offset += 1
            length |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                break
        offset += length
        types.append(kind)
    return types


async def until(predicate: Callable[[], bool]) -> None:
    async def poll() -> None:
        while not predicate():
            await asyncio.sleep(0.005)

    await asyncio.wait_for(poll(), TIMEOUT)


async def connect(port: int, client_id: str) -> tuple[asyncio.StreamReader,
                                                     asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(encode(Connect(client_id, V3, True, 60)))
    assert await asyncio.wait_for(reader.readexactly(4), TIMEOUT) == b"\x20\x02\x00\x00"
    return reader, writer


def subscriber_of(server: Server, client_id: str) -> MQTTConnection:
    [connection] = [c for c in server.connections() if c.conn.client_id == client_id]
    return connection


def record_writes(connection: MQTTConnection) -> list[bytes]:
    """Every `transport.write` to this connection from now on."""
    transport = connection.transport
    assert transport is not None
    writes: list[bytes] = []
    write = transport.write

    def recording(data: bytes | bytearray | memoryview) -> None:
        writes.append(bytes(data))
        write(data)

    transport.write = recording  # type: ignore[method-assign]
    return writes


def test_a_window_goes_out_in_chunks_and_its_refill_within_the_read() -> None:
    async def main() -> None:
        broker = Broker(BrokerConfig(limits=LimitsConfig(max_inflight=WINDOW)))
        server = Server(broker)
        [(_host, port)] = await server.start([ListenerConfig(bind="127.0.0.1:0")])
        sub_reader, sub_writer = await connect(port, "sub")
        sub_writer.write(encode(Subscribe(1, [Subscription("w/#", 1)])))
        assert await asyncio.wait_for(sub_reader.readexactly(5), TIMEOUT) == (
            b"\x90\x03\x00\x01\x01")
        subscriber = subscriber_of(server, "sub")
        writes = record_writes(subscriber)
        _pub_reader, pub_writer = await connect(port, "pub")
        # Two windows in one read: the first fills the window, the second waits in the queue.
        pub_writer.write(b"".join(
            encode(Publish("w/t", b"%d" % i, qos=1, packet_id=i)) for i in range(1, 2 * WINDOW + 1)
        ))
        session = subscriber.conn.session
        assert session is not None
        await until(lambda: len(session.outbound.queue) == WINDOW
                    and sum(map(len, map(packet_types, writes))) == WINDOW)
        first = [packet_types(data) for data in writes]
        assert all(len(kinds) <= WINDOW_CHUNK for kinds in first)
        assert len(first) >= WINDOW // WINDOW_CHUNK
        # The subscriber acknowledges the whole window in one read; handed to the connection
        # directly, so nothing else of the loop runs before the check.
        writes.clear()
        packet_ids = sorted(session.outbound.inflight)
        subscriber.data_received(b"".join(encode(PubAck(pid)) for pid in packet_ids))
        refill = [packet_types(data) for data in writes]
        assert sum(map(len, refill)) == WINDOW  # all of it written before the read returned
        assert all(len(kinds) <= WINDOW_CHUNK for kinds in refill)
        assert all(kind == 3 for kinds in refill for kind in kinds)  # PUBLISH only
        assert subscriber.out is None
        await asyncio.wait_for(server.stop(), TIMEOUT)
        sub_writer.close()
        pub_writer.close()

    asyncio.run(main())


def test_qos0_publishes_are_still_joined_into_one_write() -> None:
    async def main() -> None:
        broker = Broker(BrokerConfig())
        server = Server(broker)
        [(_host, port)] = await server.start([ListenerConfig(bind="127.0.0.1:0")])
        sub_reader, sub_writer = await connect(port, "sub")
        sub_writer.write(encode(Subscribe(1, [Subscription("z/#", 0)])))
        assert await asyncio.wait_for(sub_reader.readexactly(5), TIMEOUT) == (
            b"\x90\x03\x00\x01\x00")
        writes = record_writes(subscriber_of(server, "sub"))
        _pub_reader, pub_writer = await connect(port, "pub")
        count = 4 * WINDOW_CHUNK
        pub_writer.write(b"".join(encode(Publish("z/t", b"%d" % i)) for i in range(count)))
        await until(lambda: sum(map(len, map(packet_types, writes))) == count)
        assert len(writes) < count // WINDOW_CHUNK  # not cut into window chunks
        await asyncio.wait_for(server.stop(), TIMEOUT)
        sub_writer.close()
        pub_writer.close()

    asyncio.run(main())
