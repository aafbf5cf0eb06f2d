"""The uplink service: one `RemoteLink` per remote, status reporting, start and stop.

How this works: the composition layer creates the outbox and the `UplinkHook` before the broker
(the hook must see every publish), then `UplinkService.start` once the broker runs. The service
wakes the drain loops when the hook appends and publishes `$SYS/outpost/uplink` (JSON, the cloud
contract's fields) every `status_interval`, the first time once every link's first connection
attempt has ended (a report taken while the links are still connecting would say
"disconnected" at every start). A built-in forward rule per remote carries these reports
through the outbox to the cloud. `publish_gateway_status` hands a gateway status subtopic (the
remote update trigger's reports) to every link. Each link logs the backlog (messages, bytes,
oldest age, drops so far) when it connects or loses its connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from typing import Any

from bridge.uplink.client import RemoteLink
from bridge.uplink.config import DIAGNOSTICS_LOCAL_TOPIC, RemoteConfig, UplinkConfig
from bridge.uplink.hook import INBOUND_CLIENT_ID, UplinkHook
from gateway.base.outbox import Outbox
from gateway.broker.engine.broker import Broker
from gateway.broker.engine.links import Link

log = logging.getLogger("outpost.uplink")

STATUS_TOPIC = DIAGNOSTICS_LOCAL_TOPIC
FIRST_REPORT_WAIT = 30.0  # seconds the first report waits for the first connection attempts


class UplinkService:
    """Runs the uplink next to the broker."""

    def __init__(
        self, config: UplinkConfig, outbox: Outbox, hook: UplinkHook, gateway_id: str
    ) -> None:
        self.config = config
        self.outbox = outbox
        self.hook = hook
        self.gateway_id = gateway_id
        self.wake = asyncio.Event()
        self.links: list[RemoteLink] = []
        self.tasks: list[asyncio.Task[None]] = []  # the status report, a reconnect
        self.link_tasks: list[asyncio.Task[None]] = []  # one per link, in the links' order
        self.inbound: Link | None = None
        self.status_link: Link | None = None

    async def start(self, broker: Broker) -> None:
        """Connect every remote and start reporting."""
        if not self.config.enabled:
            return
        loop = asyncio.get_running_loop()
        self.hook.on_append = self.wake.set
        if self.config.inbound:
            self.inbound = Link(broker, INBOUND_CLIENT_ID, loop.time)
        self.status_link = Link(broker, "$outpost-uplink-status", loop.time)
        for remote in self.config.remotes:
            link = RemoteLink(
                self.config, remote, self.outbox, self.gateway_id, self.inbound, self.wake
            )
            self.links.append(link)
            self.link_tasks.append(loop.create_task(link.run(), name=f"uplink-{remote.name}"))
        self.tasks.append(loop.create_task(self._report(), name="uplink-status"))
        log.info(
            "uplink: %d remote(s), %d forward rule(s), %d inbound rule(s); backlog %d message(s)",
            len(self.config.remotes), len(self.config.forward), len(self.config.inbound),
            self.outbox.stats().messages,
        )

    def publish_gateway_status(self, subtopic: str, payload: bytes, retain: bool) -> None:
        """Publish on `<status_topic>/<subtopic>` of every remote that has a status topic
        (retained: kept and published again after every reconnect)."""
        for link in self.links:
            link.offer_status(subtopic, payload, retain)

    def status(self) -> dict[str, Any]:
        """Backlog and link figures (contract fields plus per-remote details)."""
        stats = self.outbox.stats()
        now_ms = int(time.time() * 1000)
        rate = sum(link.status.rate for link in self.links)
        return {
            "ts": now_ms,
            "connected": any(link.status.connected for link in self.links),
            "backlog_messages": stats.messages,
            "backlog_bytes": stats.bytes,
            "oldest_age_s": None if stats.oldest_ms is None else (now_ms - stats.oldest_ms) / 1000,
            "dropped": stats.dropped,
            "drain_rate": round(rate, 1),
            "eta_s": round(stats.messages / rate, 1) if rate > 0 else None,
            "remotes": [
                {
                    "name": link.status.remote, "connected": link.status.connected,
                    "address": link.status.address, "sent": link.status.sent,
                    "acked": link.status.acked, "refused": link.status.refused,
                    "inflight": len(link.inflight),
                }
                for link in self.links
            ],
        }

    def reload(self, new: UplinkConfig) -> None:
        """SIGHUP: forward and inbound rules change live; changed remotes are connected
        again (the old links stop first: their `offline`, then the new links' `online`);
        `enabled` at the next restart."""
        if new.enabled != self.config.enabled:
            log.warning("uplink: [uplink] enabled changed: takes effect at restart")
            new = new.model_copy(update={"enabled": self.config.enabled})
        reconnect = new.remotes != self.config.remotes and bool(self.links)
        self.hook.apply(new)
        self.config = new
        for link in self.links:
            link.config = new  # inbound subscriptions follow at the next reconnect
        log.info("uplink: %d forward rule(s), %d inbound rule(s) after reload",
                 len(new.forward), len(new.inbound))
        if reconnect:
            log.warning("uplink: [uplink] remotes changed: reconnecting")
            old_links, old_tasks = self.links, self.link_tasks
            # The new links are in place at once (not connected yet): nobody reads the old
            # links' "connected" once the configuration that made them is gone.
            self.links = [self._link(remote, old_links) for remote in new.remotes]
            self.link_tasks = []
            self.tasks.append(asyncio.get_running_loop().create_task(
                self._replace_links(old_tasks), name="uplink-reconnect"))

    def _link(self, remote: RemoteConfig, old: list[RemoteLink]) -> RemoteLink:
        link = RemoteLink(self.config, remote, self.outbox, self.gateway_id, self.inbound,
                          self.wake)
        for previous in old:  # the retained gateway statuses go out again on the new link
            for subtopic, payload in previous.status_retained.items():
                link.offer_status(subtopic, payload, True)
        return link

    async def _replace_links(self, old_tasks: list[asyncio.Task[None]]) -> None:
        for task in old_tasks:
            task.cancel()
        for task in old_tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        loop = asyncio.get_running_loop()
        for link in self.links:
            self.link_tasks.append(loop.create_task(link.run(),
                                                    name=f"uplink-{link.remote.name}"))

    async def _report(self) -> None:
        attempts = [link.attempted.wait() for link in self.links]
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.gather(*attempts), FIRST_REPORT_WAIT)
        while True:
            if self.status_link is not None:
                payload = json.dumps(self.status(), separators=(",", ":")).encode()
                self.status_link.publish(STATUS_TOPIC, payload, 0, True)
            await asyncio.sleep(self.config.status_interval)

    async def stop(self) -> None:
        """Cancel the links (unacknowledged records stay in the outbox); a connected link
        publishes the retained gateway status `offline` before it disconnects."""
        tasks = [*self.tasks, *self.link_tasks]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self.tasks.clear()
        self.link_tasks.clear()
        for link in (self.inbound, self.status_link):
            if link is not None:
                link.close()
