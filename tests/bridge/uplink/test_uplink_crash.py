"""The uplink with the SQLite outbox: acknowledged means stored, SIGKILL loses nothing."""

from __future__ import annotations

import random
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.bridge.uplink.test_uplink_e2e import (
    Recorder,
    props,
    publish_local,
    uplink_config,
    wait_for,
)
from tests.conftest import require
from tests.support.broker_proc import BrokerProcess
from tests.support.mosquitto import Mosquitto, start_mosquitto


@pytest.fixture
def cloud(tmp_path: Path) -> Iterator[Mosquitto]:
    require("mosquitto")
    config = ("max_queued_messages 0",)
    with start_mosquitto(tmp_path / "cloud", persistence=True, extra_config=config) as broker:
        yield broker


def test_sigkill_during_drain_loses_nothing(
    cloud: Mosquitto, broker_factory: Callable[..., BrokerProcess], tmp_path: Path
) -> None:
    count = 2000
    state = tmp_path / "state"
    config = uplink_config(cloud.port, remote_extra="rate_messages = 800")  # a 2.5 s drain
    recorder = Recorder(cloud.port, "site7/#", client_id="cloud-sub", clean=False).start()
    recorder.stop()  # its persistent session collects at the cloud broker from now on
    cloud_stopped = False
    gateway = broker_factory(config, "--state-dir", str(state))
    try:
        cloud.stop()
        cloud_stopped = True
        publish_local(gateway.port, [(f"devices/m/{i % 10}", b"%d" % i) for i in range(count)])
        rng = random.Random(7)
        cloud.start()
        cloud_stopped = False
        for _ in range(3):  # kill the gateway at random moments of the drain
            time.sleep(rng.uniform(0.2, 1.0))
            gateway.stop(signal.SIGKILL)
            gateway = broker_factory(config, "--state-dir", str(state))
        recorder = Recorder(cloud.port, "site7/#", client_id="cloud-sub", clean=False).start()
        wait_for(lambda: len({props(m)["seq"] for m in list(recorder.messages)}) >= count,
                 timeout=120)
        by_seq: dict[int, set[bytes]] = {}
        epochs = set()
        for message in recorder.messages:
            ids = props(message)
            by_seq.setdefault(int(ids["seq"]), set()).add(message.payload)
            epochs.add(ids["epoch"])
        assert sorted(by_seq) == list(range(1, count + 1))  # nothing missing, no gap
        assert all(len(payloads) == 1 for payloads in by_seq.values())  # one id, one message
        assert len(epochs) == 1  # the same store epoch across restarts
        duplicates = len(recorder.messages) - count
        print(f"duplicates after 3 kills: {duplicates}")
    finally:
        recorder.stop()
        if cloud_stopped:
            cloud.start()
