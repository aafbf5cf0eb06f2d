"""Live reload (SIGHUP, `systemctl reload outpost`): apply a new configuration without a restart.

How this works: `Reloader.reload()` calls the loader it was given (read the TOML file again and
apply the command-line overrides). An invalid file is refused whole: every error is logged with
its key path and the running configuration stays. A valid one is compared with the running one
key by key, and then:

- keys that only a restart can change (`RESTART_ONLY`: the store, the gateway id, the status
  endpoint, and the sockets of the listeners: `LISTENER_SOCKET_KEYS`) keep their running values
  and a warning says so; a listener's password file, ACL file or certificates may change live;
- limits announced to connected v5 clients in their CONNACK (`ANNOUNCED`) may grow live but not
  shrink (a client obeying the old value would be disconnected for it); a lower value waits for
  a restart and a warning says so;
- a change in a section that no registered callback applies (`[status] history`, or `[bridge]`
  when no bridge was started) is logged as taking effect at the next restart;
- every change that remains is logged (`reload: limits.max_inflight: 64 -> 32`; secrets and
  whole tables are not printed), and every registered callback whose sections changed is called
  with the new configuration. Callbacks registered without sections are called on every valid
  reload, changed or not: files that the configuration names (passwords, ACLs, certificates)
  may have changed while the TOML did not. Connections, sessions, queues and the uplink backlog
  are never touched by a reload.

The registry is how components plug in (`outpost/app.py` does the registering):

    reloader.register("broker", broker_reloader(broker), sections=("limits", "sys"))
    reloader.register("bridge", bridge.reload, sections=("bridge",))     # device maps
    reloader.register("Security", security.reload)     # no sections: every SIGHUP (files)

A callback takes the new `Config` and returns nothing; it must apply all of its change or none
of it, and raise to refuse (a `ConfigError` is logged line by line with its key paths, anything
else with its traceback; other callbacks still run). Pure: no I/O here beyond what the loader
and the callbacks do. `reloadable_hooks` finds the broker hooks that have a `reload(config)`;
`hook_reloaders` wraps them so the broker re-decides its READ checks after each.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from gateway.base.settings import ConfigError
from gateway.broker.contracts.hooks import BrokerHooks, HookChain
from gateway.broker.engine.broker import Broker
from outpost.config import Config

log = logging.getLogger("outpost.reload")

ReloadCallback = Callable[[Config], None]

RESTART_ONLY = ("gateway_id", "storage", "status.enabled", "status.bind")
LISTENER_SOCKET_KEYS = ("type", "bind", "name", "path", "socket_mode")
ANNOUNCED = ("limits.receive_maximum", "limits.topic_alias_maximum", "limits.max_packet_size")
_SECRET_WORDS = ("password", "secret", "token", "psk", "private", "key_file")


@dataclass(frozen=True, slots=True)
class Change:
    """One changed key: `path` like `limits.max_inflight`."""

    path: str
    old: Any
    new: Any

    @property
    def section(self) -> str:
        return self.path.split(".", 1)[0]

    def describe(self) -> str:
        if any(word in self.path.lower() for word in _SECRET_WORDS):
            return f"{self.path}: changed (secret, not shown)"
        if isinstance(self.old, dict | list) or isinstance(self.new, dict | list):
            return f"{self.path}: changed"
        return f"{self.path}: {self.old!r} -> {self.new!r}"


def diff(old: BaseModel, new: BaseModel) -> list[Change]:
    """Changed keys between two configurations, nested sections walked, lists compared whole."""
    changes: list[Change] = []
    _diff(old.model_dump(mode="json"), new.model_dump(mode="json"), "", changes)
    return changes


def _diff(old: Any, new: Any, prefix: str, out: list[Change]) -> None:
    if isinstance(old, dict) and isinstance(new, dict):
        for key in sorted(set(old) | set(new), key=str):
            _diff(old.get(key), new.get(key), f"{prefix}{key}.", out)
    elif old != new:
        out.append(Change(prefix.rstrip("."), old, new))


def _with_value(model: BaseModel, path: list[str], value_from: BaseModel) -> BaseModel:
    """`model` with the key at `path` copied from `value_from`."""
    head = path[0]
    if len(path) == 1:
        return model.model_copy(update={head: getattr(value_from, head)})
    inner = _with_value(getattr(model, head), path[1:], getattr(value_from, head))
    return model.model_copy(update={head: inner})


@dataclass(slots=True)
class _Registration:
    name: str
    callback: ReloadCallback
    sections: frozenset[str]


class Reloader:
    """The running configuration and the components that take a new one live."""

    def __init__(self, config: Config, load: Callable[[], Config] | None) -> None:
        self.config = config
        self.load = load
        self.registrations: list[_Registration] = []
        self.reloads = 0  # applied reloads
        self.failures = 0  # refused reloads (invalid file)
        self.last_problems: list[str] = []  # why the last reload was refused or fell short

    def register(self, name: str, callback: ReloadCallback, sections: Iterable[str] = ()) -> None:
        """Call `callback(new_config)` on every reload that changes one of `sections`
        (top-level config keys, e.g. "bridge"); no sections: on every reload with a change."""
        self.registrations.append(_Registration(name, callback, frozenset(sections)))

    def reload(self) -> bool:
        """Re-read and apply; False when the new configuration was refused."""
        if self.load is None:
            log.warning("reload: no configuration file to read (started without --config)")
            return False
        self.last_problems = []
        try:
            new = self.load()
        except ConfigError as exc:
            self.failures += 1
            self.last_problems = [f"{exc.source}: {line}" for line in exc.errors]
            log.error("reload: %s is invalid (%d error%s); keeping the running configuration",
                      exc.source, len(exc.errors), "" if len(exc.errors) == 1 else "s")
            for line in exc.errors:
                log.error("reload: %s", line)
            return False
        old = self.config
        effective = new
        applied: list[Change] = []
        for change in diff(old, new):
            if change.path == "listeners" and _sockets(old) != _sockets(new):
                log.warning("reload: listeners: addresses changed (needs a restart; keeping "
                            "the running listeners)")
                effective = self._keep(effective, old, change.path)
            elif change.path.startswith(RESTART_ONLY):
                log.warning("reload: %s (needs a restart; keeping the running value)",
                            change.describe())
                effective = self._keep(effective, old, change.path)
            elif (change.path in ANNOUNCED and isinstance(change.new, int)
                  and change.new < change.old):
                log.warning("reload: %s (lowering a limit announced to connected clients needs "
                            "a restart; keeping %r)", change.describe(), change.old)
                effective = self._keep(effective, old, change.path)
            else:
                applied.append(change)
        claimed = {section for r in self.registrations for section in r.sections}
        if any(not r.sections for r in self.registrations):
            claimed.add("listeners")  # password / ACL / certificate files: the auth hook
        for change in [c for c in applied if c.section not in claimed]:
            log.warning("reload: %s (nothing applies [%s] live: takes effect at the next "
                        "restart)", change.describe(), change.section)
            effective = self._keep(effective, old, change.path)
            applied.remove(change)
        self.config = effective
        for change in applied:
            log.info("reload: %s", change.describe())
        changed_sections = {change.section for change in applied}
        for registration in self.registrations:
            if registration.sections and not registration.sections & changed_sections:
                continue
            try:
                registration.callback(effective)
            except ConfigError as exc:
                log.error("reload: %s kept its running settings: %s is invalid",
                          registration.name, exc.source)
                for line in exc.errors:
                    log.error("reload: %s", line)
                self.last_problems.append(f"{registration.name}: " + "; ".join(exc.errors))
            except Exception as exc:
                log.exception("reload: %s could not apply the new configuration",
                              registration.name)
                self.last_problems.append(f"{registration.name}: {exc}")
        self.reloads += 1
        log.info("reload: done (%d configuration change(s))", len(applied))
        return True

    @staticmethod
    def _keep(config: Config, old: Config, path: str) -> Config:
        parts = path.split(".")
        # RESTART_ONLY entries are whole keys or sections; walk models only, not lists.
        keep: list[str] = []
        model: Any = old
        for part in parts:
            if not isinstance(model, BaseModel) or part not in type(model).model_fields:
                break
            keep.append(part)
            model = getattr(model, part)
        result = _with_value(config, keep, old)
        assert isinstance(result, Config)
        return result


def _sockets(config: Config) -> list[tuple[Any, ...]]:
    return [tuple(getattr(listener, key, None) for key in LISTENER_SOCKET_KEYS)
            for listener in config.listeners]


def broker_reloader(broker: Broker) -> ReloadCallback:
    """Apply `[limits]` and `[sys]` to a running broker.

    Live: connection count, keepalive, connect timeout, session expiry and client id bounds,
    in-flight window, overflow policy, QoS 0 queueing, `$SYS` interval, and raised announced
    limits. Queue bounds apply to sessions created from now on; existing sessions only grow
    to a larger bound, so a reload never drops a queued message (`Broker.apply_config`).
    """
    return broker.apply_config


def hook_reloaders(broker: Broker) -> Iterator[tuple[str, ReloadCallback]]:
    """The reload callbacks of the broker's hooks (`reloadable_hooks`), each followed by the
    broker deciding again whether deliveries check READ access: a listener that gains an ACL
    must start checking, or its clients keep receiving what the new rules deny."""
    for name, reload_hook in reloadable_hooks(broker.hooks):
        yield name, _then_recheck_access(reload_hook, broker)


def _then_recheck_access(reload_hook: ReloadCallback, broker: Broker) -> ReloadCallback:
    def apply(config: Config) -> None:
        reload_hook(config)  # raises to refuse: the old rules, and the old decision, stay
        broker.access_rules_changed()

    return apply


def reloadable_hooks(hooks: BrokerHooks) -> Iterator[tuple[str, ReloadCallback]]:
    """Hooks (also inside a `HookChain`) that have a `reload(config)` method, e.g. auth/ACL."""
    members = hooks.hooks if isinstance(hooks, HookChain) else [hooks]
    for hook in members:
        if isinstance(hook, HookChain):
            yield from reloadable_hooks(hook)
            continue
        callback = getattr(hook, "reload", None)
        if callable(callback):
            yield type(hook).__name__, callback
