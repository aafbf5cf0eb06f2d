"""Composition: the only place that wires configuration, hooks, the broker and listeners.

How this works: `run` builds the broker from a validated `Config`, binds every listener, prints
one `listening on HOST:PORT` line per bound address (tests and the demo read the port from it
when port 0 was asked for), then serves until SIGINT or SIGTERM and shuts down gracefully.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from collections.abc import Callable
from pathlib import Path

from gateway.broker import Broker
from gateway.config import Config
from gateway.hooks import BrokerHooks
from gateway.server import Server
from storage.memory import MemoryStore

log = logging.getLogger("outpost")


def install_event_loop_policy() -> str:
    """Use uvloop where it is installed; returns the loop implementation's name."""
    try:
        import uvloop
    except ImportError:
        return "asyncio"
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    return "uvloop"


def build_hooks(config: Config, state_dir: Path | None) -> BrokerHooks:
    """The hooks for this configuration (the in-memory store for now)."""
    return MemoryStore()


async def serve(
    config: Config,
    state_dir: Path | None = None,
    on_ready: Callable[[list[tuple[str, int]]], None] | None = None,
    stop: asyncio.Event | None = None,
) -> None:
    """Run the broker until `stop` is set (or SIGINT/SIGTERM when `stop` is None)."""
    loop = asyncio.get_running_loop()
    hooks = build_hooks(config, state_dir)
    broker = Broker(config, hooks, now=loop.time())
    broker.restore(hooks.restore(), loop.time())
    server = Server(broker)
    stop_event = stop or asyncio.Event()
    if stop is None:
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop_event.set)
    addresses = await server.start(list(config.listeners))
    for host, port in addresses:
        print(f"outpost: listening on {host}:{port}", flush=True)
    if on_ready is not None:
        on_ready(addresses)
    await stop_event.wait()
    log.info("shutting down")
    await server.stop()


def run(config: Config, state_dir: Path | None = None) -> int:
    """Blocking entry point used by `outpost run`."""
    loop_name = install_event_loop_policy()
    log.info("starting outpost (%s event loop)", loop_name)
    try:
        asyncio.run(serve(config, state_dir))
    except OSError as exc:
        print(f"outpost: cannot start: {exc}", file=sys.stderr)
        return 1
    return 0
