"""The status / console listener's bounds (outpost/http_guard.py) over real sockets, around a
small aiohttp application, with short deadlines: a client that does not send its request's
head or body in time gets a 408 and is closed; one that does is served, however long its
handler takes."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

from aiohttp import web

from outpost.http_guard import Limits, PeerSlots, serve_guarded

LIMITS = Limits(head_timeout=0.3, body_timeout=0.3, per_address=3, total=8)
Connect = Callable[[], Awaitable[tuple[asyncio.StreamReader, asyncio.StreamWriter]]]


@asynccontextmanager
async def guarded(release: asyncio.Event) -> AsyncIterator[Connect]:
    async def slow(request: web.Request) -> web.Response:
        await request.read()
        await release.wait()  # a handler that takes long (a probe over a dead bus)
        return web.Response(text="done")

    app = web.Application()
    app.router.add_post("/slow", slow)
    app.router.add_post("/echo", _echo)
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    assert runner.server is not None
    server = await serve_guarded(runner.server, "127.0.0.1", 0, None, LIMITS)
    port = server.sockets[0].getsockname()[1]
    try:
        yield lambda: asyncio.open_connection("127.0.0.1", port)
    finally:
        release.set()
        server.close()
        await runner.cleanup()


async def _echo(request: web.Request) -> web.Response:
    return web.Response(body=await request.read())


def request(path: str, body: bytes = b"") -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n\r\n"
            .encode() + body)


def test_a_head_or_body_not_sent_in_time_gets_a_408() -> None:
    async def run() -> None:
        async with guarded(asyncio.Event()) as connect:
            slow_head, slow_body = await connect(), await connect()
            slow_head[1].write(b"POST /echo HTTP/1.1\r\nHost: x\r\n")  # never finished
            slow_body[1].write(request("/echo", b"0123456789")[:-7])  # 7 bytes owed
            for reader, _ in (slow_head, slow_body):
                answer = await asyncio.wait_for(reader.read(), 20)  # until it is closed
                assert answer.startswith(b"HTTP/1.1 408 Request Timeout")

    asyncio.run(run())


def test_a_request_sent_in_time_is_served_however_long_its_handler_takes() -> None:
    async def run() -> None:
        release = asyncio.Event()
        async with guarded(release) as connect:
            reader, writer = await connect()
            writer.write(request("/echo", b"one") + request("/slow", b"two"))  # pipelined
            assert (await reader.readuntil(b"one")).startswith(b"HTTP/1.1 200")
            idle = await connect()
            idle[1].write(b"P")  # a request begun and never finished: its deadline passes
            await asyncio.wait_for(idle[0].read(), 20)
            release.set()  # ... while the slow handler was working: it still answers
            assert b"done" in await asyncio.wait_for(reader.readuntil(b"done"), 20)

    asyncio.run(run())


def test_connections_beyond_an_address_cap_are_closed_at_once() -> None:
    async def run() -> None:
        async with guarded(asyncio.Event()) as connect:
            held = [await connect() for _ in range(LIMITS.per_address + 2)]
            closed = [await asyncio.wait_for(reader.read(), 20) for reader, _ in held[-2:]]
            assert closed == [b"", b""]  # no answer: closed as soon as accepted
            reader, writer = held[0]
            writer.write(request("/echo", b"still served"))
            assert b"still served" in await asyncio.wait_for(
                reader.readuntil(b"still served"), 20)

    asyncio.run(run())


def test_peer_slots_count_per_address_and_in_all() -> None:
    slots = PeerSlots(per_address=2, total=3)
    assert [slots.take("a"), slots.take("a"), slots.take("a")] == [True, True, False]
    assert [slots.take("b"), slots.take("c")] == [True, False]  # the total
    slots.give("a")
    assert slots.take("c") and slots.open == {"a": 1, "b": 1, "c": 1}
