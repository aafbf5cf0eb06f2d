"""Remote configuration end to end on this machine: a real mosquitto as the cloud broker, the
real `outpost run` whose uplink brings `outpost-cmd/site7/config` in, and the cloud's own
command (`cloud_spark.fleet`) signing and sending. A good configuration is applied and kept in
the history; every kind of bad input is refused with its reason and the running file is
untouched; a configuration that breaks the uplink is rolled back by the gateway itself, and
a persistent session's queue loses nothing on the way. A named part (the devices, the forward
rules) replaces those arrays of the running file and keeps every other byte of it, and goes
the same way: checked, applied, rolled back when unhealthy (with a pymodbus simulator as the
meter)."""

from __future__ import annotations

import base64
import json
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
import pytest
from paho.mqtt.enums import CallbackAPIVersion

from bench.bridge.simulator import Simulator
from cloud_spark.fleet.broker import BrokerOptions, CloudSession
from cloud_spark.fleet.config_send import send_config
from cloud_spark.fleet.signing import generate_key, load_signing_key, sign_config
from outpost.config_store import sha256_text
from outpost.remote_config_document import DocumentError, parse_signed
from tests.conftest import require
from tests.support.broker_proc import ROOT, BrokerProcess
from tests.support.mosquitto import Mosquitto, free_port, start_mosquitto
from tests.support.waiting import wait_for

STATUS = "outpost-status/site7/config"
COMMAND = "outpost-cmd/site7/config"


@pytest.fixture
def cloud(tmp_path: Path) -> Iterator[Mosquitto]:
    require("mosquitto")
    with start_mosquitto(tmp_path / "cloud") as broker:
        yield broker


@pytest.fixture
def keys(tmp_path: Path) -> tuple[Path, Path]:
    """(the cloud's signing key, the gateway's keyring folder holding its public half)."""
    private, public = generate_key(tmp_path / "signing", "fleet-1")
    keyring = tmp_path / "keyring"
    keyring.mkdir()
    shutil.copy(public, keyring / public.name)
    return private, keyring


def gateway_config(cloud_port: int, keyring: Path, extra: str = "") -> str:
    return f"""gateway_id = "site7"
[uplink]
enabled = true
[[uplink.remotes]]
name = "cloud"
addresses = ["127.0.0.1:{cloud_port}"]
client_id = "uplink-site7"
backoff_initial = 0.2
backoff_max = 1.0
[[uplink.inbound]]
filter = "outpost-cmd/site7/#"
[remote_config]
enabled = true
keyring = "{keyring}"
health_deadline = 4
{extra}"""


@pytest.fixture
def gateway(cloud: Mosquitto, keys: tuple[Path, Path], tmp_path: Path,
            broker_factory: Callable[..., BrokerProcess]) -> tuple[BrokerProcess, Path, Path]:
    """(the gateway, its config file, its state dir)."""
    state = tmp_path / "state"
    process = broker_factory(gateway_config(cloud.port, keys[1]), "--state-dir", str(state))
    wait_for(lambda: "uplink cloud: inbound subscribed" in process.log())
    return process, tmp_path / "broker0" / "outpost.toml", state


@pytest.fixture
def session(cloud: Mosquitto) -> Iterator[CloudSession]:
    with CloudSession(BrokerOptions("127.0.0.1", cloud.port, "test-fleet")) as s:
        s.subscribe(STATUS)
        yield s


def report(session: CloudSession, **expected: Any) -> dict[str, Any]:
    """Wait for the retained config status to hold `expected`."""
    def matches(latest: dict[str, bytes]) -> bool:
        value = json.loads(latest.get(STATUS, b"{}"))
        return all(value.get(k) == v for k, v in expected.items())
    assert session.wait(matches, 60), f"no report {expected}: {session.latest.get(STATUS)!r}"
    result: dict[str, Any] = json.loads(session.latest[STATUS])
    return result


def history(config: Path, state: Path) -> list[dict[str, Any]]:
    out = subprocess.run([sys.executable, "-m", "outpost", "config", "history", "--json",
                          "--config", str(config), "--state-dir", str(state)],
                         capture_output=True, text=True, cwd=ROOT, check=True)
    result: list[dict[str, Any]] = json.loads(out.stdout)
    return result


def test_the_cloud_signs_what_the_gateway_verifies(keys: tuple[Path, Path]) -> None:
    private, keyring = keys
    payload = sign_config(load_signing_key(private), "fleet-1", "site7", 3, "r3", "x = 1\n")
    signed = parse_signed(payload, keyring, "site7", 65536)
    assert (signed.document.version, signed.document.config, signed.key_id) == (3, "x = 1\n",
                                                                                "fleet-1")
    # A whole file is sent as before parts existed (no "part"), so older gateways take it.
    assert "part" not in json.loads(base64.b64decode(json.loads(payload)["document"]))
    assert signed.document.part == "all"
    part = sign_config(load_signing_key(private), "fleet-1", "site7", 4, "r4", "", "forward")
    assert parse_signed(part, keyring, "site7", 65536).document.part == "forward"
    unknown = sign_config(load_signing_key(private), "fleet-1", "site7", 4, "r4", "", "users")
    with pytest.raises(DocumentError, match=r"^part: Input should be 'all', 'devices' or "
                       r"'forward'"):
        parse_signed(unknown, keyring, "site7", 65536)
    with pytest.raises(DocumentError, match="for gateway 'site7', this is 'site8'"):
        parse_signed(payload, keyring, "site8", 65536)
    tampered = json.loads(payload)
    tampered["document"] = tampered["document"][:-4] + "AAA="
    with pytest.raises(DocumentError, match="bad signature"):
        parse_signed(json.dumps(tampered).encode(), keyring, "site7", 65536)


def test_a_signed_configuration_is_applied_and_kept(
        cloud: Mosquitto, keys: tuple[Path, Path], gateway: tuple[BrokerProcess, Path, Path],
        session: CloudSession, tmp_path: Path) -> None:
    process, config, state = gateway
    original = config.read_text(encoding="utf-8")
    new = gateway_config(cloud.port, keys[1], "[limits]\nmax_inflight = 17\n")
    [result] = send_config(session, ["site7"], new, keys[0], 5, "more-inflight", 60)
    assert (result.state, result.reason) == ("applied", ""), result
    assert config.read_text(encoding="utf-8") == new
    assert "reload: limits.max_inflight: " in process.log()
    final = report(session, version=5, state="applied")
    assert final["sha256"] == sha256_text(new) == final["running"]["sha256"]
    assert final["part"] == "all"
    assert final["running"]["version"] == 5
    versions = history(config, state)
    assert [(v["source"], v["result"]) for v in versions] == [("hand", "applied"),
                                                              ("remote:5", "applied")]
    assert versions[0]["sha256"] == sha256_text(original)
    # The same document again is a replay.
    [again] = send_config(session, ["site7"], new, keys[0], 5, "more-inflight", 60)
    assert again.state == "refused" and "replay: version 5 is not above 5" in again.reason


def test_bad_input_is_refused_and_the_running_file_stays(
        cloud: Mosquitto, keys: tuple[Path, Path], gateway: tuple[BrokerProcess, Path, Path],
        session: CloudSession, tmp_path: Path) -> None:
    _, config, state = gateway
    original = config.read_text(encoding="utf-8")
    good = gateway_config(cloud.port, keys[1], "[limits]\nmax_inflight = 17\n")
    key = load_signing_key(keys[0])
    other, _ = generate_key(tmp_path / "other", "fleet-1")  # the same id, another key
    stranger, _ = generate_key(tmp_path / "stranger", "stranger")
    [applied] = send_config(session, ["site7"], good, keys[0], 10, "base", 60)
    assert applied.state == "applied"
    running = config.read_text(encoding="utf-8")

    def refused(payload: bytes, version: int | None, reason: str) -> None:
        session.publish(COMMAND, payload)
        got = report(session, state="refused", version=version)
        assert reason in got["reason"], got
        assert config.read_text(encoding="utf-8") == running

    refused(sign_config(load_signing_key(other), "fleet-1", "site7", 11, "r", good), 11,
            "bad signature: the document does not verify with key 'fleet-1'")
    refused(sign_config(load_signing_key(stranger), "stranger", "site7", 12, "r", good), 12,
            "unknown key 'stranger'")
    refused(sign_config(key, "fleet-1", "site8", 13, "r", good), 13,
            "the document is for gateway 'site8'")
    refused(sign_config(key, "fleet-1", "site7", 9, "r", good), 9,
            "replay: version 9 is not above 10")
    refused(sign_config(key, "fleet-1", "site7", 14, "r", good + "[limits\n"), 14,
            "invalid configuration: not valid TOML")
    with_map = good + ('[[bridge.buses]]\nname = "plc"\ntype = "tcp"\nhost = "127.0.0.1"\n'
                       '[[bridge.devices]]\nname = "meter"\nbus = "plc"\nunit_id = 1\n'
                       'address_base = 0\nmap = "missing-map.toml"\n')
    refused(sign_config(key, "fleet-1", "site7", 15, "r", with_map), 15, "missing-map.toml")
    refused(sign_config(key, "fleet-1", "site7", 16, "r", good + "#" * 300_000), None,
            "at most 262144 are read")
    refused(sign_config(key, "fleet-1", "site7", 17, "r",
                        good.replace("site7", "site9")), 17,
            "gateway_id: 'site9' is not this gateway's")
    versions = history(config, state)
    assert [v["result"] for v in versions] == ["applied", "applied", "refused", "refused",
                                                "refused"]
    assert versions[0]["sha256"] == sha256_text(original)


def test_a_configuration_that_breaks_the_uplink_rolls_back_by_itself(
        cloud: Mosquitto, keys: tuple[Path, Path], gateway: tuple[BrokerProcess, Path, Path],
        session: CloudSession) -> None:
    process, config, state = gateway
    original = config.read_text(encoding="utf-8")
    # A persistent session with messages queued for it, before and across the rollback.
    queued = mqtt.Client(CallbackAPIVersion.VERSION2, client_id="keeper",
                         protocol=mqtt.MQTTv311, clean_session=False)
    subscribed: list[int] = []
    queued.on_subscribe = lambda c, u, mid, rc, p: subscribed.append(mid)
    queued.connect(process.host, process.port)
    queued.loop_start()
    queued.subscribe("plant/#", qos=1)
    wait_for(lambda: subscribed)
    queued.disconnect()
    queued.loop_stop()
    publisher = mqtt.Client(CallbackAPIVersion.VERSION2, protocol=mqtt.MQTTv311)
    publisher.connect(process.host, process.port)
    publisher.loop_start()
    for n in range(20):
        publisher.publish(f"plant/{n}", str(n), qos=1).wait_for_publish(10)

    broken = gateway_config(free_port(), keys[1])  # nobody listens there
    [result] = send_config(session, ["site7"], broken, keys[0], 20, "bad-uplink", 90)
    assert result.state == "rolled back", result
    assert "not healthy within 4 s: uplink not connected: cloud" in result.reason
    assert config.read_text(encoding="utf-8") == original
    versions = history(config, state)
    assert [(v["source"], v["result"]) for v in versions] == [
        ("hand", "applied"), ("remote:20", "rolled back"), ("rollback:1", "applied")]
    final = report(session, version=20, state="rolled back")
    assert final["running"]["sha256"] == sha256_text(original)

    for n in range(20, 25):  # and the broker still takes and queues
        publisher.publish(f"plant/{n}", str(n), qos=1).wait_for_publish(10)
    publisher.disconnect()
    publisher.loop_stop()
    got: list[str] = []
    queued.on_message = lambda c, u, m: got.append(m.payload.decode())
    queued.connect(process.host, process.port)
    queued.loop_start()
    try:
        wait_for(lambda: len(got) >= 25, message=f"queued messages lost: {got}")
    finally:
        queued.disconnect()
        queued.loop_stop()
    assert sorted(int(g) for g in got) == list(range(25))


def test_the_cloud_command_sends_to_a_pattern_and_shows_each_result(
        cloud: Mosquitto, keys: tuple[Path, Path], gateway: tuple[BrokerProcess, Path, Path],
        tmp_path: Path) -> None:
    """`python -m cloud_spark.fleet config send` as docs/operations.md shows it: the gateways
    found by their status topic, a template with {gateway_id}, one line per gateway."""
    _, config, _ = gateway
    template = tmp_path / "template.toml"
    template.write_text(gateway_config(cloud.port, keys[1], "[limits]\nmax_inflight = 9\n")
                        .replace("site7", "{gateway_id}"), encoding="utf-8")
    out = subprocess.run(
        [sys.executable, "-m", "cloud_spark.fleet", "config", "send", "--broker",
         f"127.0.0.1:{cloud.port}", "--gateway", "site*", "--config", str(template),
         "--signing-key", str(keys[0]), "--wait", "60"],
        capture_output=True, text=True, cwd=ROOT, timeout=120, check=False)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "to 1 gateway(s)" in out.stdout
    assert " applied after " in out.stdout.splitlines()[-1]
    assert out.stdout.splitlines()[-1].startswith("site7  version ")
    assert "max_inflight = 9" in config.read_text(encoding="utf-8")


def test_history_show_and_rollback_by_hand(
        cloud: Mosquitto, keys: tuple[Path, Path], gateway: tuple[BrokerProcess, Path, Path],
        session: CloudSession) -> None:
    """`outpost config history|show|rollback` on the device, as docs/operations.md shows."""
    process, config, state = gateway
    original = config.read_text(encoding="utf-8")
    new = gateway_config(cloud.port, keys[1], "[limits]\nmax_inflight = 17\n")
    [result] = send_config(session, ["site7"], new, keys[0], 5, "r5", 60)
    assert result.state == "applied"

    def outpost(*args: str) -> str:
        out = subprocess.run([sys.executable, "-m", "outpost", "config", *args, "--config",
                              str(config), "--state-dir", str(state)],
                             capture_output=True, text=True, cwd=ROOT, check=True)
        return out.stdout

    lines = outpost("history").splitlines()
    assert lines[0].split()[:4] == ["1", lines[0].split()[1], sha256_text(original)[:12], "hand"]
    assert lines[1].startswith("*") and "remote:5" in lines[1] and "applied" in lines[1]
    assert outpost("show", "1") == original
    assert "version 3 written (rollback:1)" in outpost("rollback")
    assert config.read_text(encoding="utf-8") == original
    process.process.send_signal(signal.SIGHUP)  # systemctl reload outpost
    wait_for(lambda: "reload: limits.max_inflight: 17 -> " in process.log())


# -- named parts ---------------------------------------------------------------------------

PLANT = """
# the PLC of line 1
[[bridge.buses]]
name = "plc"
type = "tcp"
host = "127.0.0.1"
port = {port}

# meters
[[bridge.devices]]
name = "meter"   # the main meter
bus = "plc"
unit_id = 1
address_base = 0
poll_interval = 0.3
points = [{{ name = "power", address = 0 }}]

# what goes up
[[uplink.forward]]
filter = "devices/#"   # every value
qos = 1

# kept as it is
[limits]
max_inflight = 17
"""


@pytest.fixture
def plant(cloud: Mosquitto, keys: tuple[Path, Path], tmp_path: Path,
          broker_factory: Callable[..., BrokerProcess],
          ) -> Iterator[tuple[BrokerProcess, Path, Path, int]]:
    """(the gateway with a meter, online, and a forward rule; its config file; its state dir;
    the port of the meter's simulator)."""
    simulator = Simulator((1,), "tcp", size=100)
    port = simulator.start()
    try:
        state = tmp_path / "state"
        process = broker_factory(gateway_config(cloud.port, keys[1], PLANT.format(port=port)),
                                 "--state-dir", str(state))
        wait_for(lambda: "uplink cloud: inbound subscribed" in process.log()
                 and "meter: online" in process.log())
        yield process, tmp_path / "broker0" / "outpost.toml", state, port
    finally:
        simulator.stop()


def between(text: str, start: str, end: str) -> str:
    """`text` from `start` up to (without) `end`."""
    return text[text.index(start):text.index(end)]


def test_a_devices_part_replaces_the_devices_and_keeps_every_other_byte(
        keys: tuple[Path, Path], plant: tuple[BrokerProcess, Path, Path, int],
        session: CloudSession) -> None:
    process, config, state, port = plant
    original = config.read_text(encoding="utf-8")
    buses = f'[[bridge.buses]]\nname = "line-1"\ntype = "tcp"\nhost = "127.0.0.1"\nport = {port}\n'
    devices = ('[[bridge.devices]]\nname = "main-meter"\nbus = "line-1"\nunit_id = 1\n'
               'address_base = 0\npoll_interval = 0.3\n'
               'points = [{ name = "power", address = 0 }, { name = "energy", address = 2 }]\n')
    [result] = send_config(session, ["site7"], f"# line 1\n{buses}\n{devices}", keys[0], 30,
                           "renamed", 60, part="devices")
    assert (result.state, result.reason) == ("applied", ""), result
    assert config.read_text(encoding="utf-8") == (
        original[:original.index("[[bridge.buses]]")] + buses
        + between(original, "\n# meters\n", "[[bridge.devices]]") + devices
        + original[original.index("\n# what goes up"):])
    wait_for(lambda: "main-meter: online" in process.log())
    final = report(session, version=30, state="applied")
    assert (final["part"], final["running"]["sha256"]) == ("devices", sha256_text(
        config.read_text(encoding="utf-8")))
    assert [(v["source"], v["result"]) for v in history(config, state)] == [
        ("hand", "applied"), ("remote:30:devices", "applied")]


def test_a_forward_part_replaces_the_rules_and_keeps_every_other_byte(
        keys: tuple[Path, Path], plant: tuple[BrokerProcess, Path, Path, int],
        session: CloudSession) -> None:
    _, config, _, _ = plant
    original = config.read_text(encoding="utf-8")
    rules = ('[[uplink.forward]]\nfilter = "devices/+/power"\nqos = 0\n\n'
             '# alarms too\n[[uplink.forward]]\nfilter = "alarms/#"\n')
    [result] = send_config(session, ["site7"], rules, keys[0], 31, "fewer", 60, part="forward")
    assert (result.state, result.reason) == ("applied", ""), result
    assert config.read_text(encoding="utf-8") == (
        original[:original.index("[[uplink.forward]]")] + rules
        + original[original.index("\n# kept as it is"):])
    assert report(session, version=31, state="applied")["part"] == "forward"


def test_a_bad_part_is_refused_and_the_running_file_stays(
        keys: tuple[Path, Path], plant: tuple[BrokerProcess, Path, Path, int],
        session: CloudSession) -> None:
    _, config, state, _ = plant
    original = config.read_text(encoding="utf-8")
    key = load_signing_key(keys[0])

    def refused(version: int, part: str, fragment: str) -> str:
        session.publish(COMMAND, sign_config(key, "fleet-1", "site7", version, f"r{version}",
                                             fragment, part))
        got = report(session, state="refused", version=version)
        assert got["part"] == part
        assert config.read_text(encoding="utf-8") == original
        reason: str = got["reason"]
        return reason

    assert refused(40, "forward", '[[uplink.forward]]\nfilter = "a/#"\n[[listeners]]\n'
                   'port = 1884\n') == ("part 'forward' may only hold uplink.forward; found "
                                         "listeners")
    assert refused(41, "devices", '[bridge]\nprefix = "x"\n') == (
        "part 'devices' may only hold bridge.buses, bridge.devices, bridge.serial, "
        "bridge.opcua; found bridge.prefix")
    assert refused(42, "forward", "[[uplink.forward]\n").startswith(
        "part 'forward' is not valid TOML")
    # A device on a bus the part does not hold: the check of `outpost check-config` says so.
    reason = refused(43, "devices", '[[bridge.devices]]\nname = "meter"\nbus = "plc"\n'
                     'unit_id = 1\naddress_base = 0\npoints = [{ name = "p", address = 0 }]\n')
    assert reason.startswith("invalid configuration: bridge.devices") and \
        "unknown bus 'plc' (buses: none)" in reason, reason
    versions = history(config, state)
    assert [(v["source"], v["result"]) for v in versions] == [("hand", "applied"),
                                                              ("remote:43:devices", "refused")]
    assert "[[bridge.buses]]" not in subprocess.run(
        [sys.executable, "-m", "outpost", "config", "show", "2", "--config", str(config),
         "--state-dir", str(state)], capture_output=True, text=True, cwd=ROOT,
        check=True).stdout


def test_a_part_that_leaves_a_device_offline_rolls_back_by_itself(
        keys: tuple[Path, Path], plant: tuple[BrokerProcess, Path, Path, int],
        session: CloudSession) -> None:
    _, config, state, port = plant
    original = config.read_text(encoding="utf-8")
    moved = between(original, "[[bridge.buses]]", "\n# what goes up").replace(
        f"port = {port}", f"port = {free_port()}")  # nobody answers there
    [result] = send_config(session, ["site7"], moved, keys[0], 50, "moved", 90, part="devices")
    assert result.state == "rolled back", result
    assert "not healthy within 4 s: " in result.reason and "meter" in result.reason
    assert config.read_text(encoding="utf-8") == original
    assert [(v["source"], v["result"]) for v in history(config, state)] == [
        ("hand", "applied"), ("remote:50:devices", "rolled back"), ("rollback:1", "applied")]
    final = report(session, version=50, state="rolled back")
    assert final["part"] == "devices"
    assert final["running"]["sha256"] == sha256_text(original)


def test_a_part_that_disables_a_device_is_applied(
        keys: tuple[Path, Path], plant: tuple[BrokerProcess, Path, Path, int],
        session: CloudSession) -> None:
    """A disabled device is not expected to answer: the health check does not wait for it."""
    _, config, _, _ = plant
    original = config.read_text(encoding="utf-8")
    disabled = between(original, "[[bridge.buses]]", "\n# what goes up").replace(
        'unit_id = 1\n', 'unit_id = 1\nenabled = false\n')
    [result] = send_config(session, ["site7"], disabled, keys[0], 60, "off", 90, part="devices")
    assert (result.state, result.reason) == ("applied", ""), result
    assert "enabled = false" in config.read_text(encoding="utf-8")


def test_the_cloud_command_sends_a_part(
        cloud: Mosquitto, keys: tuple[Path, Path], plant: tuple[BrokerProcess, Path, Path, int],
        tmp_path: Path) -> None:
    """`config send --part devices` as docs/operations.md shows it, and an empty part, which
    is sent only with --remove-all."""
    process, config, _, port = plant
    fragment = tmp_path / "line-2-meters.toml"
    fragment.write_text(f'# every bus and device\n[[bridge.buses]]\nname = "line-2"\n'
                        f'type = "tcp"\nhost = "127.0.0.1"\nport = {port}\n\n'
                        '[[bridge.devices]]\nname = "{gateway_id}-meter"\nbus = "line-2"\n'
                        'unit_id = 1\naddress_base = 0\n'
                        'points = [{ name = "power", address = 0 }]\n', encoding="utf-8")

    def send(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "cloud_spark.fleet", "config", "send", "--broker",
             f"127.0.0.1:{cloud.port}", "--gateway", "site*", "--signing-key", str(keys[0]),
             "--wait", "60", *args], capture_output=True, text=True, cwd=ROOT, timeout=120,
            check=False)

    out = send("--part", "devices", "--config", str(fragment))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "sending part devices, version " in out.stdout and "to 1 gateway(s)" in out.stdout
    assert out.stdout.splitlines()[-1].startswith("site7  version ")
    assert " applied after " in out.stdout.splitlines()[-1]
    assert 'name = "site7-meter"\nbus = "line-2"\n' in config.read_text(encoding="utf-8")
    wait_for(lambda: "site7-meter: online" in process.log())
    empty = tmp_path / "no-rules.toml"
    empty.write_text("# nothing goes up any more\n", encoding="utf-8")
    out = send("--part", "forward", "--config", str(empty))
    assert out.returncode == 2 and out.stderr == (
        f"{empty}: holds no table: as part 'forward' it would remove every one of them on the "
        "gateways; add --remove-all if that is what you mean\n")
    assert "[[uplink.forward]]" in config.read_text(encoding="utf-8")
    out = send("--part", "forward", "--config", str(empty), "--remove-all")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "uplink.forward" not in config.read_text(encoding="utf-8")
    assert "# what goes up\n\n# kept as it is\n[limits]" in config.read_text(encoding="utf-8")
