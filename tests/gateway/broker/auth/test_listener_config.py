"""Listener configuration: types, TLS and WebSocket keys, files, names; errors name key paths."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.base.settings import ConfigError
from gateway.broker.contracts.config import listener_labels
from outpost.config import load_config, parse_config


def errors(listeners: list[dict[str, object]], base: Path | None = None) -> list[str]:
    with pytest.raises(ConfigError) as info:
        parse_config({"listeners": listeners}, base_dir=base)
    return info.value.errors


def test_every_type_with_its_keys(tmp_path: Path) -> None:
    for name in ("cert.pem", "key.pem", "ca.pem", "passwd", "acl"):
        (tmp_path / name).write_text("x", encoding="utf-8")
    config_file = tmp_path / "outpost.toml"
    config_file.write_text("""
[[listeners]]
bind = "0.0.0.0:1883"
password_file = "passwd"
acl_file = "acl"

[[listeners]]
type = "tls"
bind = "0.0.0.0:8883"
certfile = "cert.pem"
keyfile = "key.pem"
cafile = "ca.pem"
require_certificate = true
use_identity_as_username = true

[[listeners]]
type = "ws"
bind = "0.0.0.0:8080"
path = "/mqtt"
origins = ["https://dash.local"]

[[listeners]]
type = "wss"
name = "browsers"
bind = "0.0.0.0:8081"
certfile = "cert.pem"
keyfile = "key.pem"
tls_min_version = "1.3"

[[listeners]]
type = "unix"
bind = "/run/outpost/mqtt.sock"
socket_mode = 0o660
""", encoding="utf-8")
    config = load_config(config_file)
    tcp, tls, ws, wss, unix = config.listeners
    assert unix.socket_mode == 0o660 and unix.host == "" and unix.port == 0
    assert tcp.password_file == tmp_path / "passwd"  # relative to the config file
    assert tls.certfile == tmp_path / "cert.pem" and tls.require_certificate
    assert ws.ws_path == "/mqtt" and wss.ws_path == "/mqtt"
    assert [lst.anonymous_allowed for lst in config.listeners] == [False] * 4 + [True]
    assert listener_labels(list(config.listeners)) == [
        "0.0.0.0:1883", "tls:0.0.0.0:8883", "ws:0.0.0.0:8080", "browsers",
        "unix:/run/outpost/mqtt.sock"]


def test_relative_files_are_beside_the_real_file_of_a_symlinked_config(tmp_path: Path) -> None:
    """The image's /etc/outpost/outpost.toml is a symbolic link into the data partition, where
    the files it names were imported beside it: relative paths start from the real file."""
    real = tmp_path / "data" / "outpost"
    real.mkdir(parents=True)
    (real / "passwd").write_text("x", encoding="utf-8")
    (real / "outpost.toml").write_text(
        '[[listeners]]\nbind = "0.0.0.0:1883"\npassword_file = "passwd"\n', encoding="utf-8")
    etc = tmp_path / "etc" / "outpost"
    etc.mkdir(parents=True)
    (etc / "outpost.toml").symlink_to(real / "outpost.toml")
    config = load_config(etc / "outpost.toml")
    assert config.listeners[0].password_file == real / "passwd"


def test_errors_name_key_paths(tmp_path: Path) -> None:
    found = errors([
        {"type": "tls", "bind": "127.0.0.1:0"},
        {"type": "tcp", "bind": "127.0.0.1:0", "certfile": "x.pem", "path": "/mqtt"},
        {"type": "tls", "bind": "127.0.0.1:0", "certfile": "missing.pem", "keyfile": "k.pem",
         "use_identity_as_username": True},
        {"type": "ws", "bind": "127.0.0.1:0", "path": "mqtt", "socket_mode": 0o600},
        {"type": "udp", "bind": "127.0.0.1:0"},
        {"type": "tcp", "bind": "127.0.0.1:0", "password_file": "nope", "name": "link"},
    ], tmp_path)
    text = "\n".join(found)
    for fragment in (
        'listeners.0.certfile: Value error, required for type "tls"',
        'listeners.0.keyfile: Value error, required for type "tls"',
        'listeners.1.certfile: Value error, only for type "tls" or "wss"',
        'listeners.1.path: Value error, only for type "ws" or "wss"',
        f"listeners.2.certfile: Value error, no such file: {tmp_path / 'missing.pem'}",
        "listeners.2.use_identity_as_username: Value error, needs require_certificate = true",
        "listeners.3.path: Value error, a URL path",
        'listeners.3.socket_mode: Value error, only for type "unix"',
        "listeners.4.type: Input should be 'tcp', 'tls', 'ws', 'wss' or 'unix'",
        "listeners.5.password_file: Value error, no such file",
        "listeners.5.name: Value error, must be non-empty and not one of",
    ):
        assert fragment in text, text


def test_require_certificate_needs_a_ca_and_names_are_unique(tmp_path: Path) -> None:
    (tmp_path / "c").write_text("x", encoding="utf-8")
    found = errors([{"type": "tls", "bind": "127.0.0.1:0", "certfile": "c", "keyfile": "c",
                     "require_certificate": True}], tmp_path)
    assert found == ["listeners.0.require_certificate: Value error, needs cafile (the CA that "
                     "signs client certificates)"]
    found = errors([{"bind": "127.0.0.1:0", "name": "lan"}, {"bind": "127.0.0.1:1", "name": "lan"}])
    assert found == ["listeners: Value error, listener names must be unique: lan"]


def test_labels_are_unique_even_for_port_zero() -> None:
    config = parse_config({"listeners": [{"bind": "127.0.0.1:0"}, {"bind": "127.0.0.1:0"},
                                         {"type": "ws", "bind": "127.0.0.1:0"}]})
    assert listener_labels(list(config.listeners)) == [
        "127.0.0.1:0", "127.0.0.1:0#2", "ws:127.0.0.1:0"]


def test_new_limits_validate() -> None:
    with pytest.raises(ConfigError) as info:
        parse_config({"limits": {"connection_rate": -1, "max_topic_levels": 0,
                                 "login_delay": -0.5}})
    paths = sorted(e.split(":")[0] for e in info.value.errors)
    assert paths == ["limits.connection_rate", "limits.login_delay", "limits.max_topic_levels"]


def test_every_listener_key_and_security_limit_is_documented() -> None:
    from gateway.broker.contracts.config import LimitsConfig, ListenerConfig

    text = (Path(__file__).resolve().parents[4] / "docs" / "security.md").read_text("utf-8")
    for key in ListenerConfig.model_fields:
        assert f"`{key}`" in text, key
    new_limits = [k for k in LimitsConfig.model_fields if k.startswith(
        ("max_connections", "connection_", "exempt", "max_pending", "max_subscriptions",
         "max_topic", "login_"))]
    assert len(new_limits) == 14
    for key in new_limits:
        assert f"{key} =" in text, key
    for command in ("outpost passwd", "outpost passwd -D", "outpost passwd --stdin"):
        assert command in text.replace("printf '%s\\n' \"$PW\" | ", ""), command
