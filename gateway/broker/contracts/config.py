"""The broker's configuration: listeners, limits and `$SYS`, validated by pydantic v2.

Every section is a model with `extra="forbid"`, so a misspelt key is an error that names its
path (`limits.max_packet_sise: Extra inputs are not permitted`). The appliance's `Config`
(outpost.config) extends `BrokerConfig` with the sections of the other packages.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, ValidationInfo, field_validator

from gateway.base.config_paths import existing_file
from gateway.base.hostport import DEFAULT_PORT, is_loopback, parse_host_port
from gateway.base.settings import Section

ListenerType = Literal["tcp", "tls", "ws", "wss", "unix"]
TLS_TYPES = ("tls", "wss")
WS_TYPES = ("ws", "wss")
# in-process connections (gateway.broker.contracts.auth)
RESERVED_LISTENER_NAMES = ("link", "restored")


class ListenerConfig(Section):
    """One listener (TCP, TLS, WebSocket, secure WebSocket or unix socket) and its auth.

    Files (`password_file`, `acl_file`, certificates) are relative to the config file.
    """

    type: ListenerType = Field(
        default="tcp", description='"tcp", "tls", "ws" (MQTT over WebSocket), "wss", "unix"'
    )
    bind: str = Field(description="HOST:PORT to listen on (port 0 picks a free port); "
                      "for unix: the socket's path")
    name: str | None = Field(
        default=None, description="label in logs and ClientInfo.listener; default: from "
        "type and bind"
    )
    allow_anonymous: bool | None = Field(
        default=None,
        description="clients without a verified username may connect; default: only on "
        "loopback and unix sockets",
    )
    password_file: Path | None = Field(
        default=None, description="mosquitto-style password file (outpost passwd, "
        "mosquitto_passwd)"
    )
    acl_file: Path | None = Field(default=None, description="mosquitto-style ACL file")
    certfile: Path | None = Field(
        default=None, validate_default=True, description="tls/wss: server certificate (PEM)"
    )
    keyfile: Path | None = Field(
        default=None, validate_default=True, description="tls/wss: private key (PEM)"
    )
    cafile: Path | None = Field(
        default=None, description="tls/wss: CA bundle that signs client certificates"
    )
    require_certificate: bool = Field(
        default=False, description="tls/wss: clients must present a certificate signed by cafile"
    )
    use_identity_as_username: bool = Field(
        default=False, description="tls/wss: the client certificate's CN is the username"
    )
    tls_min_version: Literal["1.2", "1.3"] = "1.2"
    path: str | None = Field(default=None, description='ws/wss: URL path (default "/mqtt")')
    origins: list[str] | None = Field(
        default=None, description="ws/wss: allowed browser Origin values (default: any)"
    )
    socket_mode: int | None = Field(
        default=None, description="unix: permission bits of the socket file (default 0o660)"
    )

    @field_validator("bind")
    @classmethod
    def _check_bind(cls, value: str, info: ValidationInfo) -> str:
        if info.data.get("type") == "unix":
            if not value.strip() or "\x00" in value:
                raise ValueError("a unix listener binds to a socket path")
            return value
        parse_host_port(value)
        return value

    @field_validator("name")
    @classmethod
    def _check_name(cls, value: str | None) -> str | None:
        if value is not None and (not value.strip() or value in RESERVED_LISTENER_NAMES):
            raise ValueError(f"must be non-empty and not one of {RESERVED_LISTENER_NAMES}")
        return value

    @field_validator("password_file", "acl_file")
    @classmethod
    def _check_auth_file(cls, value: Path | None, info: ValidationInfo) -> Path | None:
        return None if value is None else existing_file(value, info)

    @field_validator("certfile", "keyfile", "cafile")
    @classmethod
    def _check_tls_file(cls, value: Path | None, info: ValidationInfo) -> Path | None:
        kind = info.data.get("type")
        if kind is None:
            return value
        if kind not in TLS_TYPES:
            if value is not None:
                raise ValueError('only for type "tls" or "wss"')
            return None
        if value is None:
            if info.field_name == "cafile":
                return None
            raise ValueError(f'required for type "{kind}"')
        return existing_file(value, info)

    @field_validator("require_certificate", "use_identity_as_username")
    @classmethod
    def _check_client_certs(cls, value: bool, info: ValidationInfo) -> bool:
        if not value or "type" not in info.data:
            return value
        if info.data["type"] not in TLS_TYPES:
            raise ValueError('only for type "tls" or "wss"')
        if info.field_name == "require_certificate" and info.data.get("cafile") is None:
            raise ValueError("needs cafile (the CA that signs client certificates)")
        if info.field_name == "use_identity_as_username":
            if not info.data.get("require_certificate"):
                raise ValueError("needs require_certificate = true")
            if info.data.get("password_file") is not None:
                raise ValueError("password_file is not used with certificate identities: "
                                 "remove one of them")
        return value

    @field_validator("path")
    @classmethod
    def _check_path(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is not None:
            if info.data.get("type", "ws") not in WS_TYPES:
                raise ValueError('only for type "ws" or "wss"')
            if not value.startswith("/") or any(c in value for c in " ?#\r\n"):
                raise ValueError('a URL path starting with "/", like "/mqtt"')
        return value

    @field_validator("origins")
    @classmethod
    def _check_origins(cls, value: list[str] | None, info: ValidationInfo) -> list[str] | None:
        if value is not None and info.data.get("type", "ws") not in WS_TYPES:
            raise ValueError('only for type "ws" or "wss"')
        return value

    @field_validator("socket_mode")
    @classmethod
    def _check_mode(cls, value: int | None, info: ValidationInfo) -> int | None:
        if value is not None:
            if info.data.get("type", "unix") != "unix":
                raise ValueError('only for type "unix"')
            if not 0 <= value <= 0o777:
                raise ValueError("permission bits between 0 and 0o777")
        return value

    @property
    def host(self) -> str:
        return "" if self.type == "unix" else parse_host_port(self.bind).host

    @property
    def port(self) -> int:
        return 0 if self.type == "unix" else parse_host_port(self.bind).port

    @property
    def ws_path(self) -> str:
        return self.path or "/mqtt"

    @property
    def default_label(self) -> str:
        """`bind` for TCP (as before listener types existed), else `TYPE:bind`."""
        return self.bind if self.type == "tcp" else f"{self.type}:{self.bind}"

    @property
    def anonymous_allowed(self) -> bool:
        if self.allow_anonymous is None:
            return self.type == "unix" or is_loopback(self.host)
        return self.allow_anonymous


def listener_labels(listeners: list[ListenerConfig]) -> list[str]:
    """One unique label per listener (`name`, else `default_label`; repeats get `#2`, ...)."""
    labels: list[str] = []
    for listener in listeners:
        label = listener.name or listener.default_label
        if label in labels:
            count = 2
            while f"{label}#{count}" in labels:
                count += 1
            label = f"{label}#{count}"
        labels.append(label)
    return labels


class LimitsConfig(Section):
    """Per-broker and per-client bounds."""

    max_connections: Annotated[int, Field(ge=1)] = 1024
    max_packet_size: Annotated[int, Field(ge=64, le=268_435_460)] = 1_048_576
    max_queued_messages: Annotated[int, Field(ge=1)] = 1000
    max_queued_bytes: Annotated[int, Field(ge=1024)] = 16 * 1024 * 1024
    max_queued_total_bytes: Annotated[int, Field(ge=0)] = Field(
        default=0, description="bytes queued in memory by all sessions together; past it "
        "persistent sessions spill to the store, other queues apply queue_overflow (0: half "
        "the unit's MemoryMax=, without one a quarter of the RAM)",
    )
    queue_overflow: Literal["drop-oldest", "drop-newest", "reject"] = Field(
        default="drop-oldest",
        description='"reject": v5 publishers get 0x97 quota exceeded (3.1.x: drop-newest)',
    )
    queue_qos0: bool = Field(default=False, description="queue QoS 0 for offline sessions")
    receive_maximum: Annotated[int, Field(ge=1, le=65535)] = 64
    max_inflight: Annotated[int, Field(ge=1, le=65535)] = 64
    topic_alias_maximum: Annotated[int, Field(ge=0, le=65535)] = 32
    max_keepalive: Annotated[int, Field(ge=0, le=65535)] = 0
    connect_timeout: Annotated[float, Field(gt=0)] = 10.0
    max_session_expiry: Annotated[int, Field(ge=0)] = 0xFFFFFFFF
    max_client_id_length: Annotated[int, Field(ge=23, le=65535)] = 256
    # abuse resistance (gateway.broker.contracts.auth, docs/security.md)
    max_connections_per_source: Annotated[int, Field(ge=1)] = Field(
        default=64, description="open connections from one address"
    )
    connection_rate: Annotated[float, Field(ge=0)] = Field(
        default=10.0, description="new connections per second from one address (0: no limit)"
    )
    connection_burst: Annotated[int, Field(ge=1)] = Field(
        default=50, description="new connections one address may open at once"
    )
    exempt_sources: list[str] = Field(
        default_factory=lambda: ["127.0.0.1", "::1"],
        description="addresses exempt from the per-address rate and count limits",
    )
    max_pending_connections: Annotated[int, Field(ge=1)] = Field(
        default=256, description="connections that have not completed CONNECT, all addresses; "
        "when full, the oldest one from the address holding the most is closed to make room"
    )
    max_pending_per_source: Annotated[int, Field(ge=1)] = Field(
        default=8, description="connections from one address that have not completed CONNECT "
        "(exempt_sources excepted)"
    )
    max_pending_bytes: Annotated[int, Field(ge=1024)] = Field(
        default=131_072, description="bytes buffered for a connection before its CONNECT is "
        "complete (a CONNECT carrying a larger will needs more)"
    )
    max_subscriptions_per_client: Annotated[int, Field(ge=1)] = 1000
    max_topic_length: Annotated[int, Field(ge=1, le=65535)] = Field(
        default=4096, description="bytes of a topic name or filter"
    )
    max_topic_levels: Annotated[int, Field(ge=1, le=65535)] = 64
    max_retained_messages: Annotated[int, Field(ge=0)] = Field(
        default=100_000, description="retained messages kept (0: no limit); a new retained "
        "topic over it is refused: v5 QoS 1/2 get 0x97, others are delivered but not retained"
    )
    max_retained_bytes: Annotated[int, Field(ge=0)] = Field(
        default=64 * 1024 * 1024, description="bytes (topics + payloads) of retained "
        "messages (0: no limit)"
    )
    login_delay: Annotated[float, Field(ge=0)] = Field(
        default=0.5, description="seconds the next CONNECT from an address waits after a "
        "failed login; doubles per failure (0: off)"
    )
    login_max_delay: Annotated[float, Field(ge=0)] = 30.0
    login_forget: Annotated[float, Field(gt=0)] = Field(
        default=600.0, description="seconds after the last failure an address is forgiven"
    )


class SysConfig(Section):
    """`$SYS/broker/...` statistics."""

    interval: Annotated[float, Field(ge=0)] = 10.0


class BrokerConfig(Section):
    """What the broker reads: its listeners, limits and `$SYS` interval."""

    gateway_id: str = "outpost"
    listeners: list[ListenerConfig] = Field(
        default_factory=lambda: [ListenerConfig(bind=f"127.0.0.1:{DEFAULT_PORT}")]
    )

    @field_validator("listeners")
    @classmethod
    def _unique_listener_names(cls, value: list[ListenerConfig]) -> list[ListenerConfig]:
        names = [lst.name for lst in value if lst.name is not None]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise ValueError(f"listener names must be unique: {', '.join(repeated)}")
        return value
    limits: LimitsConfig = LimitsConfig()
    sys: SysConfig = SysConfig()
