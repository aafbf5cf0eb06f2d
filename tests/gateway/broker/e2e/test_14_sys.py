"""14 sys: `$SYS/broker/...` statistics published (retained) at the configured interval;
leading wildcards never match `$SYS`; clients cannot publish into `$SYS`."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from gateway.broker.codec import Publish
from tests.gateway.broker.e2e.helpers import MosquittoSub, RawClient, wait_for
from tests.support.broker_proc import BrokerProcess, start_broker

INTERVAL = 0.5  # the broker ticks every 0.5 s
COUNTERS = ("messages/received", "messages/sent", "bytes/received", "bytes/sent")
TOPICS = sorted(
    [f"$SYS/broker/{name}" for name in (
        "version", "uptime", "clients/connected", "clients/maximum", "clients/total",
        "clients/disconnected", "subscriptions/count", "retained messages/count",
        "retained messages/refused",
        "messages/dropped", "messages/expired", "messages/denied", *COUNTERS)]
    + [f"$SYS/broker/{name}/per second" for name in COUNTERS]
)


@pytest.fixture(scope="module")
def sys_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = start_broker(tmp_path_factory.mktemp("sys"), f"[sys]\ninterval = {INTERVAL}\n")
    yield proc
    proc.stop()


def wait_retained(broker: BrokerProcess) -> dict[str, Publish]:
    """Subscribe to `$SYS/broker/#` until every statistic is retained; topic -> message."""
    def attempt() -> dict[str, Publish] | None:
        with RawClient.to(broker) as c:
            c.connect("")
            c.subscribe(("$SYS/broker/#", 0))
            got = {p.topic: p for p in c.sync() if isinstance(p, Publish)}
        return got if len(got) == len(TOPICS) else None
    return wait_for(attempt, timeout=3 * INTERVAL + 2, interval=0.2)


class SysWatcher:
    """A connected `$SYS/broker/#` subscriber that records live (RETAIN=0) updates."""

    def __init__(self, broker: BrokerProcess, client_id: str) -> None:
        self.client = RawClient.to(broker)
        self.client.connect(client_id)
        self.client.subscribe(("$SYS/broker/#", 0))

    def next_value(self, name: str, timeout: float = 3 * INTERVAL + 2) -> tuple[str, float]:
        """The next live value of `$SYS/broker/<name>` and when it arrived."""
        deadline = time.monotonic() + timeout
        while True:
            packet = self.client.recv(timeout=max(0.01, deadline - time.monotonic()))
            if isinstance(packet, Publish) and not packet.retain and \
                    packet.topic == f"$SYS/broker/{name}":
                return packet.payload.decode(), time.monotonic()

    def close(self) -> None:
        self.client.close()


def test_01_all_statistics_retained(sys_broker):
    got = wait_retained(sys_broker)
    assert sorted(got) == TOPICS
    assert all(p.retain and p.qos == 0 for p in got.values())
    assert got["$SYS/broker/version"].payload == b"outpost 0.1.0"
    uptime = got["$SYS/broker/uptime"].payload.decode()
    assert uptime.endswith(" seconds") and int(uptime.split()[0]) >= 0
    for name in COUNTERS:
        int(got[f"$SYS/broker/{name}"].payload)
        float(got[f"$SYS/broker/{name}/per second"].payload)


def test_02_published_at_interval(sys_broker):
    watcher = SysWatcher(sys_broker, "c14-02")
    try:
        first, at_first = watcher.next_value("uptime")
        second, at_second = watcher.next_value("uptime")
        assert at_second - at_first >= INTERVAL * 0.5
        assert int(first.split()[0]) <= int(second.split()[0])
    finally:
        watcher.close()


def test_03_wildcards_do_not_match_sys(sys_broker):
    with RawClient.to(sys_broker) as hash_sub:
        hash_sub.connect("c14-03h")
        hash_sub.subscribe(("#", 0), ("+/broker/#", 0), ("+/+/uptime", 0))
        # subscribed after hash_sub: its next live value was published after both subscribes
        watcher = SysWatcher(sys_broker, "c14-03w")
        try:
            watcher.next_value("uptime")
        finally:
            watcher.close()
        leaked = [p.topic for p in hash_sub.sync() if p.topic.startswith("$")]
        assert leaked == []


def test_04_clients_connected_counts(sys_broker):
    watcher = SysWatcher(sys_broker, "c14-04w")
    extra = [RawClient.to(sys_broker) for _ in range(3)]
    try:
        before = int(watcher.next_value("clients/connected")[0])
        for index, client in enumerate(extra):
            client.connect(f"c14-04-{index}")
        wait_for(lambda: int(watcher.next_value("clients/connected")[0]) == before + 3,
                 timeout=3 * INTERVAL + 2)
        for client in extra:
            client.disconnect()
        wait_for(lambda: int(watcher.next_value("clients/connected")[0]) == before,
                 timeout=3 * INTERVAL + 2)
    finally:
        for client in extra:
            client.close()
        watcher.close()


def test_05_message_and_retained_counters(sys_broker):
    watcher = SysWatcher(sys_broker, "c14-05w")
    try:
        received = int(watcher.next_value("messages/received")[0])
        retained = int(watcher.next_value("retained messages/count")[0])
        with RawClient.to(sys_broker) as pub:
            pub.connect("c14-05p")
            for index in range(3):
                pub.publish(f"c14/05/{index}", b"r", qos=1, retain=True)
            for _ in range(7):
                pub.publish("c14/05/plain", b"p", qos=1)
            wait_for(lambda: int(watcher.next_value("retained messages/count")[0])
                     == retained + 3, timeout=3 * INTERVAL + 2)
            now_received = int(watcher.next_value("messages/received")[0])
            # 10 from the client, plus the broker's own $SYS publications in between
            assert now_received >= received + 10
            pub.publish("c14/05/0", b"", qos=1, retain=True)  # delete one
            wait_for(lambda: int(watcher.next_value("retained messages/count")[0])
                     == retained + 2, timeout=3 * INTERVAL + 2)
    finally:
        watcher.close()


def test_06_clients_cannot_publish_into_sys(sys_broker):
    watcher = SysWatcher(sys_broker, "c14-06w")
    try:
        with RawClient.to(sys_broker) as pub:
            pub.connect("c14-06p")
            # 3.1.1 has no way to refuse a PUBLISH: it is acknowledged and dropped
            assert pub.publish("$SYS/broker/version", b"fake", qos=1, retain=True) == [
                bytes.fromhex("40020001")]
            pub.send(bytes.fromhex("30160013") + b"$SYS/broker/version" + b"x")  # QoS 0
            pub.sync()
        assert all(p.payload != b"fake" for p in watcher.client.sync())
        got = wait_retained(sys_broker)
        assert got["$SYS/broker/version"].payload == b"outpost 0.1.0"
        value, _ = watcher.next_value("messages/denied")
        assert int(value) >= 2
    finally:
        watcher.close()


def test_07_mosquitto_sub_reads_sys(sys_broker):
    with MosquittoSub(sys_broker, "-t", "$SYS/broker/version", "-C", "1") as sub:
        assert sub.wait_lines(1, timeout=3 * INTERVAL + 2) == [
            "$SYS/broker/version|0|1|outpost 0.1.0"]
