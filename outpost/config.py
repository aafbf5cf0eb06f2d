"""The whole configuration file: the broker's sections plus storage, status, bridge, uplink,
remote_update, remote_config, certificate, sparkplug and homeassistant.

`load_config` returns a `Config` or raises `ConfigError` listing every problem with its key path.
Each package owns its section's model; this module only aggregates them.
"""

from __future__ import annotations

import stat
import tomllib
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, ValidationError, ValidationInfo, field_validator, model_validator

from bridge.alarms.config import AlarmsConfig
from bridge.config import BridgeConfig
from bridge.homeassistant.config import HomeAssistantConfig
from bridge.sparkplug.config import SparkplugConfig, sparkplug_id
from bridge.sparkplug.hold import RULE as HOLD_RULE
from bridge.uplink.config import UplinkConfig
from gateway.base.config_paths import existing_file
from gateway.base.hostport import is_loopback, parse_host_port
from gateway.base.settings import ConfigError, Section, format_errors
from gateway.broker.codec.topics import topic_matches
from gateway.broker.contracts.config import BrokerConfig
from gateway.broker.contracts.passwords import PasswordFileError, parse_password_text
from outpost.certificate_watch import CertificateConfig
from outpost.remote_config_document import RemoteConfigConfig
from outpost.update_command import RemoteUpdateConfig
from storage.config import StorageConfig
from storage.history.config import HistoryConfig

__all__ = ["Config", "ConfigError", "ConsoleConfig", "StatusConfig", "load_config",
           "parse_config", "secret_warnings"]


def password_file(value: Path, info: ValidationInfo) -> Path:
    """An existing password file in the broker's `$7$` format (relative to the config file)."""
    path = existing_file(value, info)
    try:
        parse_password_text(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, PasswordFileError) as exc:
        raise ValueError(f"{path}: {exc}") from None
    return path


class StatusConfig(Section):
    """The status endpoint: `/` (page), `/status` (JSON), `/metrics` (Prometheus)."""

    enabled: bool = True
    # Declared before `bind`, whose check needs them.
    password_file: Path | None = Field(
        default=None, description="users allowed in (HTTP Basic), same format as the broker's "
        "password files (`outpost passwd`)",
    )
    tls_cert: Path | None = Field(default=None, description="certificate chain (PEM): HTTPS")
    tls_key: Path | None = Field(default=None, description="its private key (PEM)")
    bind: str = Field(
        default="127.0.0.1:8080",
        description="HOST:PORT of the status endpoint; off loopback only with password_file "
        "and/or tls_cert + tls_key",
    )
    history: Annotated[int, Field(ge=2, le=10_000)] = Field(
        default=120, description="samples kept per series for the page's sparklines"
    )
    history_interval: Annotated[float, Field(ge=0.1, le=3600)] = Field(
        default=5.0, description="seconds between history samples (and STATUS= updates)"
    )
    watch_topics: bool | None = Field(
        default=None,
        description="read devices and uplink from their topics (docs/message-format.md) "
        "through an in-process link; default: when a bridge or the uplink is configured",
    )

    @field_validator("password_file", "tls_cert", "tls_key")
    @classmethod
    def _file(cls, value: Path | None, info: ValidationInfo) -> Path | None:
        if value is None:
            return None
        if info.field_name == "password_file":
            return password_file(value, info)
        return existing_file(value, info)

    @field_validator("bind")
    @classmethod
    def _check_bind(cls, value: str, info: ValidationInfo) -> str:
        host, _port = parse_host_port(value)
        data = info.data
        if (data.get("tls_cert") is None) != (data.get("tls_key") is None):
            raise ValueError("tls_cert and tls_key go together")
        guarded = data.get("password_file") is not None or data.get("tls_cert") is not None
        if data.get("enabled", True) and not is_loopback(host) and not guarded:
            raise ValueError(
                f"{value} is reachable from the network and the status page, /status and "
                "/metrics have no authentication: set password_file (users, as for the "
                "broker) and/or tls_cert + tls_key, or bind to 127.0.0.1"
            )
        return value

    @property
    def host(self) -> str:
        return parse_host_port(self.bind).host

    @property
    def port(self) -> int:
        return parse_host_port(self.bind).port


class ConsoleConfig(Section):
    """The web console (outpost/console/), served on the `[status]` listener."""

    enabled: bool = False
    password_file: Path | None = Field(
        default=None, description="console users (`outpost passwd`, the broker's format); "
        "only those given a role in `users` can log in")
    users: dict[str, Literal["admin", "operator", "viewer"]] = Field(
        default_factory=dict, description="username -> role: admin changes the configuration, "
        "operator acknowledges alarms and writes points, viewer only looks")
    session_minutes: Annotated[float, Field(gt=0, le=7 * 24 * 60)] = Field(
        default=480, description="a login lasts this long, idle or not")

    @field_validator("password_file")
    @classmethod
    def _users_file(cls, value: Path | None, info: ValidationInfo) -> Path | None:
        return None if value is None else password_file(value, info)

    @model_validator(mode="after")
    def _someone_logs_in(self) -> ConsoleConfig:
        if self.enabled and (self.password_file is None or not self.users):
            raise ValueError("enabled: the console needs password_file and at least one user "
                             "in users (e.g. users = { admin = \"admin\" })")
        return self


class Config(BrokerConfig):
    """The whole outpost configuration file."""

    storage: StorageConfig = StorageConfig()
    status: StatusConfig = StatusConfig()
    console: ConsoleConfig = ConsoleConfig()
    bridge: BridgeConfig = BridgeConfig()
    uplink: UplinkConfig = UplinkConfig()
    remote_update: RemoteUpdateConfig = RemoteUpdateConfig()
    remote_config: RemoteConfigConfig = RemoteConfigConfig()
    certificate: CertificateConfig = CertificateConfig()
    sparkplug: SparkplugConfig = SparkplugConfig()
    homeassistant: HomeAssistantConfig = HomeAssistantConfig()
    history: HistoryConfig = HistoryConfig()
    alarms: AlarmsConfig = AlarmsConfig()

    @field_validator("alarms")
    @classmethod
    def _alarm_points(cls, value: AlarmsConfig, info: ValidationInfo) -> AlarmsConfig:
        bridge = info.data.get("bridge")
        if bridge is not None and value.rules:
            points = {d.name: {p.name for p in d.describe().points}
                      for d in bridge.device_configs()}
            problems = value.unknown_points(points)
            if problems:
                raise ValueError("; ".join(problems))
        return value

    @field_validator("sparkplug")
    @classmethod
    def _sparkplug_fits(cls, value: SparkplugConfig, info: ValidationInfo) -> SparkplugConfig:
        gateway_id = info.data.get("gateway_id")
        if value.enabled and value.edge_node_id is None and gateway_id is not None:
            try:
                sparkplug_id(gateway_id)
            except ValueError as exc:  # the default edge node id is a topic level
                raise ValueError(f"edge_node_id: the gateway_id {exc} (set edge_node_id)"
                                 ) from None
        # The edge node holds DATA in the uplink's outbox under its own rule name.
        uplink = info.data.get("uplink")
        if value.enabled and uplink is not None:
            for index in range(len(uplink.forward)):
                if uplink.rule_name(index) == HOLD_RULE:
                    raise ValueError(f"uplink.forward.{index}: the rule name {HOLD_RULE!r} is "
                                     f"the Sparkplug edge node's; choose another")
        return value

    @field_validator("homeassistant")
    @classmethod
    def _known_devices(cls, value: HomeAssistantConfig, info: ValidationInfo,
                       ) -> HomeAssistantConfig:
        bridge = info.data.get("bridge")
        if bridge is not None:
            names = {d.name for d in bridge.device_configs()}
            for index, device in enumerate(value.devices):
                if device.name not in names:
                    raise ValueError(f"devices.{index}.name: {device.name!r} is not a bridged "
                                     f"device (have {sorted(names)})")
        return value

    @field_validator("uplink")
    @classmethod
    def _status_topics(cls, value: UplinkConfig, info: ValidationInfo) -> UplinkConfig:
        # The default status and diagnostics topics are made from gateway_id: check them
        # here, at load time.
        gateway_id = info.data.get("gateway_id")
        if value.enabled and gateway_id is not None:
            for index, remote in enumerate(value.remotes):
                try:
                    remote.gateway_status_topic(gateway_id)
                    remote.gateway_diagnostics_topic(gateway_id)
                except ValueError as exc:
                    raise ValueError(f"remotes.{index}: {exc}") from None
        return value

    @field_validator("remote_update", "remote_config")
    @classmethod
    def _command_comes_in(cls, value: RemoteUpdateConfig | RemoteConfigConfig,
                          info: ValidationInfo) -> RemoteUpdateConfig | RemoteConfigConfig:
        # Commands reach the gateway only through an inbound rule of the uplink, and the
        # reports go out on the remotes' status topics: both must exist.
        uplink, gateway_id = info.data.get("uplink"), info.data.get("gateway_id")
        if isinstance(value, RemoteConfigConfig) and value.enabled and value.keyring is None:
            raise ValueError("keyring: required: the folder of the public keys a "
                             "configuration must be signed with")
        if not value.enabled or uplink is None or gateway_id is None:
            return value  # (an invalid uplink or gateway_id has its own error)
        if not uplink.enabled:
            raise ValueError("enabled: commands come from the cloud through the uplink; "
                             "enable [uplink] with a remote and an inbound rule")
        try:
            topic = value.remote_command_topic(gateway_id)
        except ValueError as exc:
            raise ValueError(f"command_topic: {exc}") from None
        if not command_local_topics(uplink, topic):
            raise ValueError(
                f"command_topic: no [[uplink.inbound]] rule brings {topic!r} in from the "
                f"remote; add one with filter = {topic!r}")
        if all(remote.gateway_status_topic(gateway_id) is None for remote in uplink.remotes):
            subtopic = "update" if isinstance(value, RemoteUpdateConfig) else "config"
            raise ValueError('enabled: every [[uplink.remotes]] has status_topic = "": the '
                             f"reports go out on <status_topic>/{subtopic}")
        return value


def command_local_topics(uplink: UplinkConfig, remote_topic: str) -> list[str]:
    """The local topics the update command on `remote_topic` arrives at: for each remote, the
    first inbound rule whose filter matches it (as the uplink chooses), mapped."""
    topics: list[str] = []
    for remote in uplink.remotes:
        for rule in uplink.inbound:
            if rule.remote == remote.name and topic_matches(rule.filter, remote_topic):
                local = rule.topic.apply(remote_topic)
                if local not in topics:
                    topics.append(local)
                break
    return topics


def secret_warnings(config: Config, path: Path) -> list[str]:
    """Secrets that others can read: an uplink password in the config file itself, or a
    password or key file, readable by group or others (`outpost check-config` prints them)."""
    warnings: list[str] = []

    def readable_by_others(file: Path) -> str | None:
        try:
            mode = stat.S_IMODE(file.stat().st_mode)
        except OSError:
            return None
        return f"mode {mode:04o}" if mode & 0o044 else None

    for index, remote in enumerate(config.uplink.remotes):
        key = f"uplink.remotes.{index}"
        if remote.password is not None:
            mode = readable_by_others(path)
            where = f"{path} ({mode}: others can read it)" if mode else str(path)
            warnings.append(f"{key}.password: the uplink password is in clear text in {where}; "
                            "move it to password_file (mode 0600) or a systemd credential "
                            "(password_credential, LoadCredential= in the unit)")
        if remote.password_file is not None:
            mode = readable_by_others(remote.password_file)
            if mode:
                warnings.append(f"{key}.password_file: {remote.password_file} ({mode}) can be "
                                "read by others: chmod 600")
    if config.status.tls_key is not None:
        mode = readable_by_others(config.status.tls_key)
        if mode:
            warnings.append(f"status.tls_key: {config.status.tls_key} ({mode}) can be read by "
                            "others: chmod 600")
    return warnings


def parse_config(
    data: dict[str, object], source: str = "<config>", base_dir: Path | None = None
) -> Config:
    """Validate an already-parsed TOML document (`base_dir`: where included files are)."""
    try:
        return Config.model_validate(data, context={"base_dir": base_dir})
    except ValidationError as exc:
        raise ConfigError(source, format_errors(exc, Config)) from None


def load_config(path: Path | None) -> Config:
    """Read and validate a TOML file; `None` means the embedded defaults.

    Relative paths in it are relative to the folder the file really is in: the image's
    /etc/outpost/outpost.toml is a symbolic link into the data partition, where the files it
    names (password file, certificates) were imported beside it."""
    if path is None:
        return Config()
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(str(path), [f"cannot read file: {exc.strerror}"]) from None
    except UnicodeDecodeError as exc:
        raise ConfigError(str(path), [f"not UTF-8 text (byte {exc.start}): TOML files are UTF-8"]
                          ) from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(str(path), [f"not valid TOML: {exc}"]) from None
    return parse_config(data, str(path), config_folder(path))


def config_folder(path: Path) -> Path:
    """The folder relative paths of the configuration file `path` start from (the real file's,
    through any symbolic link)."""
    return path.resolve().parent
