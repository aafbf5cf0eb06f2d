"""The alarms in the appliance: the service beside the bridge, its journal in the state
directory, and its reloads.

How this works: `start_alarms` builds the `AlarmService` (bridge/alarms/service.py) with an
fsynced journal in the state directory (in memory without one), starts it and adds it to the
bridge's observers, so it sees the first statuses the bridge publishes; call it before
`Bridge.start` (and after the Sparkplug edge node, which it tells every alarm's state).
A reload of `[alarms]` (or of `[bridge]`: the point prefix) is applied live.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

from bridge.alarms.journal import MemoryJournal, SqliteJournal
from bridge.alarms.service import AlarmService
from bridge.runtime import Bridge
from bridge.sparkplug.service import SparkplugService
from gateway.broker.engine.broker import Broker
from outpost.config import Config
from outpost.reload import Reloader

log = logging.getLogger("outpost.alarms")


def start_alarms(config: Config, bridge: Bridge, broker: Broker, reloader: Reloader,
                 state_dir: Path | None, interop: Sequence[object] = ()) -> AlarmService:
    """The started alarm service, observing `bridge`, reloaded with `[alarms]`; the
    Sparkplug edge node among `interop` sees every alarm's state."""
    keep = config.alarms.journal
    if state_dir is not None:
        journal: MemoryJournal = SqliteJournal(Path(state_dir), keep)
    else:
        if config.alarms.rules:
            log.warning("alarms: no state directory: alarm states and unpublished transitions "
                        "do not survive a restart")
        journal = MemoryJournal(keep)
    service = AlarmService(config.alarms, config.bridge.prefix, broker, journal)
    for part in interop:
        if isinstance(part, SparkplugService):
            service.state_observers.append(part.node.alarm)
    service.start()
    bridge.observers.append(service)

    def reload(new: Config) -> None:
        service.prefix = new.bridge.prefix
        service.reload(new.alarms)

    reloader.register("alarms", reload, sections=("alarms", "bridge"))
    return service
