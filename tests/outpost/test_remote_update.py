"""The remote update trigger end to end on this machine: a real mosquitto as the cloud broker,
the real `outpost run` with an uplink whose inbound rule brings the command topic in, a real
HTTPS server with its own CA serving the bundle, and the root side (`outpost update
run-request`, which outpost-update.service runs) run by the test as the path unit would.

This machine has `rauc` but no /etc/rauc/system.conf, so an install that gets past the download
and the sha256 fails at RAUC's step: that failure is what the cloud must see, with nothing
else broken. The install itself into a slot is tested in the image's QEMU tests.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
import pytest
from paho.mqtt.enums import CallbackAPIVersion

from gateway.base.settings import ConfigError
from outpost import update
from outpost.config import parse_config
from outpost.remote_update import RemoteUpdateService
from outpost.update_command import CommandError, Spool, parse_command, write_json
from outpost.update_runner import run_request
from tests.bridge.uplink.test_uplink_e2e import Recorder, publish_local
from tests.conftest import require
from tests.gateway.broker.e2e.helpers import RawClient, wait_for
from tests.outpost.test_update import PAYLOAD, Server, https_server
from tests.support.broker_proc import ROOT, BrokerProcess
from tests.support.mosquitto import Mosquitto, start_mosquitto

__all__ = ["https_server"]  # the fixture, shared with test_update.py

COMMAND = "outpost-cmd/site7/update"
REPORT = "outpost-status/site7/update"
REFUSED = "outpost-status/site7/update/refused"
GOOD_SHA = hashlib.sha256(PAYLOAD).hexdigest()


@pytest.fixture
def cloud(tmp_path: Path) -> Iterator[Mosquitto]:
    require("mosquitto")
    with start_mosquitto(tmp_path / "cloud") as broker:
        yield broker


def gateway_config(cloud_port: int, ca_file: Path, inbound: str = COMMAND) -> str:
    return f"""
gateway_id = "site7"
[uplink]
enabled = true
[[uplink.remotes]]
name = "cloud"
addresses = ["127.0.0.1:{cloud_port}"]
client_id = "uplink-site7"
backoff_initial = 0.2
backoff_max = 1.0
[[uplink.inbound]]
filter = "{inbound}"
[remote_update]
enabled = true
ca_file = "{ca_file}"
"""


def send(port: int, payload: bytes, topic: str = COMMAND) -> None:
    client = mqtt.Client(CallbackAPIVersion.VERSION2, protocol=mqtt.MQTTv5)
    client.connect("127.0.0.1", port)
    client.loop_start()
    client.publish(topic, payload, qos=1).wait_for_publish(10)
    client.loop_stop()
    client.disconnect()


def command(url: str, sha256: str = GOOD_SHA, request_id: str = "r1", **extra: Any) -> bytes:
    return json.dumps({"url": url, "sha256": sha256, "id": request_id, **extra}).encode()


class Cloud:
    """What the cloud sees of the gateway's update reports."""

    def __init__(self, port: int) -> None:
        self.recorder = Recorder(port, f"{REPORT}/#").start()

    def on(self, topic: str) -> list[dict[str, Any]]:
        with self.recorder.lock:
            return [json.loads(m.payload) for m in self.recorder.messages if m.topic == topic]

    def refusal(self, request_id: str | None, text: str) -> dict[str, Any]:
        return wait_for(lambda: next((r for r in self.on(REFUSED) if r["id"] == request_id
                                      and text in r["error"]), None),
                        message=f"no refusal of {request_id} with {text!r}: {self.on(REFUSED)}")

    def request(self, request_id: str, state: str) -> dict[str, Any]:
        def find() -> dict[str, Any] | None:
            for report in reversed(self.on(REPORT)):
                request = report["request"] or {}
                if request.get("id") == request_id and request.get("state") == state:
                    return report
            return None
        return wait_for(find, message=f"no report of {request_id} {state}: {self.on(REPORT)}")


def run_request_command(config: Path, state: Path, download: Path
                        ) -> subprocess.CompletedProcess[str]:
    """What outpost-update.service runs (as root on the device), here without the reboot."""
    return subprocess.run(
        [sys.executable, "-m", "outpost", "update", "run-request", "--config", str(config),
         "--state-dir", str(state), "--download-dir", str(download), "--no-reboot"],
        capture_output=True, text=True, cwd=ROOT, timeout=120, check=False)


@pytest.fixture
def gateway(cloud: Mosquitto, https_server: Server, tmp_path: Path,
            broker_factory: Callable[..., BrokerProcess]) -> tuple[BrokerProcess, Path, Path]:
    state = tmp_path / "state"
    process = broker_factory(gateway_config(cloud.port, https_server.ca_file),
                             "--state-dir", str(state))
    wait_for(lambda: "uplink cloud: inbound subscribed" in process.log())
    return process, state, tmp_path / "broker0" / "outpost.toml"


def test_commands_are_checked_spooled_installed_and_reported(
        cloud: Mosquitto, https_server: Server, gateway: tuple[BrokerProcess, Path, Path],
        tmp_path: Path) -> None:
    process, state, config = gateway
    spool = Spool(state)
    download = tmp_path / "download"
    watcher = Cloud(cloud.port)
    try:
        first = wait_for(lambda: watcher.on(REPORT))[0]  # retained, from the start
        assert first["gateway_id"] == "site7" and first["request"] is None
        assert first["running"]["version"] and first["running"]["slot"] is None

        # Malformed commands: refused with the reason, logged, nothing spooled.
        url = f"{https_server.base}/bundle.raucb"
        send(cloud.port, b"{not json")
        watcher.refusal(None, "invalid command: not JSON")
        send(cloud.port, command(url.replace("https://", "http://"), request_id="bad-url"))
        watcher.refusal("bad-url", "url: must be an https:// URL")
        send(cloud.port, command(url, sha256="abc123", request_id="short-sha"))
        watcher.refusal("short-sha", "sha256: must be the bundle's sha256: 64 hexadecimal")
        send(cloud.port, json.dumps({"url": url, "id": "no-sha"}).encode())
        watcher.refusal("no-sha", "sha256: Field required")
        send(cloud.port, command(url, request_id="extra", reboot_at="now"))
        watcher.refusal("extra", "reboot_at: unknown field")
        # A local client of the edge broker may publish there (no ACL) but is not the cloud.
        publish_local(process.port, [(COMMAND, command(url, request_id="local"))])
        watcher.refusal(None, "not from local client")
        assert not spool.request.exists()
        wait_for(lambda: "remote update: command extra invalid command: reboot_at: unknown "
                 "field" in process.log())

        # A well-formed command with the wrong sha256 is accepted; a second one is "busy".
        send(cloud.port, command(url, sha256="0" * 64, request_id="r1"))
        watcher.request("r1", "accepted")
        assert json.loads(spool.request.read_text())["id"] == "r1"
        send(cloud.port, command(url, request_id="r2"))
        watcher.refusal("r2", "busy: request r1 is still being installed")

        # The root side (outpost-update.path would start it): downloaded, refused, removed.
        result = run_request_command(config, state, download)
        assert result.returncode == 1, result.stdout + result.stderr
        failed = watcher.request("r1", "failed")["request"]
        assert "is not the expected" in failed["error"] and failed["finished"]
        assert not spool.request.exists()
        assert list(download.iterdir()) == []  # the partial download is gone
        send(cloud.port, command(url, sha256="0" * 64, request_id="r1"))
        watcher.refusal("r1", "request r1 already completed (failed at ")
        assert not spool.request.exists()

        # The right sha256: downloaded and checked, then RAUC's step fails on this machine,
        # which has no /etc/rauc/system.conf.
        send(cloud.port, command(url, request_id="r3"))
        watcher.request("r3", "accepted")
        result = run_request_command(config, state, download)
        assert result.returncode == 1, result.stdout + result.stderr
        failed = watcher.request("r3", "failed")["request"]
        assert failed["error"] == ("cannot read RAUC's /etc/rauc/system.conf: "
                                   "No such file or directory"), failed
        assert "download 1 MiB (100%)" in result.stdout  # the progress lines, also in the spool
        assert list(download.iterdir()) == []

        # The runner given a system.conf (the device's, as update.Device holds it): the real
        # `rauc info` refuses the download, which is no bundle, and its error is reported.
        rauc = require("rauc")
        (tmp_path / "system.conf").write_text(
            f"[system]\ncompatible=outpost-x86-64\n[keyring]\npath={https_server.ca_file}\n")
        device = update.Device(rauc=rauc, system_conf=tmp_path / "system.conf",
                               download_dir=download, last_install=tmp_path / "last.json")
        send(cloud.port, command(url, request_id="r4"))
        watcher.request("r4", "accepted")
        lines: list[str] = []
        assert run_request(spool, device, https_server.ca_file, False, lines.append) == 1
        failed = watcher.request("r4", "failed")["request"]
        assert failed["error"].startswith(f"{download / 'bundle.raucb'}: refused: Invalid "
                                          "bundle format"), failed
        assert json.loads(device.last_install.read_text())["error"] == failed["error"]
        assert list(download.iterdir()) == [] and not spool.request.exists()
        assert process.process.poll() is None  # the gateway runs on
    finally:
        watcher.recorder.stop()
    # Retained: a consumer that subscribes now sees the last outcome at once.
    late = Cloud(cloud.port)
    try:
        assert wait_for(lambda: late.on(REPORT))[0]["request"]["id"] == "r4"
    finally:
        late.recorder.stop()


def test_reports_are_published_again_after_a_reconnect(
        cloud: Mosquitto, https_server: Server, gateway: tuple[BrokerProcess, Path, Path]
        ) -> None:
    process, state, _config = gateway
    watcher = Cloud(cloud.port)
    try:
        wait_for(lambda: watcher.on(REPORT))
    finally:
        watcher.recorder.stop()
    cloud.stop()  # no persistence: the retained report is gone with it
    wait_for(lambda: "uplink cloud: link to" in process.log())
    send_later = command(f"{https_server.base}/bundle.raucb", request_id="after")
    cloud.start()
    wait_for(lambda: process.log().count("uplink cloud: inbound subscribed") >= 2)
    again = Cloud(cloud.port)
    try:
        assert wait_for(lambda: again.on(REPORT))[0]["request"] is None
        send(cloud.port, send_later)
        again.request("after", "accepted")
    finally:
        again.recorder.stop()
    assert Spool(state).request.exists()


def test_a_local_client_cannot_pose_as_the_inbound_link(
        cloud: Mosquitto, https_server: Server, gateway: tuple[BrokerProcess, Path, Path]
        ) -> None:
    process, state, _config = gateway
    # The broker keeps `$` client identifiers for the gateway's own links: the CONNECT is
    # refused (3.1.1: identifier rejected), so the publish never happens.
    with RawClient(process.host, process.port) as client:
        assert client.connect("$outpost-uplink-inbound") == bytes.fromhex("20020002")
    assert not Spool(state).request.exists()


@pytest.mark.parametrize(("payload", "error"), [
    (b"[1]", "not a JSON object but list"),
    (b"\xff", "not JSON"),
    (b"x" * 5000, "at most 4096 are read"),
    (b'{"url": "https://h/b", "sha256": "' + b"g" * 64 + b'", "id": "a"}', "sha256: must be"),
    (b'{"url": "https:// h/b", "sha256": "' + b"a" * 64 + b'", "id": "a"}', "url: must not"),
    (b'{"url": "https://h/b", "sha256": "' + b"a" * 64 + b'", "id": "a b"}', "id: must be"),
    (b'{"url": "https://h/b", "sha256": "' + b"a" * 64 + b'"}', "id: Field required"),
])
def test_parse_command_refuses(payload: bytes, error: str) -> None:
    with pytest.raises(CommandError, match=error):
        parse_command(payload)


def test_parse_command_takes_a_good_one() -> None:
    got = parse_command(b'{"url": "https://h/b.raucb", "sha256": "' + b"A" * 64 +
                        b'", "id": "deploy-7"}')
    assert (got.url, got.sha256, got.id) == ("https://h/b.raucb", "a" * 64, "deploy-7")


def _config(remote_update: str, inbound: str = COMMAND, uplink: str = "true") -> str:
    return f"""
gateway_id = "site7"
[uplink]
enabled = {uplink}
[[uplink.remotes]]
addresses = ["127.0.0.1:1883"]
[[uplink.inbound]]
filter = "{inbound}"
topic = {{ prefix = "from-cloud/" }}
[remote_update]
{remote_update}
"""


@pytest.mark.parametrize(("text", "error"), [
    (_config("enabled = true", inbound="other/#"),
     "remote_update: Value error, command_topic: no [[uplink.inbound]] rule brings "
     "'outpost-cmd/site7/update' in"),
    (_config("enabled = true", uplink="false"), "remote_update: Value error, enabled: "),
    (_config('enabled = true\ncommand_topic = "a/+/b"'), "remote_update.command_topic: "),
    (_config("enabled = true\nca_file = \"missing.pem\""), "remote_update.ca_file: "),
    (_config("enabled = true\nurl = 1"), "remote_update.url: Extra inputs"),
])
def test_config_errors_name_the_key(text: str, error: str, tmp_path: Path) -> None:
    import tomllib

    with pytest.raises(ConfigError) as caught:
        parse_config(tomllib.loads(text), base_dir=tmp_path)
    assert any(line.startswith(error) for line in caught.value.errors), caught.value.errors


def test_the_command_arrives_where_the_inbound_rule_maps_it() -> None:
    import tomllib

    from outpost.config import command_local_topics

    config = parse_config(tomllib.loads(_config("enabled = true", inbound="outpost-cmd/#")))
    assert command_local_topics(config.uplink, COMMAND) == [f"from-cloud/{COMMAND}"]


def test_an_interrupted_request_is_recorded_as_failed_not_run_again(tmp_path: Path) -> None:
    spool = Spool(tmp_path)
    request = {"id": "r9", "url": "https://h/b.raucb", "sha256": "a" * 64}
    write_json(spool.request, request)
    write_json(spool.state, {"done": [], "request": {**request, "state": "installing"}})
    lines: list[str] = []
    device = update.Device(rauc="never-run", download_dir=tmp_path / "never")
    assert run_request(spool, device, None, False, lines.append) == 1
    state = json.loads(spool.state.read_text())
    assert state["request"]["state"] == "failed" and "interrupted during the install" in (
        state["request"]["error"])
    assert state["done"][-1]["id"] == "r9" and not spool.request.exists()
    assert not (tmp_path / "never").exists()


def test_the_runner_follows_no_link_in_the_spool(tmp_path: Path) -> None:
    secret = tmp_path / "secret.json"
    secret.write_text('{"id": "x", "url": "https://h/b", "sha256": "' + "a" * 64 + '"}')
    spool = Spool(tmp_path / "spool")
    spool.state_dir.mkdir()
    spool.request.symlink_to(secret)
    lines: list[str] = []
    device = update.Device(rauc="never-run", download_dir=tmp_path / "never")
    assert run_request(spool, device, None, False, lines.append) == 1
    assert "unreadable request" in json.loads(spool.state.read_text())["request"]["error"]
    assert not spool.request.exists() and secret.exists()


def test_the_runner_settles_the_request_when_the_configuration_is_invalid(tmp_path: Path
                                                                          ) -> None:
    """Else the path unit would start it again for as long as the request file is there."""
    spool = Spool(tmp_path / "state")
    spool.state_dir.mkdir()
    write_json(spool.request, {"id": "r5", "url": "https://h/b.raucb", "sha256": "a" * 64})
    config = tmp_path / "outpost.toml"
    config.write_text("[remote_update]\nenabled = 7\n")
    result = run_request_command(config, spool.state_dir, tmp_path / "download")
    assert result.returncode == 2, result.stdout + result.stderr
    assert "remote_update.enabled" in result.stderr
    state = json.loads(spool.state.read_text())
    assert state["request"]["state"] == "failed" and state["request"]["id"] == "r5"
    assert "invalid configuration" in state["request"]["error"]
    assert not spool.request.exists()
    assert run_request_command(config, spool.state_dir, tmp_path / "d").returncode == 2  # idle


def test_the_slot_is_reported_only_as_recorded_by_this_boots_check(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """After a reboot the file of the previous boot's health check is still there: its slot and
    "committed" next to the new version would claim a check that has not run yet."""
    spool = Spool(tmp_path)
    service = RemoteUpdateService([COMMAND], "site7", spool, lambda *_: None)
    monkeypatch.setenv("OUTPOST_BOOT_ID", "0123456789ABCDEF0123456789ABCDEF")  # systemd's %b
    recorded = {"slot": "B", "committed": True, "checked": "2026-11-25T18:00:00Z"}
    write_json(spool.running, {**recorded, "boot_id": "ffffffffffffffffffffffffffffffff"})
    running = service.current()["running"]
    assert (running["slot"], running["committed"], running["checked"]) == (None, None, None)
    write_json(spool.running, {**recorded, "boot_id": "0123456789abcdef0123456789abcdef"})
    running = service.current()["running"]
    assert (running["slot"], running["committed"]) == ("B", True)
    monkeypatch.delenv("OUTPOST_BOOT_ID")  # off the unit: the kernel's, as the check writes it
    kernel = Path("/proc/sys/kernel/random/boot_id").read_text().strip().replace("-", "")
    write_json(spool.running, {**recorded, "boot_id": kernel})
    assert service.current()["running"]["slot"] == "B"
