"""The edge node's MQTT session: connect with the NDEATH as will, subscribe, relay, send.

How this works: `SparkplugSession.run` keeps one aiomqtt connection to the first address of
`[sparkplug] addresses` that answers (backing off after a full round of failures), over TLS
when `[sparkplug.tls]` is set (the uplink's context builder). Every connection is a new
Sparkplug session: it takes the next bdSeq (persisted, bdseq.py; an attempt that got no
session keeps its number for the next), then clean session, will = NDEATH with that bdSeq
(QoS 1, not retained), subscriptions to NCMD, DCMD and the primary host's STATE, then
`EdgeNode.connected`, which births the node when it may. Messages the node
sends go through one FIFO queue and one sender task, so they leave in the order their `seq`
was given. On a clean shutdown the node publishes the NDEATH itself before the DISCONNECT (a
will is not sent after a DISCONNECT); when the gateway is killed the server publishes the will.
When the primary host goes offline the node publishes its NDEATH and marks the session over:
the session lets the NDEATH leave, disconnects and goes on with the next address (the
Sparkplug rule `tck-id-operational-behavior-edge-node-termination-host-offline-reconnect`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl

import aiomqtt

from bridge.sparkplug.node import EdgeNode
from bridge.uplink.client import tls_context
from gateway.base.hostport import parse_host_port

log = logging.getLogger("outpost.sparkplug")
DRAIN_TIMEOUT = 3.0  # seconds the NDEATH may take to leave at a clean shutdown


class SparkplugSession:
    """The MQTT connection of one edge node."""

    def __init__(self, node: EdgeNode) -> None:
        self.node = node
        self.config = node.config
        self.outgoing: asyncio.Queue[tuple[str, bytes, int, bool]] = asyncio.Queue()
        self.task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Run the session in the background."""
        self.task = asyncio.get_running_loop().create_task(self.run(), name="sparkplug")

    async def stop(self) -> None:
        """NDEATH, DISCONNECT, done."""
        if self.task is None:
            return
        if self.node.send is not None:
            self.node.closing()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.outgoing.join(), DRAIN_TIMEOUT)
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)
        self.task = None

    async def run(self) -> None:
        """Connect, serve, reconnect: until cancelled."""
        delay = self.config.backoff_initial
        while True:
            for address in self.config.addresses:
                try:
                    await self._session(address, self._tls())
                    delay = self.config.backoff_initial
                except (aiomqtt.MqttError, OSError) as exc:  # OSError: TLS files unusable
                    log.warning("sparkplug: %s: %s", address, exc)
            await asyncio.sleep(delay)
            delay = min(delay * 2, self.config.backoff_max)

    def _tls(self) -> ssl.SSLContext | None:
        try:
            return tls_context(self.config.tls)
        except OSError as exc:  # ssl.SSLError too: a file that is not PEM, a key that misfits
            raise OSError(f"[sparkplug.tls] unusable: {exc}") from None

    async def _session(self, address: str, tls: ssl.SSLContext | None) -> None:
        """One Sparkplug session; returns when the node ended it (primary host offline)."""
        node, config = self.node, self.config
        host, port = parse_host_port(address)
        node.new_session()
        will = aiomqtt.Will(node.topics["NDEATH"], node.death_payload(), qos=1, retain=False)
        protocol = (aiomqtt.ProtocolVersion.V5 if config.protocol == 5
                    else aiomqtt.ProtocolVersion.V311)
        client_id = config.client_id or f"{config.group_id}-{node.node_id}"
        async with aiomqtt.Client(
            host, port, identifier=client_id, username=config.username,
            password=config.password, keepalive=config.keepalive, will=will,
            protocol=protocol, clean_session=None if config.protocol == 5 else True,
            tls_context=tls,
        ) as client:
            log.info("sparkplug: edge node %s/%s connected to %s (bdSeq %d)",
                     config.group_id, node.node_id, address, node.bdseq)
            filters = [(node.topics["NCMD"], 1), (node.dcmd_filter, 1)]
            if node.state_topic is not None:
                filters.append((node.state_topic, 1))
            await client.subscribe(filters)
            sender = asyncio.create_task(self._send_all(client))
            try:
                node.connected(self._enqueue)
                async for message in client.messages:
                    try:
                        node.message(str(message.topic), bytes(message.payload))
                    except Exception:  # a bug must not end the session for every message
                        log.exception("sparkplug: %s: message not handled", message.topic)
                    if node.session_over:
                        log.info("sparkplug: NDEATH sent (bdSeq %d); disconnecting from %s",
                                 node.bdseq, address)
                        with contextlib.suppress(TimeoutError):
                            await asyncio.wait_for(self.outgoing.join(), DRAIN_TIMEOUT)
                        break
            finally:
                node.disconnected()
                sender.cancel()
                await asyncio.gather(sender, return_exceptions=True)
                self._discard_outgoing()

    def _enqueue(self, topic: str, payload: bytes, qos: int, retain: bool) -> None:
        self.outgoing.put_nowait((topic, payload, qos, retain))

    async def _send_all(self, client: aiomqtt.Client) -> None:
        while True:
            topic, payload, qos, retain = await self.outgoing.get()
            try:
                await client.publish(topic, payload, qos, retain)
            finally:
                self.outgoing.task_done()

    def _discard_outgoing(self) -> None:
        # What was not sent belongs to the ended session (its seq and bdSeq are gone).
        while not self.outgoing.empty():
            self.outgoing.get_nowait()
            self.outgoing.task_done()
