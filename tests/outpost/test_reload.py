"""SIGHUP reloads the configuration without dropping anyone: limits and `$SYS`, an ACL file
whose TOML did not change, the bridge's device map — while a client stays connected and keeps
receiving. A broken file is refused whole: every error logged with its key path, the running
configuration kept."""

from __future__ import annotations

from pathlib import Path

from gateway.broker.codec.packets import Publish
from tests.gateway.broker.e2e.helpers import RawClient
from tests.outpost.support import (
    MovingDevice,
    bridge_config,
    start_outpost,
    status_json,
)
from tests.support.waiting import wait_for

CONNACK_OK = bytes.fromhex("20020000")
CONNACK_BUSY = bytes.fromhex("20020003")  # 3.1.1 "server unavailable"

LIMITS = """
[limits]
max_connections = {max_connections}
receive_maximum = {receive_maximum}
queue_overflow = "drop-oldest"

[sys]
interval = {interval}

[status]
bind = "127.0.0.1:0"
"""


def echo(client: RawClient, topic: str, payload: bytes) -> Publish:
    """Publish QoS 0 and read it back through the client's own subscription."""
    client.publish(topic, payload)
    packet = client.recv()
    assert isinstance(packet, Publish), packet
    return packet


def test_reload_applies_limits_and_sys_while_a_client_stays(tmp_path: Path) -> None:
    outpost = start_outpost(tmp_path, LIMITS.format(max_connections=10, receive_maximum=64,
                                                    interval=0))
    try:
        with RawClient(outpost.host, outpost.port) as client:
            assert client.connect("ops-stays") == CONNACK_OK
            client.subscribe(("t/#", 0))
            assert echo(client, "t/1", b"before").payload == b"before"
            outpost.write_config(LIMITS.format(max_connections=1, receive_maximum=32,
                                               interval=0.5))
            outpost.hup()
            wait_for(lambda: "reload: done" in outpost.log(), message="no reload")
            log = outpost.log()
            assert "reload: limits.max_connections: 10 -> 1" in log
            assert "reload: sys.interval: 0.0 -> 0.5" in log
            assert "limits.receive_maximum: 64 -> 32 (lowering a limit announced" in log
            # The new connection limit holds for newcomers, the connected client stays.
            with RawClient(outpost.host, outpost.port) as newcomer:
                assert newcomer.connect("ops-newcomer") == CONNACK_BUSY
            assert echo(client, "t/2", b"after").payload == b"after"
            # $SYS is published now.
            client.subscribe(("$SYS/broker/uptime", 0))
            packet = client.recv()
            assert isinstance(packet, Publish) and packet.topic == "$SYS/broker/uptime"
        assert status_json(outpost)["service"]["reloads"] == 1
    finally:
        assert outpost.stop() == 0


def test_broken_file_is_refused_and_the_running_config_kept(tmp_path: Path) -> None:
    outpost = start_outpost(tmp_path, LIMITS.format(max_connections=2, receive_maximum=64,
                                                    interval=0))
    try:
        with RawClient(outpost.host, outpost.port) as client:
            assert client.connect("ops-keeps") == CONNACK_OK
            client.subscribe(("t/#", 0))
            outpost.write_config(
                '[limits]\nmax_connections = "many"\nqueue_overflow = "explode"\n'
                "[sys]\ninterval = -1\n[nonsense]\nx = 1\n")
            outpost.hup()
            # the summary line comes first, then one line per error: wait for all of them
            paths = ("limits.max_connections", "limits.queue_overflow", "sys.interval",
                     "nonsense")
            wait_for(lambda: all(f"reload: {path}: " in outpost.log() for path in paths),
                       message="not every error of the refused file")
            log = outpost.log()
            assert "is invalid (4 errors)" in log
            assert "keeping the running configuration" in log
            assert "'explode'" in log  # the allowed values and what was given
            # Still the old limit (2): a second client gets in, a third does not.
            with RawClient(outpost.host, outpost.port) as second:
                assert second.connect("ops-second") == CONNACK_OK
                with RawClient(outpost.host, outpost.port) as third:
                    assert third.connect("ops-third") == CONNACK_BUSY
            assert echo(client, "t/1", b"still here").payload == b"still here"
            # Not TOML at all: refused the same way.
            outpost.write_config("[limits\n")
            outpost.hup()
            wait_for(lambda: "not valid TOML" in outpost.log(), message="no TOML error")
            assert echo(client, "t/2", b"and here").payload == b"and here"
        service = status_json(outpost)["service"]
        assert (service["reloads"], service["reload_failures"]) == (0, 2)
    finally:
        assert outpost.stop() == 0


def test_acl_file_change_applies_on_sighup_to_connected_clients(tmp_path: Path) -> None:
    acl = tmp_path / "acl"
    acl.write_text("topic readwrite sensors/#\n", encoding="utf-8")
    config = f"""
[[listeners]]
bind = "127.0.0.1:0"
acl_file = "{acl}"

[status]
bind = "127.0.0.1:0"
"""
    outpost = start_outpost(tmp_path, config, listen=None)
    try:
        with RawClient(outpost.host, outpost.port) as client:
            assert client.connect("ops-acl") == CONNACK_OK
            client.subscribe(("sensors/#", 0))
            assert echo(client, "sensors/secret/a", b"1").topic == "sensors/secret/a"
            # The TOML file is unchanged; only the ACL file it names is.
            acl.write_text("topic readwrite sensors/public/#\n", encoding="utf-8")
            outpost.hup()
            wait_for(lambda: "reload: done (0 configuration change(s))" in outpost.log(),
                       message="no reload")
            # Denied now: the next message the client gets is the allowed one.
            client.publish("sensors/secret/b", b"2")
            assert echo(client, "sensors/public/c", b"3").topic == "sensors/public/c"
    finally:
        assert outpost.stop() == 0


def test_acl_file_added_on_sighup_starts_checking_what_subscribers_receive(
        tmp_path: Path) -> None:
    """A listener without an ACL gains one: deliveries must start checking READ access.

    The client may still publish everywhere (`write sensors/#`), so what it stops receiving is
    held back by the READ check at delivery, not by the WRITE check of its own PUBLISH.
    """
    acl = tmp_path / "acl"
    acl.write_text("topic write sensors/#\ntopic read sensors/public/#\n", encoding="utf-8")
    listener = '[[listeners]]\nbind = "127.0.0.1:0"\n'
    status = '\n[status]\nbind = "127.0.0.1:0"\n'
    outpost = start_outpost(tmp_path, listener + status, listen=None)
    try:
        with RawClient(outpost.host, outpost.port) as client:
            assert client.connect("ops-open") == CONNACK_OK
            client.subscribe(("sensors/#", 0))
            assert echo(client, "sensors/secret/a", b"1").topic == "sensors/secret/a"
            outpost.write_config(listener + f'acl_file = "{acl}"\n' + status)
            outpost.hup()
            wait_for(lambda: "reload: done" in outpost.log(), message="no reload")
            client.publish("sensors/secret/b", b"2")  # allowed to write, not to read
            assert echo(client, "sensors/public/c", b"3").topic == "sensors/public/c"
    finally:
        assert outpost.stop() == 0


def test_device_map_reload_keeps_clients(tmp_path: Path) -> None:
    device = MovingDevice(units=(1, 2))
    port = device.start()
    status = '\n[status]\nbind = "127.0.0.1:0"\nhistory_interval = 0.2\n'
    outpost = start_outpost(tmp_path, bridge_config(port, {"meter-1": 1}) + status)
    try:
        with RawClient(outpost.host, outpost.port) as client:
            assert client.connect("ops-devices") == CONNACK_OK
            client.subscribe(("devices/+/status", 0), ("ops/#", 0))
            wait_for(lambda: [d["name"] for d in status_json(outpost)["devices"]["devices"]
                                if d["online"]] == ["meter-1"], message="no meter-1 online")
            outpost.write_config(bridge_config(port, {"meter-1": 1, "meter-2": 2}) + status)
            outpost.hup()
            wait_for(lambda: [d["name"] for d in status_json(outpost)["devices"]["devices"]
                                if d["online"]] == ["meter-1", "meter-2"],
                       message="no meter-2 online after the reload")
            assert "reload: bridge.devices: changed" in outpost.log()
            seen: list[tuple[str, bytes]] = []
            while ("devices/meter-2/status", b"online") not in seen:
                packet = client.recv()
                if isinstance(packet, Publish):
                    seen.append((packet.topic, packet.payload))
            assert echo(client, "ops/ping", b"x").payload == b"x"
        assert status_json(outpost)["clients"]["links"] >= 1
    finally:
        assert outpost.stop() == 0
        device.stop()
