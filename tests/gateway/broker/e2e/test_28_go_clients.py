"""28 The Eclipse Paho Go clients: paho.mqtt.golang (MQTT 3.1.1) and paho.golang (MQTT 5).

paho.mqtt.golang is the client inside Telegraf and many Go services, paho.golang's autopaho its
MQTT 5 successor. `goclients/` (a Go module, its dependencies fetched by `make go-packages`) is
built once per test session; each test runs one of its scenarios against our broker and reads
the JSON lines it prints: what each client received per topic, its CONNACKs, its connections.

Covered: QoS 0/1/2 with exact delivery counts (and a QoS 2 publish downgraded to a QoS 1
subscription), persistent sessions (clean session false; MQTT 5 session expiry and resume),
paho.mqtt.golang's FileStore and autopaho's file queue carrying QoS 1/2 messages published while
the broker was down across its restart (killed, started again on the same port and state
directory), auto-reconnect after a broker restart, wills on a cut connection (MQTT 5: after
DISCONNECT 0x04, with user properties, delayed, and cancelled by resuming the session).

A restart is `kill -9`: sessions and subscriptions must be in the store at their SUBACK, which is
what the durability contract promises (docs/design.md).
"""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.broker_proc import BrokerProcess, launch, start_broker
from tests.support.waiting import TIMEOUT, wait_for

GOCLIENTS = Path(__file__).with_name("goclients")
COUNT = 50  # messages per topic
# Bounds a stuck scenario only: each takes well under a few seconds on an idle machine.
RUN_TIMEOUT = 60.0
# The Go version the modules of goclients/go.mod need (their own go directives).
GO_NEEDED = (1, 24)
DURABLE = """
[storage]
durability = "full"
state_dir = "{state}"
"""


def _go() -> str:
    """The `go` command, or skip: the tests need Go ≥ 1.24 (`make system-packages`)."""
    go = shutil.which("go")
    if go is None:
        pytest.skip("go is not installed (make system-packages)")
    version = subprocess.run([go, "env", "GOVERSION"], capture_output=True, text=True,
                             check=True).stdout
    match = re.match(r"go(\d+)\.(\d+)", version.strip())
    if match is None or (int(match[1]), int(match[2])) < GO_NEEDED:
        pytest.skip(f"{version.strip()} is older than the go{GO_NEEDED[0]}.{GO_NEEDED[1]} that "
                    "goclients/go.mod needs")
    return go


@pytest.fixture(scope="session")
def goclients(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The scenario program, built once per test session (per worker) into a temporary folder.

    The modules come from the module cache `make go-packages` filled; `-mod=readonly` keeps a
    build from rewriting go.mod or go.sum in the work tree.
    """
    go = _go()
    binary = tmp_path_factory.mktemp("goclients") / "goclients"
    built = subprocess.run(
        [go, "build", "-mod=readonly", "-buildvcs=false", "-o", str(binary), "."],
        cwd=GOCLIENTS, capture_output=True, text=True, timeout=600, check=False,
    )
    assert built.returncode == 0, f"go build failed:\n{built.stderr}"
    return binary


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One durable broker for the scenarios without a restart; each uses its own topics."""
    workdir = tmp_path_factory.mktemp("go-clients")
    proc = start_broker(workdir, DURABLE.format(state=workdir / "state"))
    yield proc
    proc.stop()


class RestartingBroker:
    """`outpost run` on a state directory that can be killed and started again on its port."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.state = workdir / "state"
        self.runs = 0
        self.proc = self._start("127.0.0.1:0")
        self.address = f"{self.proc.host}:{self.proc.port}"

    def _start(self, listen: str) -> BrokerProcess:
        self.runs += 1
        run = self.workdir / f"run{self.runs}"
        run.mkdir(parents=True)
        args = [sys.executable, "-m", "outpost", "--log-level", "DEBUG", "run",
                "--listen", listen, "--state-dir", str(self.state)]
        return launch(args, run / "broker.log", 15.0)[0]

    def restart(self) -> None:
        """Kill the broker (no chance to write anything more) and start it on the same port."""
        self.proc.stop(signal.SIGKILL)
        self.proc = self._start(self.address)

    def kill(self) -> None:
        self.proc.stop(signal.SIGKILL)

    def start_again(self) -> None:
        self.proc = self._start(self.address)

    def stop(self) -> None:
        self.proc.stop()


@pytest.fixture
def restarting(tmp_path: Path) -> Iterator[RestartingBroker]:
    proc = RestartingBroker(tmp_path / "broker")
    yield proc
    proc.stop()


class Scenario:
    """One run of the Go program: its JSON lines as they come, its exit status at the end."""

    def __init__(self, binary: Path, address: str, name: str, topic: str,
                 *extra: str) -> None:
        self.name = name
        self.stderr = open(binary.parent / f"{topic.replace('/', '-')}.stderr", "w+")  # noqa: SIM115
        self.process = subprocess.Popen(
            [str(binary), "-broker", address, "-topic", topic, "-count", str(COUNT),
             "-timeout", f"{TIMEOUT:.0f}s", *extra, name],
            stdout=subprocess.PIPE, stderr=self.stderr, text=True,
        )
        self.events: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            event = json.loads(line)
            with self._lock:
                self.events.append(event)

    def _found(self, event: str) -> dict[str, Any] | None:
        with self._lock:
            return next((e for e in self.events if e["event"] in (event, "error")), None)

    def wait_event(self, event: str) -> dict[str, Any]:
        """The first `event` line, once printed; fails on an error line."""
        found = wait_for(lambda: self._found(event), RUN_TIMEOUT,
                         message=f"{self.name}: no {event!r}; {self.events}")
        assert found is not None and found["event"] == event, f"{self.name}: {found}"
        return found

    def finish(self) -> list[dict[str, Any]]:
        """Wait for the program to end successfully; every event it printed."""
        try:
            code = self.process.wait(RUN_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise
        finally:
            self._reader.join(TIMEOUT)
            if self.process.stdout is not None:
                self.process.stdout.close()
            self.stderr.seek(0)
            errors = self.stderr.read()
            self.stderr.close()
        assert code == 0, f"{self.name} exited {code}: {self.events}\n{errors}"
        assert self.events[-1] == {"event": "done", "complete": True}
        return self.events

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        if not self.stderr.closed:
            self.stderr.close()


def run(binary: Path, address: str, name: str, topic: str) -> list[dict[str, Any]]:
    """Run a scenario that needs nothing from the test to its end."""
    scenario = Scenario(binary, address, name, topic)
    try:
        return scenario.finish()
    finally:
        scenario.close()


def received(events: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The "received" lines by topic."""
    return {e["topic"]: e for e in events if e["event"] == "received"}


def exactly(count: int, qos: int) -> dict[str, Any]:
    """What a topic's "received" line holds when each of `count` messages came once, in order,
    at QoS `qos`."""
    return {"count": count, "distinct": count, "in_order": True, "qos": [qos], "retained": 0}


def summary(line: dict[str, Any]) -> dict[str, Any]:
    return {key: line[key] for key in ("count", "distinct", "in_order", "qos", "retained")}


def connacks(events: list[dict[str, Any]]) -> dict[Any, bool]:
    return {e["connection"]: e["session_present"] for e in events if e["event"] == "connack"}


# -- paho.mqtt.golang (MQTT 3.1.1) -----------------------------------------------------------


def test_v3_qos_0_1_2_each_message_once(goclients: Path, broker: BrokerProcess) -> None:
    events = run(goclients, f"{broker.host}:{broker.port}", "v3-qos", "c28/v3qos")
    got = received(events)
    assert {t: summary(line) for t, line in got.items()} == {
        "c28/v3qos/q0": exactly(COUNT, 0),
        "c28/v3qos/q1": exactly(COUNT, 1),
        "c28/v3qos/q2": exactly(COUNT, 2),
        # QoS 2 publishes to a QoS 1 subscription arrive at QoS 1 (3.8.4)
        "c28/v3qos/down": exactly(COUNT, 1),
    }


def test_v3_persistent_session_gets_what_was_published_while_away(
    goclients: Path, broker: BrokerProcess
) -> None:
    events = run(goclients, f"{broker.host}:{broker.port}", "v3-session", "c28/v3session")
    # 2: the stored session is resumed; 3: a clean session is never "present"; 4: the clean
    # session of 3 ended the stored one [MQTT-3.1.2-6].
    assert connacks(events) == {1: False, 2: True, 3: False, 4: False}
    got = received(events)
    assert summary(got["c28/v3session/s1"]) == exactly(COUNT, 1)
    assert summary(got["c28/v3session/s2"]) == exactly(COUNT, 2)


def test_v3_file_store_carries_qos_1_and_2_across_a_broker_restart(
    goclients: Path, restarting: RestartingBroker, tmp_path: Path
) -> None:
    store = tmp_path / "filestore"
    scenario = Scenario(goclients, restarting.address, "v3-filestore", "c28/v3store",
                        "-store", str(store))
    try:
        scenario.wait_event("ready")
        restarting.kill()
        scenario.wait_event("lost")
        stored = scenario.wait_event("stored")
        # One file per outgoing message: they wait in the client's store, not in memory.
        assert stored["files"] >= 2 * COUNT
        restarting.start_again()
        events = scenario.finish()
    finally:
        scenario.close()
    got = received(events)
    # Each message once. Not necessarily in the order published: the FileStore gives its
    # messages back sorted by file modification time with an unstable sort, and files written
    # within one tick of the kernel's clock share a time. The broker must keep the order in
    # which the client sent them again (MQTT 3.1.1, 4.6), which is the store's order.
    order = stored["resend_order"]  # packet ids: 1..COUNT on f1, then COUNT+1..2*COUNT on f2
    assert got["c28/v3store/f1"]["payloads"] == [str(i - 1) for i in order if i <= COUNT]
    assert got["c28/v3store/f2"]["payloads"] == [str(i - COUNT - 1) for i in order if i > COUNT]
    assert got["c28/v3store/f1"]["qos"] == [1] and got["c28/v3store/f2"]["qos"] == [2]
    # Both clients reconnected on their own. (The store's files are not checked: after a
    # resume paho.mqtt.golang 1.5 leaves some acknowledged messages' files behind, a number that
    # changes from run to run, while every message was delivered once and every token done.)
    connections = next(e for e in events if e["event"] == "connections")
    assert connections["subscriber"] >= 2 and connections["publisher"] >= 2


def test_v3_auto_reconnect_after_a_broker_restart(
    goclients: Path, restarting: RestartingBroker
) -> None:
    scenario = Scenario(goclients, restarting.address, "v3-reconnect", "c28/v3auto")
    try:
        scenario.wait_event("ready")
        restarting.restart()
        events = scenario.finish()
    finally:
        scenario.close()
    assert summary(received(events)["c28/v3auto/r"]) == exactly(2, 1)
    connections = next(e for e in events if e["event"] == "connections")
    assert connections["lost"] >= 1 and connections["up"] >= 2


def test_v3_will_when_the_connection_is_cut(goclients: Path, broker: BrokerProcess) -> None:
    events = run(goclients, f"{broker.host}:{broker.port}", "v3-will", "c28/v3will")
    # "proper" disconnected with DISCONNECT: its will is discarded [MQTT-3.14.4-3]; "broken"
    # lost its connection without one: its will is published [MQTT-3.1.2-8], before the marker.
    line = received(events)["c28/v3will/will"]
    assert line["payloads"] == ["broken", "marker"]
    assert line["qos"] == [1, 2]
    assert next(e for e in events if e["event"] == "client")["noticed_the_cut"] is True


# -- paho.golang autopaho (MQTT 5) -----------------------------------------------------------


def test_v5_qos_0_1_2_each_message_once(goclients: Path, broker: BrokerProcess) -> None:
    events = run(goclients, f"{broker.host}:{broker.port}", "v5-qos", "c28/v5qos")
    published = {e["topic"]: e["reasons"] for e in events if e["event"] == "published"}
    # QoS 0 has no acknowledgement: autopaho reports success (0) without one
    assert published == {f"c28/v5qos/{name}": {"0": COUNT} for name in ("q0", "q1", "q2", "down")}
    got = received(events)
    assert {t: summary(line) for t, line in got.items()} == {
        "c28/v5qos/q0": exactly(COUNT, 0),
        "c28/v5qos/q1": exactly(COUNT, 1),
        "c28/v5qos/q2": exactly(COUNT, 2),
        "c28/v5qos/down": exactly(COUNT, 1),
    }


def test_v5_session_expiry_keeps_and_resumes_the_session(
    goclients: Path, broker: BrokerProcess
) -> None:
    events = run(goclients, f"{broker.host}:{broker.port}", "v5-session", "c28/v5session")
    # 2: the session (expiry 300 s) is resumed with its messages; 3: the session with expiry 0
    # ended with its connection [MQTT-3.1.2-23], so nothing of it is present.
    assert connacks(events) == {1: False, 2: True, 3: False}
    got = received(events)
    assert summary(got["c28/v5session/s1"]) == exactly(COUNT, 1)
    assert summary(got["c28/v5session/s2"]) == exactly(COUNT, 2)
    assert got["c28/v5session/e"]["payloads"] == ["marker"]


def test_v5_file_queue_and_session_across_a_broker_restart(
    goclients: Path, restarting: RestartingBroker, tmp_path: Path
) -> None:
    scenario = Scenario(goclients, restarting.address, "v5-restart", "c28/v5restart",
                        "-store", str(tmp_path / "queue"))
    try:
        scenario.wait_event("ready")
        restarting.kill()
        scenario.wait_event("lost")
        assert scenario.wait_event("stored")["files"] >= 2 * COUNT
        restarting.start_again()
        events = scenario.finish()
    finally:
        scenario.close()
    got = received(events)
    # Each message once; the order is the file queue's, which goes by file modification time
    # (autopaho documents that messages closer than its resolution may swap), so not compared.
    for name, qos in (("f1", 1), ("f2", 2)):
        line = got[f"c28/v5restart/{name}"]
        assert sorted(map(int, line["payloads"])) == list(range(COUNT))
        assert line["qos"] == [qos]
    # the subscriber's session (expiry 300 s) outlived the broker's restart
    assert next(e for e in events if e["event"] == "connections")["session_present"][:2] == [
        False, True]


def test_v5_wills_after_0x04_a_cut_a_delay_and_not_after_a_resume(
    goclients: Path, broker: BrokerProcess
) -> None:
    events = run(goclients, f"{broker.host}:{broker.port}", "v5-will", "c28/v5will")
    line = received(events)["c28/v5will/will"]
    # "proper" sent DISCONNECT 0x00: no will; "0x04" asked for its will (3.14.2.1);
    # "broken" was cut; "late" (will delay 2 s) was cut and its will came after the delay;
    # "resumed" (same delay, cut first) came back before the delay ended: no will
    # [MQTT-3.1.3-9]. The marker proves nothing else was on its way.
    assert line["payloads"] == ["0x04", "broken", "late", "marker"]
    # paho.golang 0.23 packs will properties with CONNECT's property filter: of those the test
    # sets, only the user property reaches the wire (payload format, message expiry and content
    # type are dropped by the client), and that one must arrive unaltered [MQTT-3.1.3-10].
    assert line["properties"][1] == {"user:site": "outpost"}
    assert connacks(events) == {"resumed": True}
    delayed = next(e for e in events if e["event"] == "delayed")
    assert delayed["after_ms"] >= delayed["delay_ms"]
