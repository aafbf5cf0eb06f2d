"""The Sparkplug edge node attached to the bridge: what the appliance starts and stops.

How this works: `SparkplugService` builds the `EdgeNode` from the `[sparkplug]` section and
the bridge's configuration, registers it as an observer of the bridge (point values, device
statuses), gives it the bridge's write path for DCMDs and the gateway's store-and-forward
outbox to hold DATA in while the primary host is offline, the state directory to keep bdSeq in
(bdseq.py), and runs its MQTT session. A reload of `[bridge]` hands the node the new devices
and points (it births again when it was born).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

from bridge.config import BridgeConfig
from bridge.runtime import Bridge
from bridge.sparkplug.bdseq import BdSeqCounter
from bridge.sparkplug.config import SparkplugConfig
from bridge.sparkplug.hold import OutboxHold
from bridge.sparkplug.node import EdgeNode
from bridge.sparkplug.session import SparkplugSession
from gateway.base.outbox import Outbox


class SparkplugService:
    """The edge node and its session, fed by a running bridge."""

    def __init__(self, config: SparkplugConfig, gateway_id: str, bridge: Bridge,
                 outbox: Outbox, state_dir: Path | None = None,
                 wallclock: Callable[[], float] = time.time) -> None:
        self.bridge = bridge
        node_id = config.node_id(gateway_id)
        self.node = EdgeNode(config, node_id, bridge.config, bridge.prefix, bridge.write,
                             wallclock, OutboxHold(outbox, config.hold_max),
                             BdSeqCounter(state_dir, config.group_id, node_id))
        self.session = SparkplugSession(self.node)

    def start(self) -> None:
        """Observe the bridge and connect (call before the bridge starts, to see every
        status)."""
        self.bridge.observers.append(self.node)
        self.session.start()

    async def stop(self) -> None:
        """NDEATH and disconnect (after the bridge stopped: its DDEATHs go first)."""
        await self.session.stop()
        for task in self.node.tasks:  # DCMD writes in flight
            task.cancel()
        await asyncio.gather(*self.node.tasks, return_exceptions=True)
        if self.node in self.bridge.observers:
            self.bridge.observers.remove(self.node)

    def reload(self, bridge: BridgeConfig) -> None:
        """The bridge's devices or points changed."""
        self.node.configure(bridge, bridge.prefix)
