"""Crash tests: a real `outpost run --state-dir`, killed with SIGKILL at random moments.

What must hold after every restart:
- every QoS 1/2 message whose PUBACK / PUBREC the publisher received is delivered to the
  persistent subscriber that was offline (or online) when the broker died;
- QoS 2 messages reach the subscriber's application exactly once (the publisher resends
  what it had no acknowledgement for, with DUP and the same packet id, and PUBREL for what
  got a PUBREC: the broker's restored incoming QoS 2 state keeps those from being routed
  twice; the subscriber deduplicates by packet id as the protocol says);
- a retained topic reads back the value of its last acknowledged retained PUBLISH (or of a
  later one the publisher had sent but got no PUBACK for, never an older one), and a topic
  whose clear was acknowledged stays cleared;
- a persistent session whose CONNACK arrived is present, every subscription whose SUBACK
  arrived delivers (at the granted QoS) and every acknowledged UNSUBSCRIBE is gone (again up
  to later requests sent without an answer);
- a corrupt database file does not stop the broker.

Moments are drawn from a seeded generator, so a failure can be replayed; the tests that
kill at random moments print them (shown with the output of a failed test, or with -s).
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from gateway.broker.codec.packets import (
    Connect,
    Disconnect,
    PubAck,
    PubComp,
    Publish,
    PubRec,
    PubRel,
    SubAck,
    Subscribe,
    Subscription,
    UnsubAck,
    Unsubscribe,
)
from tests.gateway.broker.e2e.helpers import ClosedError, RawClient
from tests.support.broker_proc import BrokerProcess, start_broker

CONFIG = """\
[limits]
max_queued_messages = 1000000
max_queued_bytes = 1000000000
max_inflight = 20

[storage]
queue_page = 50
"""
TOPIC = "crash/data"
SEED = 20260611
# More moments for a soak run: OUTPOST_CRASH_MOMENTS=50 pytest tests/storage/test_crash.py
MOMENTS = int(os.environ.get("OUTPOST_CRASH_MOMENTS", "0"))


def broker(workdir: Path, n: int) -> BrokerProcess:
    return start_broker(workdir / f"run{n}", CONFIG, ("--state-dir", str(workdir / "state")))


def kill(proc: BrokerProcess) -> None:
    proc.stop(signal.SIGKILL)


@dataclass
class Publisher:
    """A persistent-session publisher that pipelines QoS 1/2 and records what was acked."""

    client_id: str
    qos_of: dict[int, int]  # message number -> qos
    window: int = 40
    acked: set[int] = field(default_factory=set)  # PUBACK or PUBREC received
    # in-flight state kept across reconnects, like a real client session
    unacked: dict[int, int] = field(default_factory=dict)  # packet id -> message number
    released: dict[int, int] = field(default_factory=dict)  # PUBREL sent, waiting PUBCOMP
    next_number: int = 0
    next_pid: int = 0

    def _pid(self) -> int:
        while True:
            self.next_pid = self.next_pid % 65535 + 1
            if self.next_pid not in self.unacked and self.next_pid not in self.released:
                return self.next_pid

    def _publish(self, c: RawClient, pid: int, number: int, dup: bool) -> None:
        c.send(Publish(TOPIC, b"m%06d" % number, self.qos_of[number], False, dup, pid))

    def run(self, proc: BrokerProcess, stop_after: int | None = None) -> bool:
        """Publish everything (resending first); False if the broker went away."""
        try:
            with RawClient.to(proc, timeout=10) as c:
                c.send(Connect(self.client_id, 4, False, 60))
                assert c.recv_frame()[:2] == b"\x20\x02"
                for pid, number in sorted(self.unacked.items()):
                    self._publish(c, pid, number, dup=True)
                for pid in sorted(self.released):
                    c.send(PubRel(pid))
                total = len(self.qos_of) if stop_after is None else stop_after
                while self.next_number < total or self.unacked or self.released:
                    while self.next_number < total and len(self.unacked) < self.window:
                        pid = self._pid()
                        self.unacked[pid] = self.next_number
                        self._publish(c, pid, self.next_number, dup=False)
                        self.next_number += 1
                    packet = c.recv()
                    if isinstance(packet, PubAck):
                        number = self.unacked.pop(packet.packet_id)
                        self.acked.add(number)
                    elif isinstance(packet, PubRec):
                        number = self.unacked.pop(packet.packet_id)
                        self.acked.add(number)
                        self.released[packet.packet_id] = number
                        c.send(PubRel(packet.packet_id))
                    elif isinstance(packet, PubComp):
                        self.released.pop(packet.packet_id, None)
                c.send(Disconnect())
            return True
        except (ClosedError, ConnectionError, OSError):
            return False


@dataclass
class Subscriber:
    """A persistent-session subscriber that completes QoS 1/2 flows and dedupes QoS 2."""

    client_id: str
    got: list[int] = field(default_factory=list)  # message numbers handed to the application
    qos2_pending: set[int] = field(default_factory=set)  # packet ids received, no PUBREL yet

    def subscribe(self, proc: BrokerProcess) -> None:
        with RawClient.to(proc) as c:
            c.send(Connect(self.client_id, 4, False, 60))
            c.recv_frame()
            c.send(Subscribe(1, [Subscription("crash/#", 2)]))
            assert c.recv_frame()[0] == 0x90
            c.send(Disconnect())

    def drain(self, proc: BrokerProcess, want: set[int], quiet: float = 1.0,
              limit: float = 30.0) -> bool:
        """Receive until `want` is covered and nothing came for `quiet` s; False if killed."""
        deadline = time.monotonic() + limit
        try:
            with RawClient.to(proc, timeout=quiet) as c:
                c.send(Connect(self.client_id, 4, False, 60))
                assert c.recv_frame()[:2] == b"\x20\x02"
                while time.monotonic() < deadline:
                    try:
                        packet = c.recv(quiet)
                    except AssertionError as exc:
                        if isinstance(exc, ClosedError):
                            return False
                        if want <= set(self.got):
                            c.send(Disconnect())
                            return True
                        continue
                    if isinstance(packet, Publish):
                        number = int(packet.payload[1:])
                        pid = packet.packet_id or 0
                        if packet.qos == 2:
                            if pid not in self.qos2_pending:
                                self.qos2_pending.add(pid)
                                self.got.append(number)
                            c.send(PubRec(pid))
                        else:
                            self.got.append(number)
                            if packet.qos == 1:
                                c.send(PubAck(pid))
                    elif isinstance(packet, PubRel):
                        self.qos2_pending.discard(packet.packet_id)
                        c.send(PubComp(packet.packet_id))
                raise AssertionError(f"not all delivered within {limit} s")
        except (ConnectionError, OSError):
            return False


def check_delivery(publisher: Publisher, subscriber: Subscriber) -> None:
    counts = Counter(subscriber.got)
    missing = sorted(publisher.acked - set(counts))
    assert not missing, f"{len(missing)} acknowledged message(s) lost, e.g. {missing[:10]}"
    twice = sorted(n for n, c in counts.items() if c > 1 and publisher.qos_of[n] == 2)
    assert not twice, f"QoS 2 delivered more than once: {twice[:10]}"


def kill_later(proc: BrokerProcess, delay: float) -> threading.Timer:
    timer = threading.Timer(delay, kill, (proc,))
    timer.start()
    return timer


@pytest.mark.parametrize("moment", range(MOMENTS or 4))
def test_kill_while_publishing_to_an_offline_subscriber(tmp_path: Path, moment: int) -> None:
    rng = random.Random(SEED + moment)
    count = 1500
    publisher = Publisher("pub", {n: 1 + (n % 2) for n in range(count)})
    subscriber = Subscriber("sub")
    proc = broker(tmp_path, 0)
    subscriber.subscribe(proc)
    # A gated PUBACK proves the commit that holds the subscription went through.
    assert Publisher("sync", {0: 1}).run(proc)
    timer = kill_later(proc, rng.uniform(0.05, 1.5))
    finished = publisher.run(proc)
    timer.join()
    kill(proc)
    acked_before_crash = set(publisher.acked)
    proc = broker(tmp_path, 1)
    try:
        if not finished:
            assert publisher.run(proc), proc.log()
        assert subscriber.drain(proc, set(range(count)))
    finally:
        proc.stop()
    assert acked_before_crash <= set(subscriber.got)
    check_delivery(publisher, subscriber)
    assert set(subscriber.got) == set(range(count))  # everything was resent and acked


@pytest.mark.parametrize("moment", range(MOMENTS or 3))
def test_kill_while_the_subscriber_drains(tmp_path: Path, moment: int) -> None:
    rng = random.Random(SEED + 100 + moment)
    count = 1500
    publisher = Publisher("pub", {n: 1 + (n % 2) for n in range(count)})
    subscriber = Subscriber("sub")
    proc = broker(tmp_path, 0)
    subscriber.subscribe(proc)
    assert publisher.run(proc)
    runs = 1
    for _round in range(2):  # kill twice while messages flow to the subscriber
        timer = kill_later(proc, rng.uniform(0.05, 0.8))
        done = subscriber.drain(proc, set(range(count)))
        timer.join()
        kill(proc)
        proc = broker(tmp_path, runs)
        runs += 1
        if done:
            break
    try:
        subscriber.drain(proc, set(range(count)))
    finally:
        proc.stop()
    check_delivery(publisher, subscriber)


def test_qos2_completed_just_before_a_kill_is_not_delivered_again(tmp_path: Path) -> None:
    """The window the random kills hit only sometimes, hit every time.

    The subscriber completes the QoS 2 flow of each message (PUBREC, PUBREL, PUBCOMP) and the
    broker is killed at once. For exactly once, the broker must have stored "PUBREC received"
    before its PUBREL reached the subscriber: a restarted broker then resends PUBREL, not the
    PUBLISH, which the subscriber (that already forgot the packet id) would take as new.
    """
    count = 5
    publisher = Publisher("pub", dict.fromkeys(range(count), 2))
    subscriber = Subscriber("sub")
    proc = broker(tmp_path, 0)
    subscriber.subscribe(proc)
    assert publisher.run(proc)
    with RawClient.to(proc) as c:
        c.send(Connect("sub", 4, False, 60))
        c.recv_frame()
        completed = 0
        while completed < count:
            packet = c.recv()
            if isinstance(packet, Publish):
                subscriber.got.append(int(packet.payload[1:]))
                c.send(PubRec(packet.packet_id or 0))
            elif isinstance(packet, PubRel):
                c.send(PubComp(packet.packet_id))
                completed += 1
        kill(proc)
    proc = broker(tmp_path, 1)
    try:
        subscriber.drain(proc, set(range(count)), quiet=0.5)
    finally:
        proc.stop()
    check_delivery(publisher, subscriber)


def test_subscription_acknowledged_just_before_a_kill_survives(tmp_path: Path) -> None:
    """A SUBACK for a persistent session promises the subscription: kill right after it."""
    proc = broker(tmp_path, 0)
    with RawClient.to(proc) as c:
        c.send(Connect("sub", 4, False, 60))
        c.recv_frame()
        c.send(Subscribe(1, [Subscription("crash/#", 1)]))
        assert c.recv_frame()[0] == 0x90
        kill(proc)
    proc = broker(tmp_path, 1)
    try:
        publisher = Publisher("pub", {0: 1})
        assert publisher.run(proc)
        subscriber = Subscriber("sub")
        subscriber.drain(proc, {0}, quiet=0.5, limit=5)
    finally:
        proc.stop()
    assert subscriber.got == [0]


SUB_FILTERS = [f"subs/{k}" for k in range(16)]  # fewer than max_inflight: no delivery waits


@dataclass
class SubscriptionChanger:
    """A persistent-session client that pipelines SUBSCRIBE / UNSUBSCRIBE of `SUB_FILTERS`.

    Op n is (filter, qos) for SUBSCRIBE or (filter, None) for UNSUBSCRIBE. Requests that got no
    answer before a kill are not resent (MQTT does not): their outcome stays unknown.
    """

    client_id: str
    ops: list[tuple[str, int | None]]
    window: int = 10
    acked: set[int] = field(default_factory=set)  # SUBACK / UNSUBACK received
    next_op: int = 0
    connect_sent: bool = False  # a CONNECT went out: the session may exist
    connack: bool = False  # a CONNACK arrived: the session must exist
    error: BaseException | None = None

    def run(self, proc: BrokerProcess, start_delay: float) -> None:
        """Connect after `start_delay` s and send the ops until done or the broker goes away."""
        time.sleep(start_delay)
        pending: dict[int, int] = {}  # packet id -> op
        pid = 0
        try:
            with RawClient.to(proc, timeout=10) as c:
                self.connect_sent = True
                c.send(Connect(self.client_id, 4, False, 60))
                assert c.recv_frame()[:2] == b"\x20\x02"
                self.connack = True
                while self.next_op < len(self.ops) or pending:
                    while self.next_op < len(self.ops) and len(pending) < self.window:
                        pid = pid % 65535 + 1
                        topic_filter, qos = self.ops[self.next_op]
                        if qos is None:
                            c.send(Unsubscribe(pid, [topic_filter]))
                        else:
                            c.send(Subscribe(pid, [Subscription(topic_filter, qos)]))
                        pending[pid] = self.next_op
                        self.next_op += 1
                    packet = c.recv()
                    if isinstance(packet, SubAck | UnsubAck):
                        self.acked.add(pending.pop(packet.packet_id))
                    elif isinstance(packet, Publish):
                        c.ack(packet)  # a probe of an earlier check, resent on reconnect
                c.send(Disconnect())
        except (ClosedError, ConnectionError, OSError):
            pass
        except BaseException as exc:  # re-raised by the test thread
            self.error = exc

    def allowed(self) -> dict[str, set[int | None]]:
        """Per filter: the subscription QoS (None: none) the broker may hold now."""
        sent = self.ops[: self.next_op]
        last_acked: dict[str, int] = {}
        for number in self.acked:
            topic_filter = sent[number][0]
            last_acked[topic_filter] = max(last_acked.get(topic_filter, -1), number)
        allowed: dict[str, set[int | None]] = {
            f: set() if f in last_acked else {None} for f in SUB_FILTERS
        }
        for number, (topic_filter, qos) in enumerate(sent):
            if number >= last_acked.get(topic_filter, -1):
                allowed[topic_filter].add(qos)
        return allowed


def subscription_ops(rng: random.Random, count: int) -> list[tuple[str, int | None]]:
    """Random SUBSCRIBE (QoS 0 or 1) and, one in three, UNSUBSCRIBE requests."""
    return [
        (rng.choice(SUB_FILTERS), None if rng.random() < 1 / 3 else rng.randrange(2))
        for _ in range(count)
    ]


def check_sessions(proc: BrokerProcess, clients: list[SubscriptionChanger], probe: int) -> None:
    """Reconnect every client, publish one QoS 1 probe per filter and see who gets it how."""
    conns: list[RawClient] = []
    try:
        for client in clients:
            conns.append(c := RawClient.to(proc, timeout=10))
            connack = c.connect(client.client_id, clean=False)
            assert connack[:2] == b"\x20\x02" and connack[3] == 0, connack
            present = bool(connack[2] & 1)
            if client.connack:
                assert present, f"{client.client_id}: acknowledged session lost"
            elif not client.connect_sent:
                assert not present, f"{client.client_id}: session that never connected"
            client.connect_sent = client.connack = True
        tag = b"probe%d" % probe
        with RawClient.to(proc, timeout=10) as p:
            p.connect("probe")
            for topic in SUB_FILTERS:
                p.publish(topic, tag, qos=1)  # PUBACK: routed to every subscribed session
        wrong = []
        for client, c in zip(clients, conns, strict=True):
            got: dict[str, int] = {}
            while publishes := [x for x in c.sync() if isinstance(x, Publish)]:
                for packet in publishes:  # earlier probes (resent), then this one
                    c.ack(packet)
                    if packet.payload == tag:
                        assert packet.topic not in got, f"{client.client_id}: {packet} twice"
                        got[packet.topic] = packet.qos
            c.send(Disconnect())
            for topic_filter, allowed in client.allowed().items():
                if got.get(topic_filter) not in allowed:
                    wrong.append((client.client_id, topic_filter, got.get(topic_filter), allowed))
        assert not wrong, (
            f"{len(wrong)} subscription(s) not as acknowledged, "
            f"(client, filter, delivered QoS, allowed) e.g. {wrong[:5]}"
        )
    finally:
        for c in conns:
            c.close()


@pytest.mark.parametrize("moment", range(MOMENTS or 3))
def test_kill_while_sessions_subscribe_and_unsubscribe(tmp_path: Path, moment: int) -> None:
    """Persistent-session clients connect (some while the kill comes) and change their
    subscriptions, pipelined; the broker is killed twice mid-stream and checked after each
    restart: sessions, subscriptions and their QoS as acknowledged."""
    rng = random.Random(SEED + 300 + moment)
    clients = [SubscriptionChanger(f"subs-{n}", subscription_ops(rng, 10000)) for n in range(6)]
    proc = broker(tmp_path, 0)
    try:
        for round_ in range(2):
            delay = rng.uniform(0.05, 1.0)
            # the first client works all along, the others connect up to the kill itself
            starts = [0.0] + [rng.uniform(0.0, delay) for _ in clients[1:]]
            timer = kill_later(proc, delay)
            threads = [
                threading.Thread(target=client.run, args=(proc, start))
                for client, start in zip(clients, starts, strict=True)
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            timer.join()
            kill(proc)
            for client in clients:
                if client.error is not None:
                    raise client.error
            print(f"moment {moment} round {round_}: killed after {delay:.3f} s; clients "
                  f"started at {', '.join(f'{s:.2f}' for s in starts)} s; sent/acked "
                  f"{', '.join(f'{c.next_op}/{len(c.acked)}' for c in clients)}")
            proc = broker(tmp_path, round_ + 1)
            check_sessions(proc, clients, round_)
    finally:
        proc.stop()


def test_qos2_packet_id_reused_after_a_kill_is_a_new_message(tmp_path: Path) -> None:
    """PUBCOMP frees the publisher's packet id: the broker must have forgotten it durably.

    Otherwise the restarted broker still awaits PUBREL for that id and takes the next
    message that reuses it for a resend: acknowledged with PUBREC but never routed.
    """
    proc = broker(tmp_path, 0)
    subscriber = Subscriber("sub")
    subscriber.subscribe(proc)
    with RawClient.to(proc) as c:
        c.send(Connect("pub", 4, False, 60))
        c.recv_frame()
        c.publish(TOPIC, b"m%06d" % 0, qos=2, packet_id=1)  # through PUBCOMP
        kill(proc)
    proc = broker(tmp_path, 1)
    try:
        with RawClient.to(proc) as c:
            c.send(Connect("pub", 4, False, 60))
            c.recv_frame()
            c.publish(TOPIC, b"m%06d" % 1, qos=2, packet_id=1)  # a new message, same id
        subscriber.drain(proc, {0, 1}, quiet=0.5, limit=5)
    finally:
        proc.stop()
    assert sorted(subscriber.got) == [0, 1]


RETAINED_TOPICS = 150


@dataclass
class RetainedPublisher(Publisher):
    """A `Publisher` whose message n sets (payload v<n>) or clears (empty) a retained topic."""

    ops: list[tuple[str, bytes]] = field(default_factory=list)  # message number -> (topic, payload)

    def _publish(self, c: RawClient, pid: int, number: int, dup: bool) -> None:
        topic, payload = self.ops[number]
        c.send(Publish(topic, payload, 1, True, dup, pid))


def retained_ops(rng: random.Random, count: int) -> list[tuple[str, bytes]]:
    """Sets and clears (one in five) of random topics; every set payload is unique."""
    return [
        (f"ret/{rng.randrange(RETAINED_TOPICS)}", b"" if rng.random() < 0.2 else b"v%d" % n)
        for n in range(count)
    ]


def read_retained(proc: BrokerProcess) -> dict[str, bytes]:
    with RawClient.to(proc, timeout=10) as c:
        c.send(Connect("ret-check", 4, True, 60))
        assert c.recv_frame()[:2] == b"\x20\x02"
        c.send(Subscribe(1, [Subscription("ret/#", 0)]))
        got: dict[str, bytes] = {}
        for packet in c.sync():
            if isinstance(packet, Publish):
                assert packet.retain and packet.topic not in got, packet
                got[packet.topic] = packet.payload
        return got


def check_retained(publisher: RetainedPublisher, got: dict[str, bytes]) -> None:
    """Each topic holds what its last acknowledged op left or what a later sent op left."""
    sent = publisher.ops[: publisher.next_number]
    last_acked: dict[str, int] = {}
    for number in publisher.acked:
        topic = sent[number][0]
        last_acked[topic] = max(last_acked.get(topic, -1), number)
    allowed: dict[str, set[bytes]] = {}
    for number, (topic, payload) in enumerate(sent):
        if topic not in last_acked:
            allowed.setdefault(topic, {b""})  # nothing acknowledged: may still be unset
        if number >= last_acked.get(topic, -1):
            allowed.setdefault(topic, set()).add(payload)
    wrong = {
        topic: (
            got.get(topic, b"<absent>"),
            (sent[last_acked[topic]][1] or b"<cleared>") if topic in last_acked else b"<none>",
        )
        for topic in set(allowed) | set(got)
        if got.get(topic, b"") not in allowed.get(topic, {b""})
    }
    assert not wrong, (
        f"{len(wrong)} retained topic(s) lost an acknowledged value, "
        f"topic: (read back, last acknowledged) e.g. {sorted(wrong.items())[:5]}"
    )


@pytest.mark.parametrize("moment", range(MOMENTS or 3))
def test_kill_while_setting_and_clearing_retained_messages(tmp_path: Path, moment: int) -> None:
    """A stream of retained sets and clears (QoS 1, pipelined), killed twice mid-stream.

    After each restart the retained store is read back before the publisher resumes (it then
    resends what got no PUBACK, with DUP, and goes on).
    """
    rng = random.Random(SEED + 200 + moment)
    count = 50000  # many times two kills' worth: each kill lands mid-stream
    publisher = RetainedPublisher(
        "ret-pub", dict.fromkeys(range(count), 1), ops=retained_ops(rng, count)
    )
    proc = broker(tmp_path, 0)
    try:
        for round_ in range(2):
            delay = rng.uniform(0.05, 1.2)
            timer = kill_later(proc, delay)
            finished = publisher.run(proc)
            timer.join()
            kill(proc)
            print(f"moment {moment} round {round_}: killed after {delay:.3f} s; "
                  f"{publisher.next_number} sent, {len(publisher.acked)} acked, {finished=}")
            proc = broker(tmp_path, round_ + 1)
            check_retained(publisher, read_retained(proc))
    finally:
        proc.stop()


def test_corrupt_database_does_not_stop_the_broker(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    (state / "outpost.db").write_bytes(b"\x00" * 8192)  # what mosquitto #2639 found on SD cards
    proc = broker(tmp_path, 0)
    try:
        subscriber = Subscriber("sub")
        subscriber.subscribe(proc)
        publisher = Publisher("pub", {0: 1, 1: 2})
        assert publisher.run(proc)
        assert subscriber.drain(proc, {0, 1}, quiet=0.3)
        assert "moved aside" in proc.log()
    finally:
        proc.stop()
    assert len(list(state.glob("outpost.db.corrupt-*"))) == 1
