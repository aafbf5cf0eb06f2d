"""The gateway's side of the remote update trigger: take commands, spool them, report.

How this works: an in-process link subscribes to the local topics the uplink's inbound rules
map the remote command topic to (`command_local_topics`). A command counts only when the
uplink's inbound link published it (its client id, on an in-process connection): one from
a local client (which the ACL let publish there) is refused, so only the cloud can trigger
an update. A command is checked (`parse_command`), refused while a request is pending
("busy") or when its id already completed, and otherwise written as the spool's request
file; the root runner (outpost-update.service, started by a path unit) takes it from there.
This process never runs RAUC: it runs as the unprivileged service user.

Reports: once a second the spool's files are looked at (a stat each); when one changed, the
report (the running version; the slot and whether it is committed once this boot's health
check recorded them; the latest request and its state) is published retained
on `<status_topic>/update` of every remote, through the uplink, which publishes it again after
each reconnect. Refusals go to `<status_topic>/update/refused` (not retained) and to the log,
with the client's text clipped and the log lines sampled.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bridge.uplink.hook import INBOUND_CLIENT_ID
from gateway.broker.core.log_sampling import clip, worth_logging
from gateway.broker.core.message import Message
from gateway.broker.engine.broker import Broker
from gateway.broker.engine.links import Link
from outpost import __version__
from outpost.update import release_version
from outpost.update_command import (
    REFUSED_SUBTOPIC,
    STATUS_SUBTOPIC,
    CommandError,
    Spool,
    boot_id,
    now_text,
    parse_command,
    read_json,
    write_json,
)

log = logging.getLogger("outpost.update")

CLIENT_ID = "$outpost-remote-update"
POLL_INTERVAL = 1.0  # seconds between looks at the spool's files

Report = Callable[[str, bytes, bool], None]  # (subtopic, payload, retain)


def published_by_uplink(broker: Broker, message: Message) -> bool:
    """Whether the uplink's inbound link published `message` (asked while the publisher is
    still connected): a network client may choose the link's client id, but it is not the
    in-process link."""
    session = broker.sessions.get(message.origin or "")
    connection = session.connection if session is not None else None
    return (message.origin == INBOUND_CLIENT_ID and connection is not None
            and connection.listener == "link")


class RemoteUpdateService:
    """Takes update commands from the cloud and reports their progress."""

    def __init__(self, local_topics: list[str], gateway_id: str, spool: Spool,
                 report: Report) -> None:
        self.local_topics = local_topics
        self.gateway_id = gateway_id
        self.spool = spool
        self.report = report
        self.link: Link | None = None
        self.broker: Broker | None = None
        self.task: asyncio.Task[None] | None = None
        self.refused = 0
        self._seen: tuple[Any, ...] | None = None
        self._last_state: tuple[Any, Any] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def start(self, broker: Broker) -> None:
        """Subscribe to the command topics and start reporting."""
        self._loop = asyncio.get_running_loop()
        self.broker = broker
        self.link = Link(broker, CLIENT_ID, self._loop.time, self._on_message)
        for topic in self.local_topics:
            self.link.subscribe(topic, qos=1)
        self.task = self._loop.create_task(self._watch(), name="remote-update")
        log.info("remote update: taking commands from the uplink on %s; spool %s",
                 ", ".join(self.local_topics), self.spool.request)

    async def stop(self) -> None:
        """Stop reporting and leave the broker (a pending request stays for the runner)."""
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task
        if self.link is not None:
            self.link.close()

    def _on_message(self, message: Message, qos: int, retain: bool) -> None:
        # Called inside the broker's publish, while the publisher is connected: whether it is
        # the uplink's inbound link is decided now; the work (a file written) happens after.
        assert self._loop is not None and self.broker is not None
        self._loop.call_soon(self.handle, message, published_by_uplink(self.broker, message))

    def handle(self, message: Message, from_uplink: bool) -> None:
        """One command: refused (reported and logged), or spooled for the root runner."""
        if not from_uplink:
            self._refuse(None, "refused: update commands are taken from the cloud through "
                         f"the uplink only, not from local client {clip(message.origin)}",
                         local=True)
            return
        try:
            command = parse_command(message.payload)
        except CommandError as exc:
            self._refuse(exc.request_id, f"invalid command: {exc}")
            return
        try:
            pending = read_json(self.spool.request)
        except ValueError:
            pending = {"id": "(unreadable)"}
        if pending is not None:
            self._refuse(command.id, f"busy: request {clip(str(pending.get('id')))} is still "
                         "being installed; send this one again when it has finished")
            return
        done = self._done().get(command.id)
        if done is not None:
            self._refuse(command.id, f"request {command.id} already completed "
                         f"({done.get('result')} at {done.get('finished')}); not installed "
                         "again: use a new id")
            return
        try:
            write_json(self.spool.request, {"id": command.id, "url": command.url,
                                            "sha256": command.sha256, "accepted": now_text(),
                                            "allow_downgrade": command.allow_downgrade})
        except OSError as exc:
            self._refuse(command.id, f"cannot write {self.spool.request}: {exc.strerror}")
            return
        log.info("remote update: request %s accepted: %s (sha256 %s)", command.id,
                 clip(command.url, 200), command.sha256)
        self.check()

    def _done(self) -> dict[str, dict[str, Any]]:
        try:
            state = read_json(self.spool.state) or {}
        except ValueError:
            return {}
        done = state.get("done")
        return {e["id"]: e for e in done if isinstance(e, dict) and "id" in e} if isinstance(
            done, list) else {}

    def _refuse(self, request_id: str | None, error: str, local: bool = False) -> None:
        self.refused += 1
        if worth_logging(self.refused, 100):
            log.warning("remote update: command %s %s (%d refused so far)",
                        clip(request_id), clip(error, 300), self.refused)
        # A local client can repeat this at will: only the sampled ones reach the cloud.
        if not local or worth_logging(self.refused, 100):
            payload = {"gateway_id": self.gateway_id, "id": request_id, "error": error,
                       "ts": now_text()}
            self.report(REFUSED_SUBTOPIC, json.dumps(payload, sort_keys=True).encode(), False)

    async def _watch(self) -> None:
        while True:
            self.check()
            await asyncio.sleep(POLL_INTERVAL)

    def check(self) -> None:
        """Report when a spool file changed since the last look."""
        seen = tuple(_stat_key(path) for path in
                     (self.spool.request, self.spool.state, self.spool.running))
        if seen == self._seen:
            return
        self._seen = seen
        report = self.current()
        request = report["request"] or {}
        state = (request.get("id"), request.get("state"))
        if state != self._last_state and request:
            self._last_state = state
            log.info("remote update: request %s: %s%s", request.get("id"), request.get("state"),
                     f": {request['error']}" if request.get("error") else "")
        self.report(STATUS_SUBTOPIC, json.dumps(report, sort_keys=True).encode(), True)

    def current(self) -> dict[str, Any]:
        """The report: the running version and slot, the latest request."""
        try:
            state = read_json(self.spool.state) or {}
        except ValueError:
            state = {}
        request = state.get("request")
        try:
            pending = read_json(self.spool.request)
        except ValueError:
            pending = None
        if pending is not None and (request is None or request.get("id") != pending.get("id")):
            request = {"id": pending.get("id"), "url": pending.get("url"),
                       "sha256": pending.get("sha256"), "state": "accepted",
                       "detail": "waiting for the installer", "ts": pending.get("accepted")}
        try:
            running = read_json(self.spool.running) or {}
        except ValueError:
            running = {}
        # Until this boot's health check ran, the file is the previous boot's: its slot and
        # "committed" next to this boot's version would claim a check that has not happened.
        if running.get("boot_id") != boot_id():
            running = {}
        return {
            "gateway_id": self.gateway_id,
            "running": {"version": release_version() or __version__, "outpost": __version__,
                        "slot": running.get("slot"), "committed": running.get("committed"),
                        "checked": running.get("checked")},
            "request": request if isinstance(request, dict) else None,
        }


def _stat_key(path: Path) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path, follow_symlinks=False)
    except OSError:
        return None
    return (st.st_ino, st.st_mtime_ns, st.st_size)
