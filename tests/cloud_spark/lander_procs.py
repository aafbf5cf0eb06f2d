"""The lander as a child process and paho-mqtt publishers playing the gateway uplink.

Shared by the lander tests. Publishers are paho-mqtt clients: MQTT 5 with user properties
(gateway ``gw-v5``) and MQTT 3.1.1 with the JSON envelope (gateway ``gw-v311``). The lander
runs as ``python -m cloud_spark land`` in a child process, so the tests also cover the module
entry point.
"""

from __future__ import annotations

import gzip
import json
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import paho.mqtt.client as mqtt
import pytest
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from tests.cloud_spark.conftest import T0
from tests.support.broker_proc import BrokerProcess
from tests.support.mosquitto import Mosquitto

ROOT = Path(__file__).resolve().parents[2]
EPOCH = "9f0c2b1e-0000-4000-8000-000000000001"


class Lander:
    """``python -m cloud_spark land`` as a child process; stderr collected line by line (at
    DEBUG: a line per received message, which the tests wait for)."""

    def __init__(
        self,
        broker: Mosquitto | BrokerProcess,
        root: Path,
        client_id: str,
        *extra: str,
        ready: str = "subscribed",
    ) -> None:
        cmd = [
            sys.executable, "-m", "cloud_spark", "--log-level", "DEBUG", "land",
            "--broker", f"{broker.host}:{broker.port}",
            "--topic", "outpost/#",
            "--root", str(root),
            "--client-id", client_id,
            *extra,
        ]  # fmt: skip
        self.proc = subprocess.Popen(
            cmd, cwd=ROOT, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.wait_for(ready)

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line)

    def wait_for(self, text: str, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while not any(text in line for line in self.lines):
            if self.proc.poll() is not None:
                self._reader.join(timeout=5)  # the lines it wrote before it exited
                if any(text in line for line in self.lines):
                    return
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"lander never said {text!r}:\n{''.join(self.lines)}")
            time.sleep(0.02)

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)

    def terminate(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout=30)
        self._reader.join(timeout=5)
        return code


@pytest.fixture
def landers() -> Iterator[list[Lander]]:
    started: list[Lander] = []
    yield started
    for lander in started:
        if lander.proc.poll() is None:
            lander.kill()


def point_payload(seq: int) -> str:
    return json.dumps({"value": seq * 0.5, "unit": "kW", "ts": T0 + seq, "quality": "good"})


def local_topic(seq: int) -> str:
    return f"devices/meter-{seq % 3}/power"


class Uplink:
    """A gateway uplink: numbered messages to the cloud broker, MQTT 5 or 3.1.1."""

    def __init__(self, broker: Mosquitto | BrokerProcess, *, v5: bool) -> None:
        self.v5 = v5
        self.gateway = "gw-v5" if v5 else "gw-v311"
        protocol = mqtt.MQTTv5 if v5 else mqtt.MQTTv311
        self.client = mqtt.Client(
            mqtt.CallbackAPIVersion.VERSION2, client_id=f"uplink-{self.gateway}", protocol=protocol
        )
        self.client.max_inflight_messages_set(100)
        self.client.connect(broker.host, broker.port)
        self.client.loop_start()

    def send(self, seq: int) -> mqtt.MQTTMessageInfo:
        topic = local_topic(seq)
        remote = f"outpost/{self.gateway}/{topic}"
        meta = {"gateway": self.gateway, "epoch": EPOCH, "seq": seq, "topic": topic}
        meta["received_ms"] = T0 + seq
        if self.v5:
            props = Properties(PacketTypes.PUBLISH)
            props.UserProperty = [(key, str(value)) for key, value in meta.items()]
            return self.client.publish(remote, point_payload(seq), qos=1, properties=props)
        envelope = {**meta, "encoding": "utf8", "payload": point_payload(seq)}
        return self.client.publish(remote, json.dumps(envelope), qos=1)

    def send_all(self, seqs: list[int]) -> None:
        infos = [self.send(seq) for seq in seqs]
        for info in infos:
            info.wait_for_publish(timeout=30)
            assert info.is_published()

    def close(self) -> None:
        self.client.loop_stop()
        self.client.disconnect()


def bronze_ids(root: Path) -> list[tuple[str, int]]:
    """(gateway, seq) of every committed bronze record, duplicates included."""
    ids = []
    for path in sorted(root.glob("bronze/*/*/part-*.json.gz")):
        with gzip.open(path, "rt") as handle:
            ids += [(rec["gateway"], rec["seq"]) for rec in map(json.loads, handle)]
    return ids


def wait_for_ids(
    root: Path, expected: set[tuple[str, int]], timeout: float = 40.0, copies: int = 0
) -> None:
    """Wait until every id in `expected` has landed, and at least `copies` rows in all (the
    copies a publisher sent again may still be on their way after the last new id)."""
    deadline = time.monotonic() + timeout
    while not (expected <= set(ids := bronze_ids(root)) and len(ids) >= copies):
        if time.monotonic() > deadline:
            missing = sorted(expected - set(ids))
            raise AssertionError(
                f"{len(missing)} ids never landed, e.g. {missing[:5]}; {len(ids)} of {copies} rows"
            )
        time.sleep(0.1)


def most_held(lander: Lander) -> int:
    """What a stopped lander reported as the most messages it held at once."""
    return _most_held(lander)[0]


def most_held_bytes(lander: Lander) -> int:
    """What a stopped lander reported as the most bronze bytes it held at once."""
    return _most_held(lander)[1]


def _most_held(lander: Lander) -> tuple[int, int]:
    for line in lander.lines:
        if found := re.search(r"most held at once: (\d+), (\d+) bytes", line):
            return int(found.group(1)), int(found.group(2))
    raise AssertionError(f"no 'most held' line:\n{''.join(lander.lines)}")
