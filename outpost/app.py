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
from typing import Any, Protocol

from bridge.alarms.service import AlarmService
from bridge.config import BridgeConfig
from bridge.homeassistant.discovery import HomeAssistantDiscovery
from bridge.homeassistant.gateway import GatewayInfo
from bridge.runtime import Bridge
from bridge.sparkplug.service import SparkplugService
from bridge.uplink.hook import UplinkHook
from bridge.uplink.outbox import MemoryOutbox
from bridge.uplink.service import UplinkService
from gateway.base.outbox import Outbox
from gateway.base.settings import ConfigError
from gateway.broker.contracts.hooks import BrokerHooks, HookChain
from gateway.broker.engine.broker import Broker
from gateway.broker.net.security_files import load_security
from gateway.broker.net.server import Server
from outpost import __version__
from outpost.alarms_runtime import start_alarms
from outpost.certificate_watch import CertificateWatch, renew_over_mqtt
from outpost.config import Config, StatusConfig, command_local_topics
from outpost.daemon import STOP_TIMEOUT, Daemon, ShutdownTimeoutError, setup_logging
from outpost.history import HistoryRecorder, start_history
from outpost.reload import Reloader
from outpost.remote_config import RemoteConfigService, build_remote_config
from outpost.remote_config_health import HealthProbe
from outpost.remote_update import RemoteUpdateService
from outpost.status import StatusBoard, StatusProvider
from outpost.update_command import Spool
from storage.sqlite import SqliteStore
from storage.sqlite.uplink_outbox import SqliteOutbox

log = logging.getLogger("outpost")


def install_event_loop_policy() -> str:
    """Use uvloop where it is installed; returns the loop implementation's name."""
    try:
        import uvloop  # noqa: PLC0415 (optional, not on Windows: imported where it is chosen)
    except ImportError:
        return "asyncio"
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    return "uvloop"


def build_hooks(config: Config, state_dir: Path | None) -> BrokerHooks:
    """The SQLite store for durability "full"/"normal" with a state directory, else memory.

    `state_dir` (`outpost run --state-dir`) overrides `[storage] state_dir`.
    """
    storage = config.storage
    directory = state_dir or storage.state_dir
    if storage.durability != "memory" and directory is not None:
        store = SqliteStore.from_config(storage, Path(directory), config.gateway_id)
        log.info("store %s (durability %s)", store.path, storage.durability)
        return store
    reason = "durability is memory" if storage.durability == "memory" else "no state directory"
    log.info("nothing is persisted (%s): sessions, queues and retained messages live in memory",
             reason)
    # The broker's own state is all there is: a MemoryStore would mirror every retained message
    # and persistent session a second time for a restore that never comes in this process.
    return BrokerHooks()


def build_outbox(store: BrokerHooks) -> Outbox:
    """The store-and-forward outbox of the uplink and the Sparkplug edge node."""
    # The outbox lives where the store does, so it commits with the publishes it records.
    return SqliteOutbox(store) if isinstance(store, SqliteStore) else MemoryOutbox()


def build_uplink(
    config: Config, store: BrokerHooks, outbox: Outbox | None
) -> tuple[BrokerHooks, UplinkService | None]:
    """The uplink's outbox hook chained after the store, and its service (None if disabled)."""
    if not config.uplink.enabled or outbox is None:
        return store, None
    hook = UplinkHook(config.uplink, outbox, gateway_id=config.gateway_id)
    service = UplinkService(config.uplink, outbox, hook, config.gateway_id)
    return HookChain([store, hook]), service


def build_remote_update(config: Config, state_dir: Path | None, uplink: UplinkService | None
                        ) -> RemoteUpdateService | None:
    """The remote update trigger, when `[remote_update]` is enabled (the configuration check
    made sure an inbound rule brings its command topic in and a status topic takes its
    reports); it needs a state directory for the spool it shares with the root runner."""
    if not config.remote_update.enabled or uplink is None:
        return None
    directory = state_dir or config.storage.state_dir
    if directory is None:
        log.error("remote update: disabled: no state directory (--state-dir or [storage] "
                  "state_dir) to hand requests to the installer through")
        return None
    topic = config.remote_update.remote_command_topic(config.gateway_id)
    return RemoteUpdateService(command_local_topics(config.uplink, topic), config.gateway_id,
                               Spool(Path(directory)), uplink.publish_gateway_status)


async def serve(
    config: Config,
    state_dir: Path | None = None,
    on_ready: Callable[[list[tuple[str, int]]], None] | None = None,
    stop: asyncio.Event | None = None,
    reload_config: Callable[[], Config] | None = None,
    stop_timeout: float = STOP_TIMEOUT,
    hard_exit: bool = False,
    config_path: Path | None = None,
) -> None:
    """Run the broker until `stop` is set (or SIGINT/SIGTERM when `stop` is None).

    `reload_config` re-reads the configuration on SIGHUP (outpost/reload.py); the daemon
    (outpost/daemon.py) tells systemd READY=1 once everything is bound, pings the
    watchdog and
    serves the status endpoint; shutdown must finish within `stop_timeout` seconds or
    `ShutdownTimeoutError` is raised.
    """
    loop = asyncio.get_running_loop()
    store = build_hooks(config, state_dir)
    outbox = build_outbox(store) if config.uplink.enabled or config.sparkplug.enabled else None
    hooks, uplink = build_uplink(config, store, outbox)
    # Authentication and ACLs first: a refusal is decided before any store work.
    security = load_security(config)
    hooks = HookChain([security, hooks])
    broker = Broker(config, hooks, now=loop.time(), queue_page=config.storage.queue_page)
    store_stats = getattr(store, "stats", None)
    if callable(store_stats):  # commit latency, batch sizes, bytes written
        broker.sys.sources["store"] = store_stats
    broker.restore(hooks.restore(), loop.time())
    server = Server(broker, security, ack_hold=config.storage.ack_hold_ms / 1000)
    stop_event = stop or asyncio.Event()
    daemon = Daemon(config, broker, reload_config, stop_timeout=stop_timeout,
                    hard_exit=hard_exit)
    if stop is None:
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop_event.set)
        daemon.install_signals()  # SIGHUP: reload
    addresses = await server.start(list(config.listeners))
    bridge = None
    alarms: AlarmService | None = None
    interop: list[Interop] = []
    history: HistoryRecorder | None = None
    # With the console, the bridge runs even empty: the first device added must start live.
    if config.bridge.device_configs() or config.console.enabled:
        bridge = Bridge(config.bridge, broker, state_dir=state_dir or config.storage.state_dir)
        interop = start_interop(config, bridge, broker, daemon.reloader, outbox,
                                state_dir or config.storage.state_dir)
        alarms = start_alarms(config, bridge, broker, daemon.reloader,
                              state_dir or config.storage.state_dir, interop)
        history = start_history(config, bridge, daemon, state_dir or config.storage.state_dir)
        await bridge.start()
    elif config.sparkplug.enabled or config.homeassistant.enabled:
        log.warning("[sparkplug] / [homeassistant] enabled but [bridge] has no devices: "
                    "nothing to publish")
    if uplink is not None:
        await uplink.start(broker)
    remote_update = build_remote_update(config, state_dir, uplink)
    if remote_update is not None:
        remote_update.start(broker)
    remote_config = _remote_config(config, config_path, state_dir, uplink, daemon, server,
                                   bridge)
    if remote_config is not None:
        remote_config.start(broker)
    certificate = _certificate_watch(config, uplink)
    if certificate is not None:
        certificate.start()
        daemon.board.add_provider("certificate", certificate)
    for name, part, section in (("bridge", bridge, "devices"), ("uplink", uplink, "uplink")):
        if isinstance(part, StatusProvider):  # has status(): replaces the topic watcher's view
            daemon.board.add_provider(section, part)
        reload_part = getattr(part, "reload", None)
        if callable(reload_part):  # reload(its new section) -> None: device maps, uplink rules
            daemon.reloader.register(name, _section_reloader(reload_part, name), sections=(name,))
    console = config.console.enabled and start_console(
        daemon, broker, bridge, config_path, state_dir or config.storage.state_dir, alarms)
    await daemon.start(server.bound)  # the store is open, every listener bound: READY=1
    for address in server.bound:  # "HOST:PORT" for tcp, "HOST:PORT (tls)", "unix:PATH"
        print(f"outpost: listening on {address}", flush=True)
    if daemon.board.status_url is not None:
        print(f"outpost: status on {daemon.board.status_url}", flush=True)
        if console and daemon.http is not None:
            log.info("console on %sconsole/", daemon.board.status_url)
            print(f"outpost: console on {daemon.board.status_url}console/", flush=True)
    if on_ready is not None:
        on_ready(addresses)
    await stop_event.wait()
    async with daemon.shutdown():  # STOPPING=1, and all of this within stop_timeout
        if bridge is not None:
            await bridge.stop()  # statuses go offline while clients are still connected
        if history is not None:  # after the bridge: its last values are in the last flush
            await asyncio.to_thread(history.stop)
        if alarms is not None:
            await alarms.stop()
        for extra in interop:  # after the bridge: the Sparkplug DDEATHs before the NDEATH
            await extra.stop()
        if remote_update is not None:
            await remote_update.stop()
        if remote_config is not None:
            await remote_config.stop()
        if certificate is not None:
            await certificate.stop()
        if uplink is not None:
            await uplink.stop()
        await server.stop()


def start_console(daemon: Daemon, broker: Broker, bridge: Bridge | None,
                  config_path: Path | None, state_dir: Path | None,
                  alarms: AlarmService | None = None) -> bool:
    """Serve the console (with the status endpoint) on the `[status]` listener; the
    configuration's versions are kept in the state directory (else beside the file)."""
    # aiohttp and the console's pages: loaded only when the console is enabled (a few MiB).
    from outpost.console.pages_history import HISTORY  # noqa: PLC0415
    from outpost.console.server import ConsoleParts, ConsoleServer  # noqa: PLC0415

    if config_path is None:
        log.warning("console: not started: it edits the configuration file, and outpost was "
                    "started without --config")
        return False
    history = Path(state_dir) if state_dir is not None else config_path.resolve().parent
    parts = ConsoleParts(daemon.board, broker, bridge, config_path, history,
                         lambda: daemon.reloader.config, daemon.reload, alarms=alarms)

    def endpoint(board: StatusBoard, status: StatusConfig) -> ConsoleServer:
        console = ConsoleServer(parts)
        if daemon.history is not None:  # point history (start_history); unset: off
            console.app[HISTORY] = daemon.history
        daemon.reloader.register("console", console.reload, sections=("console",))
        return console

    daemon.endpoint = endpoint
    return True


def _remote_config(config: Config, config_path: Path | None, state_dir: Path | None,
                   uplink: UplinkService | None, daemon: Daemon, server: Server,
                   bridge: Bridge | None) -> RemoteConfigService | None:
    """Remote configuration (outpost/remote_config.py): applied by the daemon's reload."""
    if uplink is None:
        return None

    def apply() -> list[str]:
        applied = daemon.reload()
        return list(daemon.reloader.last_problems) or ([] if applied else ["refused"])

    health = HealthProbe(lambda: list(server.bound), uplink.status,
                         bridge.status if bridge is not None else None)
    topic = config.remote_config.remote_command_topic(config.gateway_id)
    return build_remote_config(config, config_path, state_dir or config.storage.state_dir,
                               uplink.publish_gateway_status, apply, health,
                               command_local_topics(config.uplink, topic))


def _certificate_watch(config: Config, uplink: UplinkService | None
                       ) -> CertificateWatch | None:
    """The device certificate's expiry and renewal (outpost/certificate_watch.py), when
    `[certificate] cert_file` is set; renewed at the uplink's first address by default."""
    if config.certificate.cert_file is None:
        return None
    remotes = config.uplink.remotes if config.uplink.enabled else []
    cloud = remotes[0].addresses[0] if remotes and remotes[0].addresses else None
    return CertificateWatch(config.certificate, config.gateway_id, cloud,
                            uplink.publish_gateway_status if uplink is not None else None,
                            renew_over_mqtt)


class Interop(Protocol):
    """A part that speaks for the bridge in another ecosystem's terms."""

    def reload(self, bridge: BridgeConfig) -> None: ...

    async def stop(self) -> None: ...


def start_interop(config: Config, bridge: Bridge, broker: Broker, reloader: Reloader,
                  outbox: Outbox | None, state_dir: Path | None = None) -> list[Interop]:
    """The Sparkplug edge node (holding DATA in `outbox`, bdSeq in `state_dir`) and Home
    Assistant discovery, when enabled (call before the bridge starts: they see every status
    it publishes)."""
    parts: list[Interop] = []
    if config.sparkplug.enabled and outbox is not None:
        sparkplug = SparkplugService(config.sparkplug, config.gateway_id, bridge, outbox,
                                     state_dir)
        sparkplug.start()
        parts.append(sparkplug)
    if config.homeassistant.enabled:
        discovery = HomeAssistantDiscovery(config.homeassistant, config.gateway_id, broker,
                                           GatewayInfo(__version__, config.uplink.enabled),
                                           config.alarms)
        discovery.start(config.bridge)
        parts.append(discovery)
        reloader.register("HomeAssistantAlarms",
                          _section_reloader(discovery.reload_alarms, "alarms"),
                          sections=("alarms",))
    for part in parts:
        reloader.register(type(part).__name__, _section_reloader(part.reload, "bridge"),
                          sections=("bridge",))
    return parts


def _section_reloader(reload_part: Callable[[Any], None], section: str) -> Callable[[Config], None]:
    """A reload callback that hands a part only its own section of the new configuration."""

    def apply(config: Config) -> None:
        reload_part(getattr(config, section))

    return apply


def run(
    config: Config,
    state_dir: Path | None = None,
    reload_config: Callable[[], Config] | None = None,
    config_path: Path | None = None,
) -> int:
    """Blocking entry point used by `outpost run` (`reload_config`: what SIGHUP re-reads)."""
    setup_logging(logging.getLogger().level)  # journald under systemd, else stderr
    loop_name = install_event_loop_policy()
    log.info("starting outpost (%s event loop)", loop_name)
    try:
        asyncio.run(serve(config, state_dir, reload_config=reload_config, hard_exit=True,
                          config_path=config_path))
    except OSError as exc:
        print(f"outpost: cannot start: {exc}", file=sys.stderr)
        return 1
    except ConfigError as exc:  # a password file, ACL file or certificate is unusable
        print(f"outpost: cannot start: {exc.source}: invalid", file=sys.stderr)
        for line in exc.errors:
            print(f"  {line}", file=sys.stderr)
        return 2
    except ShutdownTimeoutError:
        return 1
    return 0
