"""The gateway's side of remote configuration: take a signed configuration, apply it, check
health, and roll back by itself when it does not come back.

How this works: an in-process link subscribes to the local topics the uplink's inbound rules
map `outpost-cmd/<gateway_id>/config` to; as for update commands, only a message the uplink's
inbound link published counts. A message is refused (reported, logged, the running
configuration untouched) when it is too large, its signature does not verify with a key of
the keyring, it is for another gateway, its version is not above the highest this gateway
took (a replay), or the configuration fails the checks of `outpost check-config` (or would
change the gateway id, or turn remote configuration off: both need a hand on the device).
A document that carries a named part (devices, forward rules) rather than the whole file is
merged into the running file first (outpost/remote_config_parts.py), and the merged file goes
the same way; a part that holds anything else, or cannot be merged, is refused.

A configuration that passes is written through the configuration store (outpost.toml
atomically, the previous versions kept) and applied by the reload path; then the health
check (outpost/remote_config_health.py) waits, within `health_deadline`, for the listeners,
the uplink and the devices that answered before. When the reload fails or health does not
come back, the previous version is written back and reloaded: "rolled back", with the reason.

The progress ("applying") and the outcome ("applied", "refused", "rolled back") are published
retained on `<status_topic>/config` of every remote, with the running configuration's version
and sha256; the highest version taken and an apply in progress are kept in
`remote-config.json` in the state directory, so that a gateway that restarts in the middle
of an apply checks its health and finishes (or rolls back) when it is up again.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gateway.base.settings import ConfigError
from gateway.broker.core.log_sampling import clip, worth_logging
from gateway.broker.core.message import Message
from gateway.broker.engine.broker import Broker
from gateway.broker.engine.links import Link
from gateway.broker.net.security_files import listener_file_errors
from outpost.config import Config, config_folder, parse_config
from outpost.config_store import ConfigStore, ConfigStoreError
from outpost.remote_config_document import (
    STATUS_SUBTOPIC,
    ConfigDocument,
    DocumentError,
    RemoteConfigConfig,
    parse_signed,
)
from outpost.remote_config_health import Before, HealthProbe
from outpost.remote_config_parts import WHOLE, PartError, merge_part
from outpost.remote_update import published_by_uplink
from outpost.update_command import now_text, read_json, write_json

log = logging.getLogger("outpost.remote_config")

CLIENT_ID = "$outpost-remote-config"
STATE_FILE = "remote-config.json"

Report = Callable[[str, bytes, bool], None]  # (subtopic, payload, retain)
Apply = Callable[[], list[str]]  # reload the file on disk; the problems (empty: applied)


def check_text(text: str, path: Path) -> tuple[Config | None, list[str]]:
    """The checks of `outpost check-config` on `text` as if it were the file `path` (relative
    paths from its folder): the configuration and no errors, or None and every error."""
    source = str(path)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        return None, [f"not valid TOML: {exc}"]
    try:
        config = parse_config(data, source, config_folder(path))
    except ConfigError as exc:
        return None, list(exc.errors)
    errors = listener_file_errors(enumerate(config.listeners))
    return (None, errors) if errors else (config, [])


class RemoteConfigService:
    """Takes configurations from the cloud, applies them, rolls them back when unhealthy."""

    def __init__(self, settings: RemoteConfigConfig, gateway_id: str, local_topics: list[str],
                 store: ConfigStore, state_dir: Path, apply: Apply, health: HealthProbe,
                 report: Report) -> None:
        self.settings = settings
        self.gateway_id = gateway_id
        self.local_topics = local_topics
        self.store = store
        self.state_file = state_dir / STATE_FILE
        self.apply = apply
        self.health = health
        self.report = report
        self.link: Link | None = None
        self.broker: Broker | None = None
        self.busy = False
        self.refused = 0
        self.task: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    # -- life ------------------------------------------------------------------------------

    def start(self, broker: Broker) -> None:
        """Subscribe to the command topics; report the running configuration; finish an
        apply a restart interrupted."""
        self._loop = asyncio.get_running_loop()
        self.broker = broker
        self.link = Link(broker, CLIENT_ID, self._loop.time, self._on_message)
        for topic in self.local_topics:
            self.link.subscribe(topic, qos=1)
        state = self._state()
        pending = state.get("applying")
        if isinstance(pending, dict):
            self.busy = True
            self.task = self._loop.create_task(self._resume(pending), name="remote-config")
        else:
            self._publish(state.get("last") or {"state": "running"})
        log.info("remote configuration: taking signed configurations from the uplink on %s",
                 ", ".join(self.local_topics))

    async def stop(self) -> None:
        """Leave the broker; an apply in progress is finished at the next start."""
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task
        if self.link is not None:
            self.link.close()

    def _on_message(self, message: Message, qos: int, retain: bool) -> None:
        # As for update commands: whether the publisher is the uplink's inbound link is
        # decided now, while it is connected; the work happens after the publish.
        assert self._loop is not None and self.broker is not None
        self._loop.call_soon(self.handle, message.payload,
                             published_by_uplink(self.broker, message), message.origin)

    # -- one message -----------------------------------------------------------------------

    def handle(self, payload: bytes, from_uplink: bool, origin: str | None = None) -> None:
        """Check one message; refuse it, or start applying it."""
        if not from_uplink:
            self._refuse(None, None, "configurations are taken from the cloud through the "
                         f"uplink only, not from local client {clip(origin)}", local=True)
            return
        if self.busy:
            self._refuse(None, None, "busy: another configuration is being applied; send "
                         "this one again when it has finished")
            return
        try:
            signed = parse_signed(payload, self._keyring(), self.gateway_id,
                                  self.settings.max_bytes)
        except DocumentError as exc:
            self._refuse(exc.version, exc.request_id, str(exc))
            return
        document = signed.document
        taken = int(self._state().get("version") or 0)
        if document.version <= taken:
            self._refuse(document.version, document.id,
                         f"replay: version {document.version} is not above {taken}, the "
                         "highest this gateway took", document.part)
            return
        try:
            text, base_sha256 = self._new_text(document)
        except PartError as exc:
            self._remember(document.version)
            self._refuse(document.version, document.id, str(exc), document.part)
            return
        config, errors = check_text(text, self.store.path)
        if config is not None:
            errors = self._keeps_control(config)
        if errors:
            reason = "invalid configuration: " + "; ".join(errors[:5]) + (
                f" (and {len(errors) - 5} more)" if len(errors) > 5 else "")
            with contextlib.suppress(ConfigStoreError, OSError):
                self.store.record_refused(text, _source(document), reason)
            self._remember(document.version)
            self._refuse(document.version, document.id, reason, document.part)
            return
        assert config is not None
        self.busy = True
        self._remember(document.version)
        assert self._loop is not None
        self.task = self._loop.create_task(self._apply(document, text, base_sha256, config),
                                           name="remote-config")

    def _new_text(self, document: ConfigDocument) -> tuple[str, str | None]:
        """The whole file the document asks for, and for a part the sha256 of the running
        file it was merged into (the write is refused if that file changed meanwhile)."""
        if document.part == WHOLE:
            return document.config, None
        running = self.store.current()
        if not running.text:
            raise PartError(f"{self.store.path}: no running file to merge part "
                            f"{document.part!r} into (started without one)")
        return merge_part(running.text, document.part, document.config), running.sha256

    def _keeps_control(self, config: Config) -> list[str]:
        running = self.store.current()
        problems = []
        if config.gateway_id != self.gateway_id:
            problems.append(f"gateway_id: {config.gateway_id!r} is not this gateway's "
                            f"{self.gateway_id!r} (an identity changes on the device only)")
        if not config.remote_config.enabled:
            problems.append("remote_config.enabled: false would cut this gateway off from "
                            "remote configuration; change that on the device")
        elif not running.text:
            problems.append(f"{self.store.path}: no file to replace (started without one)")
        return problems

    # -- applying --------------------------------------------------------------------------

    async def _apply(self, document: ConfigDocument, text: str, base_sha256: str | None,
                     config: Config) -> None:
        try:
            before = self.health.before()
            try:
                version = self.store.write(
                    text, _source(document),
                    expected_sha256=base_sha256 or self.store.current().sha256)
            except (ConfigStoreError, OSError) as exc:
                self._refuse(document.version, document.id, f"not written: {exc}",
                             document.part)
                return
            facts = {"version": document.version, "id": document.id, "part": document.part,
                     "sha256": version.sha256, "local_version": version.number,
                     "started": now_text(), "devices_before": sorted(before.devices_online)}
            self._save(applying=facts)
            self._publish({**_public(facts), "state": "applying"})
            log.info("remote configuration: version %d (%s) written as local version %d; "
                     "applying", document.version, document.id, version.number)
            await self._settle(facts, self._devices(config), before.devices_online)
        finally:
            self.busy = False

    async def _resume(self, facts: dict[str, Any]) -> None:
        """A restart interrupted an apply: check health now, roll back if it fails."""
        log.warning("remote configuration: version %s was being applied when the gateway "
                    "stopped; checking its health now", facts.get("version"))
        try:
            current = self.store.current()
            if current.sha256 != facts.get("sha256"):  # never reached the file: nothing to do
                self._finish(facts, "rolled back", "the gateway stopped before the new "
                             "configuration was in place")
                return
            config, _ = check_text(current.text, self.store.path)
            devices = self._devices(config) if config is not None else set()
            await self._settle(facts, devices, frozenset(facts.get("devices_before") or []),
                               applied_already=True)
        finally:
            self.busy = False

    async def _settle(self, facts: dict[str, Any], devices: set[str],
                      devices_before: frozenset[str], applied_already: bool = False) -> None:
        problems = [] if applied_already else self.apply()
        if problems:
            reason = "the reload failed: " + "; ".join(problems)
        else:
            problems = await self.health.wait_healthy(Before(devices_before), devices,
                                                      self.settings.health_deadline)
            reason = (f"not healthy within {self.settings.health_deadline:g} s: "
                      + "; ".join(problems)) if problems else ""
        if not problems:
            with contextlib.suppress(ConfigStoreError, OSError):
                self.store.set_result(int(facts["local_version"]), "applied")
            self._finish(facts, "applied", "")
            log.info("remote configuration: version %s applied and healthy", facts["version"])
            return
        log.error("remote configuration: version %s: %s; rolling back", facts["version"],
                  reason)
        try:
            restored = self.store.rollback(reason=reason)
        except (ConfigStoreError, OSError) as exc:
            self._finish(facts, "rolled back", f"{reason}; the rollback failed: {exc}")
            return
        after = self.apply()
        with contextlib.suppress(ConfigStoreError, OSError):
            self.store.set_result(restored.number, "applied",
                                  "" if not after else "; ".join(after))
        note = f" (the reload of the previous version reported: {'; '.join(after)})" \
            if after else ""
        self._finish(facts, "rolled back", reason + note)

    def _finish(self, facts: dict[str, Any], result: str, reason: str) -> None:
        outcome = {**_public(facts), "state": result, "reason": reason,
                   "finished": now_text()}
        self._save(applying=None, last=outcome)
        self._publish(outcome)

    @staticmethod
    def _devices(config: Config) -> set[str]:
        """The devices the configuration runs (every family; a disabled one is not expected
        to answer)."""
        return {d.name for d in config.bridge.device_configs() if d.enabled}

    # -- reports and state -----------------------------------------------------------------

    def _refuse(self, version: int | None, request_id: str | None, reason: str,
                part: str | None = None, local: bool = False) -> None:
        self.refused += 1
        if worth_logging(self.refused, 100):
            log.warning("remote configuration: version %s (%s) refused: %s (%d refused so "
                        "far)", version, clip(request_id), clip(reason, 300), self.refused)
        if local and not worth_logging(self.refused, 100):
            return
        self._publish({"state": "refused", "version": version, "id": request_id,
                       "part": part, "reason": reason, "finished": now_text()})

    def _publish(self, event: dict[str, Any]) -> None:
        current = self.store.current()
        taken = self._state()
        payload = {"gateway_id": self.gateway_id, "ts": now_text(), **event,
                   "running": {"version": (taken.get("running") or {}).get("version"),
                               "sha256": current.sha256, "local_version": current.version}}
        self.report(STATUS_SUBTOPIC, json.dumps(payload, sort_keys=True).encode(), True)

    def _state(self) -> dict[str, Any]:
        try:
            return read_json(self.state_file) or {}
        except ValueError as exc:
            log.error("remote configuration: %s; starting from an empty state", exc)
            return {}

    def _remember(self, version: int) -> None:
        state = self._state()
        state["version"] = max(int(state.get("version") or 0), version)
        write_json(self.state_file, state)

    def _save(self, **changes: Any) -> None:
        state = self._state()
        state.update(changes)
        last = changes.get("last")
        if isinstance(last, dict) and last.get("state") == "applied":
            state["running"] = {"version": last.get("version"), "sha256": last.get("sha256")}
        write_json(self.state_file, state)

    def _keyring(self) -> Path:
        assert self.settings.keyring is not None  # the configuration check requires it
        return self.settings.keyring


def _public(facts: dict[str, Any]) -> dict[str, Any]:
    return {key: facts.get(key) for key in ("version", "id", "part", "sha256", "local_version")}


def _source(document: ConfigDocument) -> str:
    """How the history names a version from the cloud: remote:12, remote:13:devices."""
    return f"remote:{document.version}" + ("" if document.part == WHOLE else
                                           f":{document.part}")


def build_remote_config(config: Config, config_path: Path | None, state_dir: Path | None,
                        report: Report | None, apply: Apply, health: HealthProbe,
                        local_topics: list[str]) -> RemoteConfigService | None:
    """The service when `[remote_config]` is enabled and it has what it needs: the file it
    rewrites (`--config`), a state directory for the history, the uplink for the reports."""
    if not config.remote_config.enabled or report is None:
        return None
    if config_path is None or state_dir is None:
        log.error("remote configuration: disabled: it needs the configuration file (--config) "
                  "and a state directory (--state-dir or [storage] state_dir)")
        return None
    store = ConfigStore(config_path, state_dir, keep=config.remote_config.keep)
    return RemoteConfigService(config.remote_config, config.gateway_id, local_topics, store,
                               state_dir, apply, health, report)
