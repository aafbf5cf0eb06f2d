"""Pure parts of the uplink: topic mapping (the documented examples), pacing, outbox caps."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import pytest
from pydantic import ValidationError

from bridge.uplink.client import RemoteLink
from bridge.uplink.config import RemoteConfig, TopicMap, UplinkConfig
from bridge.uplink.envelope import outgoing
from bridge.uplink.outbox import MemoryOutbox
from bridge.uplink.pacing import Backoff, TokenBucket
from gateway.base.outbox import OutboxRecord, RuleLimits


@pytest.mark.parametrize(
    ("mapping", "topic", "expected"),
    [  # the examples of bridge/uplink/config.py's docstring
        (TopicMap(strip="devices/", prefix="site7/meters/"), "devices/m1/power",
         "site7/meters/m1/power"),
        (TopicMap(prefix="site7/"), "devices/m1/power", "site7/devices/m1/power"),
        (TopicMap(strip="cmd/site7/", prefix="devices/"), "cmd/site7/m1/power/set",
         "devices/m1/power/set"),
        (TopicMap(strip="other/"), "devices/x", "devices/x"),
    ],
)
def test_topic_map_examples(mapping: TopicMap, topic: str, expected: str) -> None:
    assert mapping.apply(topic) == expected


def test_config_errors_name_the_rule() -> None:
    with pytest.raises(ValidationError, match=r"forward\.0\.remote: 'nope'"):
        UplinkConfig.model_validate({
            "enabled": True, "remotes": [{"addresses": ["h:1"]}],
            "forward": [{"filter": "a/#", "remote": "nope"}],
        })
    with pytest.raises(ValidationError, match="filter"):
        UplinkConfig.model_validate({"forward": [{"filter": "a/#/b"}]})


def test_gateway_status_topic_default_custom_and_off() -> None:
    remote = RemoteConfig(addresses=["h:1"])
    assert remote.gateway_status_topic("site7") == "outpost-status/site7"
    assert RemoteConfig(addresses=["h:1"], status_topic="a/b").gateway_status_topic("x") == "a/b"
    assert RemoteConfig(addresses=["h:1"], status_topic="").gateway_status_topic("x") is None
    with pytest.raises(ValidationError, match="wildcard"):
        RemoteConfig(addresses=["h:1"], status_topic="a/+/status")


def test_a_gateway_id_unfit_for_the_default_status_topic_is_a_config_error() -> None:
    from gateway.base.settings import ConfigError
    from outpost.config import parse_config

    def uplink(remote: dict[str, object]) -> dict[str, object]:
        return {"gateway_id": "site#7",
                "uplink": {"enabled": True, "remotes": [{"addresses": ["h:1"], **remote}]}}

    with pytest.raises(ConfigError) as info:
        parse_config(uplink({}))
    [error] = info.value.errors
    assert error.startswith("uplink: Value error, remotes.0: the default status topic "
                            "'outpost-status/site#7'") and "set status_topic" in error
    with pytest.raises(ConfigError) as info:
        parse_config(uplink({"status_topic": ""}))
    [error] = info.value.errors
    assert error.startswith("uplink: Value error, remotes.0: the default diagnostics topic "
                            "'outpost-diagnostics/site#7'") and "set diagnostics_topic" in error
    both_off = uplink({"status_topic": "", "diagnostics_topic": ""})
    assert parse_config(both_off).uplink.remotes[0].status_topic == ""


def test_a_gateway_id_unfit_for_the_default_status_topic_is_refused_at_start() -> None:
    config = UplinkConfig(enabled=True, remotes=[RemoteConfig(addresses=["h:1"])])
    with pytest.raises(ValueError, match="set status_topic"):
        RemoteLink(config, config.remotes[0], MemoryOutbox(), "site#7", None, asyncio.Event())
    off = RemoteConfig(addresses=["h:1"], status_topic="")
    config = UplinkConfig(enabled=True, remotes=[off])
    with pytest.raises(ValueError, match="set diagnostics_topic"):
        RemoteLink(config, off, MemoryOutbox(), "site#7", None, asyncio.Event())
    off = RemoteConfig(addresses=["h:1"], status_topic="", diagnostics_topic="")
    config = UplinkConfig(enabled=True, remotes=[off])
    link = RemoteLink(config, off, MemoryOutbox(), "site#7", None, asyncio.Event())
    assert link.status_topic is None and link.rules() == []


def test_backoff_full_jitter_is_capped() -> None:
    backoff = Backoff(1.0, 8.0, random.Random(1))
    delays = [backoff.next_delay() for _ in range(20)]
    assert all(0 <= d <= 8.0 for d in delays)
    assert max(delays[:1]) <= 1.0 and max(delays[5:]) > 2.0
    backoff.reset()
    assert backoff.next_delay() <= 1.0


def test_token_bucket_limits_the_rate() -> None:
    bucket = TokenBucket(10.0, now=0.0)
    spent, now = 0, 0.0
    while now < 5.0:
        wait = bucket.wait_time(1, now)
        if wait:
            now += wait
            continue
        bucket.spend(1, now)
        spent += 1
    assert 50 <= spent <= 61  # 10/s for 5 s plus one second of burst
    assert TokenBucket(0, 0.0).wait_time(10**9, 0.0) == 0


def record(outbox: MemoryOutbox, rule: str = "r", size: int = 10) -> OutboxRecord:
    return OutboxRecord(outbox.next_seq(), rule, "t", b"x" * size, 1, False, 1000)


def test_outbox_caps_and_orders() -> None:
    outbox = MemoryOutbox()
    oldest = RuleLimits(3, 10**6, drop_oldest=True)
    for _ in range(5):
        outbox.append(record(outbox), oldest)
    assert [r.seq for r in outbox.read("r", 10, False, set())] == [3, 4, 5]
    assert [r.seq for r in outbox.read("r", 2, True, {5})] == [4, 3]
    newest = RuleLimits(2, 10**6, drop_oldest=False)
    for _ in range(4):
        outbox.append(record(outbox, "n"), newest)
    assert [r.seq for r in outbox.read("n", 10, False, set())] == [6, 7]
    assert outbox.stats().dropped == 4 and outbox.stats().messages == 5
    outbox.delete([3, 6])
    assert outbox.stats().messages == 3 and outbox.stats().bytes == 3 * 11


def test_properties_need_a_v5_remote() -> None:
    rec = OutboxRecord(1, "r", "t", b"p", 1, False, 5, (("k", "v"),), "text/plain")
    out = outgoing(rec, "remote/t", "gw", "ep", 5, "auto", 1)
    assert out.payload == b"p" and out.user_properties[0] == ("k", "v")
    assert dict(out.user_properties)["seq"] == "1" and out.content_type == "text/plain"
    with pytest.raises(ValueError, match="MQTT 5"):
        outgoing(rec, "remote/t", "gw", "ep", 4, "properties", 1)


def test_reload_changes_forward_rules_live() -> None:
    from bridge.uplink.hook import UplinkHook
    from bridge.uplink.service import UplinkService
    from gateway.broker.core.message import Message
    from outpost.config import parse_config

    def config(filter_: str) -> object:
        return parse_config({"uplink": {
            "enabled": True, "remotes": [{"addresses": ["127.0.0.1:1"]}],
            "forward": [{"filter": filter_}],
        }})

    first = config("a/#")
    outbox = MemoryOutbox()
    hook = UplinkHook(first.uplink, outbox)  # type: ignore[attr-defined]
    service = UplinkService(first.uplink, outbox, hook, "gw")  # type: ignore[attr-defined]
    hook.published(None, Message("b/1", b"x", 1, False))
    service.reload(config("b/#").uplink)  # type: ignore[attr-defined]
    hook.published(None, Message("b/2", b"y", 1, False))
    hook.published(None, Message("a/3", b"z", 1, False))
    assert [r.topic for r in outbox.read("forward.0", 10, False, set())] == ["b/2"]


def test_tls_files_are_relative_to_the_config_file(tmp_path: Path) -> None:
    from gateway.base.settings import ConfigError
    from outpost.config import load_config

    (tmp_path / "ca.pem").write_text("ca")
    path = tmp_path / "outpost.toml"
    path.write_text('[uplink]\nenabled = true\n[[uplink.remotes]]\naddresses = ["h:8883"]\n'
                    '[uplink.remotes.tls]\nca_file = "ca.pem"\ncert_file = "missing.pem"\n')
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert info.value.errors == [
        f"uplink.remotes.0.tls.cert_file: Value error, no such file: {tmp_path / 'missing.pem'}"
    ]
    (tmp_path / "missing.pem").write_text("cert")
    tls = load_config(path).uplink.remotes[0].tls
    assert tls is not None and tls.ca_file == tmp_path / "ca.pem"
