"""A real `outpost run` whose state directory is on a small tmpfs that runs full.

Fill, free a little, restart (SIGKILL), drain, refill, then free everything: with
`min_free_bytes = 0` (the disk really fills: the space reserve and the short WAL carry the
store) and with the default headroom. What must hold throughout:
- every QoS 1 message whose PUBACK the publisher got is delivered to the persistent
  subscriber after the restart (and the ones acknowledged after the restart, at the end);
- every refusal reaches the client: PUBACK 0x97 (5.0), the connection closed without a
  PUBACK (3.1.1), CONNACK 0x97 (5.0) / 3 (3.1.1) for a new persistent session;
- nothing wedges: the drain's acknowledgements commit, a publish is answered, a CONNECT gets
  a CONNACK, and once space returns the broker accepts again without a restart.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from gateway.broker.codec import MQTT_5, ConnAck, PubAck, Publish
from gateway.broker.codec.packets import Properties
from tests.gateway.broker.e2e.helpers import ClosedError, RawClient, wait_for
from tests.storage.conftest import small_tmpfs
from tests.support.broker_proc import BrokerProcess, start_broker

TOPIC = "full/data"
PAYLOAD = os.urandom(1000)
PERSIST = Properties(session_expiry_interval=3600)
MiB = 1 << 20


def start(workdir: Path, run: int, state: Path, min_free: int | None) -> BrokerProcess:
    config = "[limits]\nmax_queued_messages = 1000000\nmax_queued_bytes = 1000000000\n"
    if min_free is not None:
        config += f"[storage]\nmin_free_bytes = {min_free}\n"
    return start_broker(workdir / f"run{run}", config, ("--state-dir", str(state)))


def free_on(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def fill(filler: Path, leave: int) -> None:
    """Grow `filler` until the file system has `leave` bytes free."""
    with open(filler, "ab") as f:
        grow = free_on(filler.parent) - leave
        if grow > 0:
            os.posix_fallocate(f.fileno(), f.seek(0, os.SEEK_END), grow)


def shrink(filler: Path, by: int) -> None:
    os.truncate(filler, max(0, filler.stat().st_size - by))


def publish_until_refused(broker: BrokerProcess, start_at: int, limit: int) -> list[int]:
    """QoS 1 from a 5.0 client until a PUBACK says 0x97; returns the acknowledged numbers."""
    acked: list[int] = []
    with RawClient.to(broker, MQTT_5) as pub:
        ack = pub.decode(pub.connect(f"pub-{start_at}"))
        assert isinstance(ack, ConnAck) and ack.reason_code == 0
        for n in range(start_at, start_at + limit):
            [frame] = pub.publish(TOPIC, n.to_bytes(4, "big") + PAYLOAD, qos=1)
            puback = pub.decode(frame)
            assert isinstance(puback, PubAck)
            if puback.reason_code == 0x97:
                return acked
            assert puback.reason_code == 0
            acked.append(n)
    raise AssertionError(f"no 0x97 after {limit} messages")


def accepted_again(broker: BrokerProcess, n: int) -> bool:
    with RawClient.to(broker, MQTT_5) as pub:
        pub.connect(f"pub-again-{n}")
        [frame] = pub.publish(TOPIC, n.to_bytes(4, "big") + PAYLOAD, qos=1)
        puback = pub.decode(frame)
        assert isinstance(puback, PubAck) and puback.reason_code in (0, 0x97)
        return puback.reason_code == 0


def drain(broker: BrokerProcess) -> set[int]:
    """Connect the persistent subscriber and read (and acknowledge) all it has queued."""
    got: set[int] = set()
    with RawClient.to(broker) as sub:
        assert sub.connect("sub", clean=False) == bytes.fromhex("20020100")  # session present
        while True:
            try:
                packet = sub.recv(timeout=3)
            except AssertionError:  # nothing more within 3 s: drained
                break
            assert isinstance(packet, Publish)
            sub.ack(packet)
            got.add(int.from_bytes(packet.payload[:4], "big"))
        sub.disconnect()
    return got


def refusals_are_visible(broker: BrokerProcess) -> None:
    with RawClient.to(broker) as pub3:  # 3.1.1: closed without PUBACK, so it sends again
        assert pub3.connect("pub3") == bytes.fromhex("20020000")
        with pytest.raises(ClosedError):
            pub3.publish(TOPIC, b"refused", qos=1)
    with RawClient.to(broker, MQTT_5) as new5:
        ack = new5.decode(new5.connect("new5", clean=False, properties=PERSIST))
        assert isinstance(ack, ConnAck) and ack.reason_code == 0x97
    with RawClient.to(broker) as new3:
        assert new3.connect("new3", clean=False) == bytes.fromhex("20020003")


@pytest.mark.parametrize("min_free", [0, None], ids=["min_free_bytes=0", "default-headroom"])
def test_fill_free_restart_drain_refill(tmp_path: Path, min_free: int | None) -> None:
    headroom = 0 if min_free == 0 else 64 * MiB
    with small_tmpfs(tmp_path / "small", f"{headroom // MiB + 24}m") as mount:
        state, filler = mount / "state", mount / "filler"
        broker = start(tmp_path, 1, state, min_free)
        try:
            with RawClient.to(broker) as sub:
                sub.connect("sub", clean=False)
                sub.subscribe((TOPIC, 1))
                sub.disconnect()
            fill(filler, headroom + 1 * MiB)
            acked = publish_until_refused(broker, 0, 20_000)
            assert acked, "some messages fit before the disk was full"
            refusals_are_visible(broker)
            shrink(filler, 3 * MiB)  # a little space comes back
            broker.stop(signal.SIGKILL)
            broker = start(tmp_path, 2, state, min_free)
            assert drain(broker) >= set(acked)
            # no wedge: a publish and a new CONNECT are answered
            more = publish_until_refused(broker, 100_000, 20_000)
            with RawClient.to(broker, MQTT_5) as probe:
                ack = probe.decode(probe.connect("probe", clean=False, properties=PERSIST))
                assert isinstance(ack, ConnAck) and ack.reason_code in (0, 0x97)
            filler.unlink()  # the disk empties: accepted again, no restart
            wait_for(lambda: accepted_again(broker, 200_000), timeout=15, interval=0.5)
            assert drain(broker) >= {*more, 200_000}
            log = broker.log()
            assert "Traceback" not in log
            if min_free == 0:
                assert "released the space reserve" in log
        finally:
            broker.stop(signal.SIGKILL)
