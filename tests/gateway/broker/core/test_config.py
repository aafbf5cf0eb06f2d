"""Configuration validation names the key path of every error."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.base.hostport import parse_host_port
from gateway.base.settings import ConfigError
from outpost.config import Config, load_config, parse_config


def test_defaults_listen_on_loopback_only_with_anonymous() -> None:
    config = Config()
    assert [(lst.host, lst.port, lst.anonymous_allowed) for lst in config.listeners] == [
        ("127.0.0.1", 1883, True)
    ]


def test_anonymous_refused_by_default_off_loopback() -> None:
    config = parse_config({"listeners": [{"bind": "0.0.0.0:1883"}, {"bind": "[::1]:1884"}]})
    assert [lst.anonymous_allowed for lst in config.listeners] == [False, True]


def test_every_error_is_reported_with_its_path() -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(
            {
                "limits": {"max_packet_sise": 10, "queue_overflow": "drop-random",
                           "max_connections": 0},
                "listeners": [{"bind": "host:99999"}],
            }
        )
    errors = "\n".join(info.value.errors)
    assert "limits.max_packet_sise: Extra inputs are not permitted" in errors
    assert "limits.queue_overflow:" in errors and "'drop-random'" in errors
    assert "limits.max_connections:" in errors
    assert "listeners.0.bind:" in errors and "port must be a number" in errors
    assert len(info.value.errors) == 4


def test_load_config_reports_toml_syntax_and_missing_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[limits\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(bad)
    with pytest.raises(ConfigError, match="cannot read file"):
        load_config(tmp_path / "missing.toml")


@pytest.mark.parametrize(
    ("text", "expected"),
    [("127.0.0.1:1883", ("127.0.0.1", 1883)), ("localhost", ("localhost", 1883)),
     ("[::1]:0", ("::1", 0)), ("0.0.0.0:8883", ("0.0.0.0", 8883))],
)
def test_parse_host_port(text: str, expected: tuple[str, int]) -> None:
    assert parse_host_port(text) == expected
