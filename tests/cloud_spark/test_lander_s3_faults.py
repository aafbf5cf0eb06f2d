"""The S3 lander under faults, against a real mosquitto and a real S3 server (SeaweedFS):
SIGKILL while uploads are in flight, and the S3 server down for a while. After each, every
published seq is in the bucket's bronze objects (duplicates are allowed: silver removes them),
and nothing that was not stored was acknowledged (the broker delivered it again)."""

from __future__ import annotations

import re
import signal
import threading
from pathlib import Path

from tests.cloud_spark.lander_procs import Lander, Uplink, landers
from tests.cloud_spark.test_lander_s3 import aws_env, s3_ids
from tests.support.mosquitto import Mosquitto
from tests.support.seaweedfs import SeaweedFS, start_seaweedfs, unique_bucket
from tests.support.waiting import wait_for

__all__ = ["aws_env", "landers"]  # the fixtures


def wait_landed(s3: SeaweedFS, bucket: str, seqs: range, timeout: float = 60.0) -> list[int]:
    """Wait until every seq of gw-v5 in `seqs` is in the bucket; returns every landed seq."""
    expected = {("gw-v5", seq) for seq in seqs}

    def landed() -> list[tuple[str, int]] | None:
        ids = s3_ids(s3, bucket, "landing")
        return ids if expected <= set(ids) else None

    ids = wait_for(landed, timeout=timeout, interval=0.2,
                   message=f"not every seq of {seqs} landed")  # fmt: skip
    return [seq for _, seq in ids]


def failed_attempts(lander: Lander) -> int:
    """The highest attempt number of a failed PUT the lander logged."""
    found = [int(m.group(1)) for line in lander.lines
             if (m := re.search(r"cannot store s3://\S+ \(attempt (\d+)\)", line))]  # fmt: skip
    return max(found, default=0)


def commits(lander: Lander) -> int:
    """How many files the lander logged as committed (stored, then acknowledged)."""
    return sum(" committed s3://" in line for line in lander.lines)


def test_a_lander_killed_mid_upload_loses_nothing(
    mosquitto: Mosquitto, aws_env: SeaweedFS, landers: list
) -> None:
    """Files of 50 messages committed every 50 ms while 2,000 arrive: the SIGKILL lands while
    uploads are in flight; the restarted lander gets what was not acknowledged again."""
    s3 = aws_env
    bucket = s3.create_bucket(unique_bucket("kill"))
    root = f"s3://{bucket}/landing"
    flags = ("--roll-seconds", "0.05", "--receive-maximum", "50", "--s3-endpoint", s3.endpoint)
    first = Lander(mosquitto, root, "lander-kill", *flags)
    landers.append(first)
    uplink = Uplink(mosquitto, v5=True)
    sender = threading.Thread(target=uplink.send_all, args=(list(range(1, 2001)),))
    sender.start()
    wait_for(lambda: commits(first) >= 5, message="the first lander committed nothing")
    first.kill()
    sender.join(timeout=60)
    second = Lander(mosquitto, root, "lander-kill", *flags)
    landers.append(second)
    seqs = wait_landed(s3, bucket, range(1, 2001))
    assert second.terminate() == 0
    uplink.close()
    assert set(seqs) == set(range(1, 2001))  # every seq, nothing else (copies allowed)


def test_the_lander_holds_its_acks_while_s3_is_down_and_lands_everything_after(
    mosquitto: Mosquitto, aws_env: SeaweedFS, tmp_path: Path, landers: list
) -> None:
    """Two outages of a server of its own (the session's other tests keep theirs): in the
    first the lander retries until S3 is back, then lands everything; in the second it is
    stopped (SIGTERM) while S3 is still down, gives up after its bound, exits non-zero, and
    the next lander gets every message it had not stored from the broker again."""
    with start_seaweedfs(tmp_path / "s3") as s3:  # the credentials of aws_env's
        bucket = s3.create_bucket(unique_bucket("outage"))
        root = f"s3://{bucket}/landing"
        flags = ("--roll-seconds", "0.2", "--s3-endpoint", s3.endpoint)
        lander = Lander(mosquitto, root, "lander-outage", *flags)
        landers.append(lander)
        uplink = Uplink(mosquitto, v5=True)
        uplink.send_all(list(range(1, 101)))
        wait_landed(s3, bucket, range(1, 101))

        # 1: down for ~8 s (four failed attempts, then a 3 s restart), then back: the same
        # lander lands the rest
        s3.stop(signal.SIGKILL)
        uplink.send_all(list(range(101, 401)))
        wait_for(lambda: failed_attempts(lander) >= 1, message="no PUT failed")
        committed = commits(lander)
        wait_for(lambda: failed_attempts(lander) >= 4, timeout=60,
                 message="the lander stopped retrying")  # fmt: skip
        assert commits(lander) == committed  # nothing committed, so nothing acked, meanwhile
        s3.start()
        seqs = wait_landed(s3, bucket, range(1, 401))
        assert set(seqs) == set(range(1, 401))
        lander.wait_for("stored s3://")  # the retried PUT, logged as such

        # 2: down again, the lander is told to stop: it gives up and acknowledges nothing
        s3.stop(signal.SIGKILL)
        before = len(lander.lines)
        uplink.send_all(list(range(401, 601)))
        wait_for(lambda: any("cannot store" in line for line in lander.lines[before:]),
                 timeout=60, message="no PUT failed in the second outage")  # fmt: skip
        assert lander.terminate() != 0
        assert any("gave up storing s3://" in line for line in lander.lines)
        s3.start()
        again = Lander(mosquitto, root, "lander-outage", *flags)
        landers.append(again)
        seqs = wait_landed(s3, bucket, range(1, 601))
        assert again.terminate() == 0
        uplink.close()
        assert set(seqs) == set(range(1, 601))
