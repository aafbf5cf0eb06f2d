"""The lingering close (gateway/broker/net/server.py) of a connection whose peer has already
reset it: the half-close (`write_eof`) fails with ENOTCONN, and the connection is aborted and
forgotten instead of the error escaping into whatever closed it. A real `Server` on 127.0.0.1;
on loopback the client's RST reaches the server's socket before `close()` is called, while the
event loop has not yet read it."""

from __future__ import annotations

import asyncio
import socket
import struct

from gateway.broker.codec import MQTT_5, Connect, encode
from gateway.broker.contracts.config import BrokerConfig, ListenerConfig
from gateway.broker.engine.broker import Broker
from gateway.broker.net.server import Server
from tests.gateway.broker.net.test_receive_window import TIMEOUT, until


def test_closing_a_connection_the_peer_reset_aborts_it() -> None:
    async def main() -> None:
        server = Server(Broker(BrokerConfig()))
        [(_host, port)] = await server.start([ListenerConfig(bind="127.0.0.1:0")])
        loop = asyncio.get_running_loop()
        client = socket.create_connection(("127.0.0.1", port))
        client.setblocking(False)
        try:
            await loop.sock_sendall(client, encode(Connect("reset-peer", MQTT_5, True, 60),
                                                   MQTT_5))
            connack = await asyncio.wait_for(loop.sock_recv(client, 64), TIMEOUT)
            assert connack[0] == 0x20
            [conn] = server.connections()
        finally:
            client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            client.close()  # RST
        conn.close()  # before the loop has seen the reset: the half-close fails
        await until(lambda: not server.connections())
        await asyncio.wait_for(server.stop(), TIMEOUT)

    asyncio.run(main())
