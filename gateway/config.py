"""Validated configuration: one TOML file, pydantic v2 models.

Every section is a model with `extra="forbid"`, so a misspelt key is an error that names its
path (`limits.max_packet_sise: Extra inputs are not permitted`). `load_config` returns a
`Config` or raises `ConfigError` listing every problem with its key path.
"""

from __future__ import annotations

import ipaddress
import tomllib
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from bridge.config import BridgeConfig
from bridge.uplink.config import UplinkConfig

DEFAULT_PORT = 1883


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def parse_host_port(value: str) -> tuple[str, int]:
    """Split `HOST:PORT` (`[v6]:PORT` for IPv6); a bare host gets port 1883."""
    text = value.strip()
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        port_text = rest[1:] if rest.startswith(":") else ""
    elif text.count(":") == 1:
        host, _, port_text = text.partition(":")
    else:
        host, port_text = text, ""
    if not host:
        raise ValueError(f"{value!r}: missing host (expected HOST:PORT)")
    port = DEFAULT_PORT
    if port_text:
        if not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
            raise ValueError(f"{value!r}: port must be a number from 0 to 65535")
        port = int(port_text)
    return host, port


def is_loopback(host: str) -> bool:
    """True for localhost and loopback addresses."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class ListenerConfig(_Section):
    """One TCP listener."""

    bind: str = Field(description="HOST:PORT to listen on; port 0 picks a free port")
    allow_anonymous: bool | None = Field(
        default=None,
        description="clients without a username may connect; default: only on loopback",
    )

    @field_validator("bind")
    @classmethod
    def _check_bind(cls, value: str) -> str:
        parse_host_port(value)
        return value

    @property
    def host(self) -> str:
        return parse_host_port(self.bind)[0]

    @property
    def port(self) -> int:
        return parse_host_port(self.bind)[1]

    @property
    def anonymous_allowed(self) -> bool:
        if self.allow_anonymous is None:
            return is_loopback(self.host)
        return self.allow_anonymous


class LimitsConfig(_Section):
    """Per-broker and per-client bounds."""

    max_connections: Annotated[int, Field(ge=1)] = 1024
    max_packet_size: Annotated[int, Field(ge=64, le=268_435_460)] = 1_048_576
    max_queued_messages: Annotated[int, Field(ge=1)] = 1000
    max_queued_bytes: Annotated[int, Field(ge=1024)] = 16 * 1024 * 1024
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


class StorageConfig(_Section):
    """The SQLite store under the state directory."""

    durability: Literal["full", "normal", "memory"] = Field(
        default="full",
        description='"full": fsync per group commit (survives power loss); "normal": survives '
        'a process crash; "memory": nothing on disk',
    )
    state_dir: Path | None = Field(
        default=None, description="directory of outpost.db; `outpost run --state-dir` overrides"
    )
    commit_interval_ms: Annotated[float, Field(ge=0, le=1000)] = Field(
        default=2.0, description="how long a group commit may wait to gather more work"
    )
    queue_page: Annotated[int, Field(ge=10, le=100_000)] = Field(
        default=1000, description="queued messages per offline session kept in memory"
    )
    max_db_bytes: Annotated[int, Field(ge=1 << 20)] = 2 << 30
    min_free_bytes: Annotated[int, Field(ge=0)] = 64 << 20


class SysConfig(_Section):
    """`$SYS/broker/...` statistics."""

    interval: Annotated[float, Field(ge=0)] = 10.0


class StatusConfig(_Section):
    """The status endpoint: `/` (page), `/status` (JSON), `/metrics` (Prometheus)."""

    enabled: bool = True
    bind: str = Field(
        default="127.0.0.1:8080",
        description="HOST:PORT of the status endpoint; keep it on loopback (no authentication)",
    )
    history: Annotated[int, Field(ge=2, le=10_000)] = Field(
        default=120, description="samples kept per series for the page's sparklines"
    )
    history_interval: Annotated[float, Field(ge=0.1, le=3600)] = Field(
        default=5.0, description="seconds between history samples (and STATUS= updates)"
    )

    @field_validator("bind")
    @classmethod
    def _check_bind(cls, value: str) -> str:
        parse_host_port(value)
        return value

    @property
    def host(self) -> str:
        return parse_host_port(self.bind)[0]

    @property
    def port(self) -> int:
        return parse_host_port(self.bind)[1]


class Config(_Section):
    """The whole outpost configuration file."""

    gateway_id: str = "outpost"
    listeners: list[ListenerConfig] = Field(
        default_factory=lambda: [ListenerConfig(bind=f"127.0.0.1:{DEFAULT_PORT}")]
    )
    limits: LimitsConfig = LimitsConfig()
    storage: StorageConfig = StorageConfig()
    sys: SysConfig = SysConfig()
    status: StatusConfig = StatusConfig()
    bridge: BridgeConfig = BridgeConfig()
    uplink: UplinkConfig = UplinkConfig()


class ConfigError(Exception):
    """The configuration is invalid; `errors` lists `key.path: message` lines."""

    def __init__(self, source: str, errors: list[str]) -> None:
        super().__init__(f"{source}: " + "; ".join(errors))
        self.source = source
        self.errors = errors


def _format_errors(exc: ValidationError) -> list[str]:
    lines = []
    for err in exc.errors():
        path = ".".join(str(part) for part in err["loc"]) or "(top level)"
        message = err["msg"]
        if err["type"] == "literal_error":
            message = f"{message} (got {err['input']!r})"
        lines.append(f"{path}: {message}")
    return lines


def parse_config(
    data: dict[str, object], source: str = "<config>", base_dir: Path | None = None
) -> Config:
    """Validate an already-parsed TOML document (`base_dir`: where included files are)."""
    try:
        return Config.model_validate(data, context={"base_dir": base_dir})
    except ValidationError as exc:
        raise ConfigError(source, _format_errors(exc)) from None


def load_config(path: Path | None) -> Config:
    """Read and validate a TOML file; `None` means the embedded defaults."""
    if path is None:
        return Config()
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(str(path), [f"cannot read file: {exc.strerror}"]) from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(str(path), [f"not valid TOML: {exc}"]) from None
    return parse_config(data, str(path), path.parent)
