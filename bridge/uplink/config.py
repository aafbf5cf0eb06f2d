"""Uplink configuration: remotes, forward rules and inbound rules (pydantic v2, pure).

Topic mapping is two steps, applied in order: `strip` removes a leading part of the topic
(when present), then `prefix` is put in front. Forward rules map local → remote, inbound rules
map remote → local:

    local "devices/m1/power", strip "devices/", prefix "site7/meters/"  → "site7/meters/m1/power"
    local "devices/m1/power", prefix "site7/"                          → "site7/devices/m1/power"
    remote "cmd/site7/m1/power/set", strip "cmd/site7/", prefix "devices/"
                                                                       → "devices/m1/power/set"

Besides the configured forward rules, every remote gets one built-in rule (unless its
`diagnostics_topic` is ""): the uplink's own diagnostics, published locally on
`$SYS/outpost/uplink`, go through the outbox to `outpost-diagnostics/<gateway_id>`, so what
the uplink reports during a link outage reaches the cloud once the link is back. With it,
a second built-in rule forwards the alarms' transitions (`alarms/<name>/event`, QoS 1) to
`outpost-alarms/<gateway_id>/<name>/event` (`diagnostics_topic = ""` turns both off).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from gateway.base.config_paths import existing_file
from gateway.base.hostport import parse_host_port
from gateway.broker.codec.errors import MQTTProtocolError
from gateway.broker.codec.topics import validate_topic_filter, validate_topic_name

DEFAULT_STATUS_TOPIC = "outpost-status/{gateway_id}"
DEFAULT_DIAGNOSTICS_TOPIC = "outpost-diagnostics/{gateway_id}"
#: local topic of the uplink's diagnostics (JSON every `status_interval`)
DIAGNOSTICS_LOCAL_TOPIC = "$SYS/outpost/uplink"
#: the local topic the gateway status carries as its `topic` metadata (MQTT 5 remotes)
STATUS_LOCAL_TOPIC = "$SYS/outpost/status"
#: the alarms' transitions (bridge/alarms): a built-in rule per remote forwards them, each
#: with its id, to `outpost-alarms/<gateway_id>/<alarm>/event`
ALARM_EVENTS_FILTER = "alarms/+/event"
#: built-in rule names start with this; configured rules may not
BUILTIN_RULE_PREFIX = "$"
#: caps of the built-in diagnostics rule: weeks of outage at the default 10 s interval
DIAGNOSTICS_MAX_MESSAGES = 200_000
DIAGNOSTICS_MAX_BYTES = 64 << 20
CREDENTIALS_ENV = "CREDENTIALS_DIRECTORY"  # set by systemd for a unit with LoadCredential=


def read_secret(path: Path) -> str:
    """The first line of a secret file, without its line end (the rest is ignored)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    return lines[0] if lines else ""


def _valid_filter(value: str) -> str:
    try:
        validate_topic_filter(value)
    except MQTTProtocolError as exc:
        raise ValueError(exc.reason) from None
    return value


TopicFilter = Annotated[str, AfterValidator(_valid_filter)]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TopicMap(_Section):
    """How a topic is rewritten on its way across the link."""

    strip: str = Field(default="", description="leading part removed when the topic has it")
    prefix: str = Field(default="", description="put in front after stripping")

    def apply(self, topic: str) -> str:
        """The mapped topic (see the module docstring for examples)."""
        if self.strip and topic.startswith(self.strip):
            topic = topic[len(self.strip):]
        return self.prefix + topic


def _topic_for(configured: str | None, default: str, gateway_id: str, key: str) -> str | None:
    """A configured topic ("" is none), else the default made from the gateway id."""
    if configured is not None:
        return configured or None
    topic = default.format(gateway_id=gateway_id)
    try:
        validate_topic_name(topic)
    except MQTTProtocolError as exc:
        raise ValueError(f"the default {key.replace('_', ' ')} {topic!r}: {exc.reason} "
                         f'(set {key}, or "" for none)') from None
    return topic


class TlsConfig(_Section):
    """TLS towards the remote broker."""

    ca_file: Path | None = None
    cert_file: Path | None = None
    key_file: Path | None = None
    insecure: bool = Field(default=False, description="skip hostname verification (tests only)")

    @field_validator("ca_file", "cert_file", "key_file")
    @classmethod
    def _file(cls, value: Path | None, info: ValidationInfo) -> Path | None:
        # relative to the config file, like the listeners' certificates
        return None if value is None else existing_file(value, info)


class RemoteConfig(_Section):
    """One cloud broker, possibly reachable at several addresses (failover in order)."""

    name: str = "cloud"
    addresses: list[str] = Field(min_length=1, description="HOST:PORT, tried in order")
    protocol: Literal[4, 5] = Field(default=5, description="5 (MQTT 5) or 4 (MQTT 3.1.1)")
    client_id: str = "outpost-uplink"
    username: str | None = None
    password: str | None = Field(
        default=None, repr=False,
        description="in clear text in this file: prefer password_file or password_credential",
    )
    password_file: Path | None = Field(
        default=None, description="file whose first line is the password (relative to this file)"
    )
    password_credential: str | None = Field(
        default=None, description="systemd credential with the password (LoadCredential=NAME:"
        "PATH in the unit), read from $CREDENTIALS_DIRECTORY/NAME",
    )
    tls: TlsConfig | None = None
    keepalive: Annotated[int, Field(ge=5, le=65535)] = 60
    inflight: Annotated[int, Field(ge=1, le=65535)] = Field(
        default=32, description="QoS 1 messages in flight towards the remote"
    )
    rate_messages: Annotated[float, Field(ge=0)] = Field(
        default=0.0, description="drain rate cap in messages/s (0: no cap)"
    )
    rate_bytes: Annotated[float, Field(ge=0)] = Field(
        default=0.0, description="drain rate cap in payload bytes/s (0: no cap)"
    )
    batch: Annotated[int, Field(ge=1, le=100_000)] = Field(
        default=256, description="outbox rows read per batch"
    )
    backoff_initial: Annotated[float, Field(gt=0)] = 1.0
    backoff_max: Annotated[float, Field(gt=0)] = 60.0
    status_topic: str | None = Field(
        default=None,
        description='retained gateway status (online/offline, will on a lost link) on this'
        ' remote; default "outpost-status/<gateway_id>", "" for none',
    )

    diagnostics_topic: str | None = Field(
        default=None,
        description="where the uplink's own diagnostics ($SYS/outpost/uplink) go on this"
        ' remote, through the outbox; default "outpost-diagnostics/<gateway_id>", "" for none',
    )

    @field_validator("status_topic", "diagnostics_topic")
    @classmethod
    def _check_status_topic(cls, value: str | None) -> str | None:
        if value:
            try:
                validate_topic_name(value)
            except MQTTProtocolError as exc:
                raise ValueError(exc.reason) from None
        return value

    def gateway_status_topic(self, gateway_id: str) -> str | None:
        """The topic of this gateway's status on the remote, or None when disabled.

        Raises ValueError when the default cannot be made from `gateway_id` (a `+`, `#` or
        U+0000 in it); a configured `status_topic` was checked when it was read.
        """
        return _topic_for(self.status_topic, DEFAULT_STATUS_TOPIC, gateway_id, "status_topic")

    def gateway_diagnostics_topic(self, gateway_id: str) -> str | None:
        """The topic of the uplink's diagnostics on the remote, or None when disabled.

        Raises ValueError like :meth:`gateway_status_topic`.
        """
        return _topic_for(
            self.diagnostics_topic, DEFAULT_DIAGNOSTICS_TOPIC, gateway_id, "diagnostics_topic"
        )

    @field_validator("password_file")
    @classmethod
    def _password_file(cls, value: Path | None, info: ValidationInfo) -> Path | None:
        return None if value is None else existing_file(value, info)

    @field_validator("password_credential")
    @classmethod
    def _credential_name(cls, value: str | None) -> str | None:
        if value is not None and (not value or "/" in value or value in (".", "..")):
            raise ValueError(f"{value!r} is not a credential name (a file name, no '/')")
        return value

    @model_validator(mode="after")
    def _one_password_source(self) -> RemoteConfig:
        given = [name for name in ("password", "password_file", "password_credential")
                 if getattr(self, name) is not None]
        if len(given) > 1:
            raise ValueError(f"give the password one way, not {' and '.join(given)}")
        return self

    def read_password(self) -> str | None:
        """The password, read now from where it is configured (never logged).

        Raises OSError when the file or credential cannot be read (the connection attempt
        fails and is retried).
        """
        if self.password_file is not None:
            return read_secret(self.password_file)
        if self.password_credential is not None:
            directory = os.environ.get(CREDENTIALS_ENV)
            if not directory:
                raise OSError(f"password_credential {self.password_credential!r}: "
                              f"${CREDENTIALS_ENV} is not set (LoadCredential= in the unit)")
            return read_secret(Path(directory) / self.password_credential)
        return self.password

    @field_validator("addresses")
    @classmethod
    def _check_addresses(cls, value: list[str]) -> list[str]:
        for address in value:
            parse_host_port(address)
        return value


class BatchConfig(_Section):
    """Many outbox rows in one PUBLISH (docs/message-format.md, "Batched messages")."""

    max_count: Annotated[int, Field(ge=1, le=65535)] = Field(
        default=1000, description="rows per batch at most"
    )
    max_bytes: Annotated[int, Field(ge=1024, le=16 << 20)] = Field(
        default=65536, description="uncompressed body bytes per batch, about (a larger row "
        "goes alone)",
    )
    max_delay: Annotated[float, Field(gt=0, le=60)] = Field(
        default=1.0, description="seconds a row waits at most for others to share its batch"
    )
    compression: Literal["zstd", "zlib", "none"] = Field(
        default="zstd", description='"zstd" (zlib when the zstandard package is missing), '
        '"zlib" or "none"',
    )
    retained_alone: bool = Field(
        default=False, description="send retained messages one by one, retained on the remote "
        "(false: in batches like the rest, and the remote keeps no retained copy)",
    )


class ForwardRule(_Section):
    """Local messages matching `filter` go to `remote`, mapped by `topic`."""

    name: str = ""
    filter: TopicFilter
    remote: str = "cloud"
    topic: TopicMap = TopicMap()
    qos: Literal[0, 1] = 1
    store_qos0: bool = Field(
        default=True, description="forward QoS 0 messages too (false: stored QoS 1/2 only)"
    )
    order: Literal["oldest-first", "newest-first"] = "oldest-first"
    envelope: Literal["auto", "properties", "json"] = Field(
        default="auto",
        description='"auto": user properties for MQTT 5 remotes, JSON envelope for 3.1.1',
    )
    max_messages: Annotated[int, Field(ge=1)] = 1_000_000
    max_bytes: Annotated[int, Field(ge=1024)] = 512 << 20
    overflow: Literal["drop-oldest", "drop-newest"] = "drop-oldest"
    batch: BatchConfig | None = Field(
        default=None, description="send many rows per PUBLISH (the lander unpacks them)",
    )


class InboundRule(_Section):
    """Remote messages matching `filter` are published locally, mapped by `topic`."""

    filter: TopicFilter
    remote: str = "cloud"
    topic: TopicMap = TopicMap()
    qos: Literal[0, 1, 2] = 1


class UplinkConfig(_Section):
    """The `[uplink]` section."""

    enabled: bool = False
    remotes: list[RemoteConfig] = Field(default_factory=list)
    forward: list[ForwardRule] = Field(default_factory=list)
    inbound: list[InboundRule] = Field(default_factory=list)
    status_interval: Annotated[float, Field(gt=0)] = Field(
        default=10.0, description="seconds between $SYS/outpost/uplink updates"
    )

    @model_validator(mode="after")
    def _check_names(self) -> UplinkConfig:
        names = [remote.name for remote in self.remotes]
        if len(set(names)) != len(names):
            raise ValueError(f"remote names must be unique, got {names}")
        used = [("forward", i, r.remote) for i, r in enumerate(self.forward)]
        used += [("inbound", i, r.remote) for i, r in enumerate(self.inbound)]
        for kind, index, remote in used:
            if remote not in names:
                raise ValueError(
                    f"{kind}.{index}.remote: {remote!r} is not a configured remote (have {names})"
                )
        if self.enabled and not self.remotes:
            raise ValueError("enabled uplink needs at least one [[uplink.remotes]]")
        for index, rule in enumerate(self.forward):
            if rule.name.startswith(BUILTIN_RULE_PREFIX):
                raise ValueError(f"forward.{index}.name: {rule.name!r}: names starting with "
                                 f"{BUILTIN_RULE_PREFIX!r} are the uplink's own")
        return self

    def rule_name(self, index: int) -> str:
        """Stable name of forward rule `index` (its `name` or `forward.<index>`)."""
        return self.forward[index].name or f"forward.{index}"

    def forward_rules(self, gateway_id: str) -> list[tuple[str, ForwardRule]]:
        """Every forward rule as (name, rule): the configured ones, then one built-in rule
        per remote that forwards the uplink's diagnostics to its `diagnostics_topic`.

        Raises ValueError when a default diagnostics topic cannot be made from `gateway_id`.
        """
        rules = [(self.rule_name(i), rule) for i, rule in enumerate(self.forward)]
        for remote in self.remotes:
            try:
                topic = remote.gateway_diagnostics_topic(gateway_id)
            except ValueError as exc:
                raise ValueError(f"uplink remote {remote.name!r}: {exc}") from None
            if topic is None:
                continue
            rules.append((f"{BUILTIN_RULE_PREFIX}alarms.{remote.name}", ForwardRule(
                filter=ALARM_EVENTS_FILTER, remote=remote.name,
                topic=TopicMap(strip="alarms/", prefix=f"outpost-alarms/{gateway_id}/"))))
            rules.append((f"{BUILTIN_RULE_PREFIX}diagnostics.{remote.name}", ForwardRule(
                filter=DIAGNOSTICS_LOCAL_TOPIC, remote=remote.name,
                topic=TopicMap(strip=DIAGNOSTICS_LOCAL_TOPIC, prefix=topic),
                max_messages=DIAGNOSTICS_MAX_MESSAGES, max_bytes=DIAGNOSTICS_MAX_BYTES,
                overflow="drop-oldest",
            )))
        return rules
