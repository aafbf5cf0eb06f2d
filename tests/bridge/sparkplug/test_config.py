"""`[sparkplug]` errors name their key path."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from bridge.sparkplug.config import SparkplugConfig
from bridge.sparkplug.session import SparkplugSession
from outpost.config import ConfigError, parse_config


@pytest.mark.parametrize(("section", "expected"), [
    ({"enabled": True, "group_id": "a/b"}, "sparkplug.group_id: Value error, 'a/b': must be"),
    ({"enabled": True, "primary_host": "#"}, "sparkplug.primary_host: Value error, '#'"),
    ({"enabled": True, "addresses": []}, "sparkplug.addresses: Value error, needs at least one"),
    ({"enabled": True, "hold_max": -1}, "sparkplug.hold_max:"),
    ({"enabled": True, "qos": 1}, "sparkplug.qos:"),
    ({"enabled": True, "tls": {"ca_file": "/nonexistent/ca.crt"}}, "sparkplug.tls.ca_file:"),
    ({"enabled": True, "tls": {"cert": "c.crt"}}, "sparkplug.tls.cert:"),
    ({"enabled": True, "dbirth_wait": -1}, "sparkplug.dbirth_wait:"),
    ({"enabled": True, "gateway_id": "site/7"},
     "sparkplug: Value error, edge_node_id: the gateway_id 'site/7': must be"),
])
def test_bad_sparkplug_keys(section: dict[str, object], expected: str) -> None:
    gateway_id = section.pop("gateway_id", "outpost")
    with pytest.raises(ConfigError) as caught:
        parse_config({"gateway_id": gateway_id, "sparkplug": section})
    assert any(line.startswith(expected) for line in caught.value.errors), caught.value.errors


def test_the_hold_rule_name_is_reserved() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config({"sparkplug": {"enabled": True}, "uplink": {
            "remotes": [{"addresses": ["127.0.0.1:1883"]}],
            "forward": [{"name": "sparkplug", "filter": "#"}]}})
    assert any("uplink.forward.0: the rule name 'sparkplug' is the Sparkplug" in line
               for line in caught.value.errors), caught.value.errors


def test_unusable_tls_files_are_named(tmp_path: Path) -> None:
    """A certificate file that exists (check-config passes) but is not PEM: each connection
    attempt logs this error and the gateway goes on."""
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate\n")
    config = SparkplugConfig.model_validate({"enabled": True, "tls": {"cert_file": garbage}})
    session = SparkplugSession(SimpleNamespace(config=config))  # type: ignore[arg-type]
    with pytest.raises(OSError, match=r"^\[sparkplug.tls\] unusable: \[SSL\]"):
        session._tls()
