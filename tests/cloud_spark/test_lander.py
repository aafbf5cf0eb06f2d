"""The lander against a real mosquitto: deferred acks, kill -9 mid-stream, clean SIGTERM.

Publishers and the lander process: :mod:`tests.cloud_spark.lander_procs`.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from pyspark.sql import SparkSession

from cloud_spark.cli import job_params, run_job
from cloud_spark.jobs import quality
from cloud_spark.tables import read_table
from tests.cloud_spark.lander_procs import (
    ROOT,
    Lander,
    Uplink,
    bronze_ids,
    landers,
    wait_for_ids,
)
from tests.support.broker_proc import start_broker
from tests.support.mosquitto import Mosquitto

__all__ = ["landers"]  # the fixture


def test_acks_wait_for_the_commit(mosquitto: Mosquitto, tmp_path: Path, landers: list) -> None:
    """A lander killed while holding received-but-uncommitted messages loses none of them.

    Had it acknowledged on receipt, the broker would not deliver them again. (15 messages:
    fewer than the Receive Maximum mosquitto announces, 20, at which a quiet stream makes
    the lander commit.)
    """
    root = tmp_path / "landing"
    slow = Lander(mosquitto, root, "lander-1", "--roll-seconds", "60")
    landers.append(slow)
    uplink = Uplink(mosquitto, v5=True)
    uplink.send_all(list(range(1, 16)))
    slow.wait_for("(15 pending)")  # all in an open (uncommitted) file
    assert bronze_ids(root) == []
    assert len(list(root.glob("bronze/*/*/.part-*.tmp"))) == 1
    slow.kill()
    fast = Lander(mosquitto, root, "lander-1", "--roll-seconds", "0.2")
    landers.append(fast)
    wait_for_ids(root, {("gw-v5", seq) for seq in range(1, 16)})
    assert fast.terminate() == 0
    assert list(root.glob("bronze/*/*/.part-*")) == []  # the killed run's temp file is gone
    uplink.close()


def test_a_broker_capping_in_flight_below_the_window_does_not_stall_the_lander(
    tmp_path: Path, landers: list
) -> None:
    """outpost as the cloud broker sends at most 64 unacknowledged messages (its default
    ``max_inflight``, announced as the Receive Maximum of its CONNACK) to a lander asking
    for 1,000: the lander commits when 64 are pending and the stream stops, instead of
    waiting an hour for its roll timer. (The last 8 are fewer than a window: a stream that
    is merely quiet waits for the timer, here replaced by SIGTERM's commit.)"""
    broker = start_broker(tmp_path / "cloud")
    try:
        root = tmp_path / "landing"
        lander = Lander(broker, root, "lander-4", "--roll-seconds", "3600")
        landers.append(lander)
        uplink = Uplink(broker, v5=True)
        for start in range(1, 201, 50):  # 50 at a time: within the broker's Receive Maximum
            uplink.send_all(list(range(start, start + 50)))
        wait_for_ids(root, {("gw-v5", seq) for seq in range(1, 193)})  # three windows of 64
        assert lander.terminate() == 0
        assert sorted(bronze_ids(root)) == [("gw-v5", seq) for seq in range(1, 201)]
        uplink.close()
    finally:
        broker.stop()


def test_sigterm_commits_and_acks_before_exit(
    mosquitto: Mosquitto, tmp_path: Path, landers: list
) -> None:
    root = tmp_path / "landing"
    lander = Lander(mosquitto, root, "lander-2", "--roll-seconds", "60")
    landers.append(lander)
    uplink = Uplink(mosquitto, v5=False)
    uplink.send_all(list(range(1, 11)))
    lander.wait_for("(10 pending)")
    assert bronze_ids(root) == []
    assert lander.terminate() == 0
    assert sorted(bronze_ids(root)) == [("gw-v311", seq) for seq in range(1, 11)]
    # The acks reached the broker before the disconnect: nothing is delivered again. The
    # session's unacknowledged messages would come first, before a new one.
    again = Lander(mosquitto, root, "lander-2", "--roll-seconds", "0.1")
    landers.append(again)
    uplink.send_all([11])
    wait_for_ids(root, {("gw-v311", 11)})
    assert again.terminate() == 0
    assert sorted(bronze_ids(root)) == [("gw-v311", seq) for seq in range(1, 12)]
    uplink.close()


def test_kill_mid_stream_then_silver_is_exactly_once(
    spark: SparkSession, mosquitto: Mosquitto, tmp_path: Path, landers: list
) -> None:
    root, out = tmp_path / "landing", tmp_path / "tables"
    n = 600
    flags = ("--roll-seconds", "0.2", "--roll-bytes", "8192", "--receive-maximum", "50")
    first = Lander(mosquitto, root, "lander-3", *flags)
    landers.append(first)
    uplinks = [Uplink(mosquitto, v5=True), Uplink(mosquitto, v5=False)]
    resent = list(range(100, 150))  # an uplink restart sends these again

    def publish() -> None:
        for start in range(1, n + 1, 50):
            batch = list(range(start, min(start + 50, n + 1)))
            for uplink in uplinks:
                uplink.send_all(batch)
            time.sleep(0.02)
        for uplink in uplinks:
            uplink.send_all(resent)

    publisher = threading.Thread(target=publish)
    publisher.start()
    deadline = time.monotonic() + 30
    while len(bronze_ids(root)) < 200:
        assert time.monotonic() < deadline, "the first lander landed too little"
        time.sleep(0.02)
    first.kill()  # mid-stream: the publishers are still going
    landed_by_first = len(bronze_ids(root))
    assert landed_by_first < 2 * n
    time.sleep(0.3)
    second = Lander(mosquitto, root, "lander-3", *flags)
    landers.append(second)
    publisher.join(timeout=60)
    expected = {(u.gateway, seq) for u in uplinks for seq in range(1, n + 1)}
    wait_for_ids(root, expected, copies=2 * n + len(resent))
    assert second.terminate() == 0
    for uplink in uplinks:
        uplink.close()

    ids = bronze_ids(root)
    assert set(ids) == expected  # every id at least once, nothing else
    assert len(ids) >= 2 * n + len(resent)  # the resent ones at least twice

    result = run_job(
        "silver", spark, str(root), str(out), job_params("silver", argparse.Namespace())
    )
    assert result["rows"] == 2 * n
    assert result["duplicates_removed"] == len(ids) - 2 * n
    messages = read_table(spark, str(out), "messages")
    assert messages.select("gateway", "seq").distinct().count() == 2 * n
    assert read_table(spark, str(out), "points").count() == 2 * n
    summary = quality.seq_summary(messages).collect()
    assert sorted((r["gateway"], r["last_seq"], r["missing"]) for r in summary) == [
        ("gw-v311", n, 0),
        ("gw-v5", n, 0),
    ]


def test_module_entry_rejects_a_bad_broker_address(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "cloud_spark", "land", "--broker", "nohost", "--topic", "#",
         "--root", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=30, check=False,
        env={**os.environ},
    )  # fmt: skip
    assert done.returncode == 2
    assert "expected HOST:PORT" in done.stderr


def test_two_landers_in_a_share_group_each_killed_once_land_every_id_once(
    spark: SparkSession, mosquitto: Mosquitto, tmp_path: Path, landers: list
) -> None:
    """Scale-out: ``--share`` splits the stream; each lander is SIGKILLed once and restarted."""
    root, out = tmp_path / "landing", tmp_path / "tables"
    n = 600
    flags = ("--share", "landers", "--roll-seconds", "0.2", "--receive-maximum", "50")
    running = {name: Lander(mosquitto, root, name, *flags) for name in ("lander-a", "lander-b")}
    landers.extend(running.values())
    uplinks = [Uplink(mosquitto, v5=True), Uplink(mosquitto, v5=False)]

    def publish() -> None:
        for start in range(1, n + 1, 25):
            for uplink in uplinks:
                uplink.send_all(list(range(start, min(start + 25, n + 1))))

    publisher = threading.Thread(target=publish)
    publisher.start()
    for name, after in (("lander-a", n // 2), ("lander-b", n)):
        deadline = time.monotonic() + 60
        while len(bronze_ids(root)) < after:
            assert time.monotonic() < deadline, f"too little landed before killing {name}"
            time.sleep(0.02)
        running[name].kill()  # mid-stream: the publisher is still going
        running[name] = Lander(mosquitto, root, name, *flags)
        landers.append(running[name])
    publisher.join(timeout=120)
    expected = {(u.gateway, seq) for u in uplinks for seq in range(1, n + 1)}
    wait_for_ids(root, expected, timeout=60)
    for lander in running.values():
        assert lander.terminate() == 0
    for uplink in uplinks:
        uplink.close()

    assert set(bronze_ids(root)) == expected
    files = [path.name for path in root.glob("bronze/*/*/part-*.json.gz")]
    assert all(any(name in file for file in files) for name in running)  # both shared the work
    result = run_job(
        "silver", spark, str(root), str(out), job_params("silver", argparse.Namespace())
    )
    assert result["rows"] == 2 * n
    messages = read_table(spark, str(out), "messages")
    assert messages.count() == messages.select("gateway", "seq").distinct().count() == 2 * n
    assert read_table(spark, str(out), "points").count() == 2 * n
