"""The lander with batched messages from a real mosquitto: good batches land row by row, each
kind of bad batch is quarantined with its reason, acknowledged, and the lander keeps going."""

from __future__ import annotations

import json
from pathlib import Path

import paho.mqtt.client as mqtt

from tests.cloud_spark.test_lander import Lander, bronze_ids, landers, wait_for_ids
from tests.support.mosquitto import Mosquitto
from tests.support.waiting import wait_for
from tests.vectors import batch as v

__all__ = ["landers"]  # the fixture, shared with test_lander.py


def quarantined(root: Path) -> list[dict[str, object]]:
    return [json.loads(path.read_text()) for path in sorted(root.glob("quarantine/*/*.json"))]


def test_bad_batches_are_quarantined_with_their_reason_and_good_ones_land(
    mosquitto: Mosquitto, tmp_path: Path, landers: list
) -> None:
    root = tmp_path / "landing"
    flags = ("--roll-seconds", "0.2", "--max-batch-bytes", str(1 << 20))  # the vectors' limit
    assert all(limit == 1 << 20 for *_, limit in v.BAD)
    lander = Lander(mosquitto, root, "lander-b", *flags)
    landers.append(lander)
    client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, protocol=mqtt.MQTTv311)
    client.connect(mosquitto.host, mosquitto.port)
    client.loop_start()
    try:
        payloads = [v.ZSTD_BATCH, *(bad for _, bad, _, _ in v.BAD), v.ZLIB_BATCH]
        for payload in payloads:
            client.publish("outpost/gw-7/m1/p", payload, qos=1).wait_for_publish(30)
        wait_for(lambda: len(quarantined(root)) >= len(v.BAD), timeout=60)
        wait_for_ids(root, {("gw-7", 5), ("gw-7", 6), ("gw-7", 8)}, copies=6)
    finally:
        client.loop_stop()
        client.disconnect()
    assert lander.terminate() == 0
    assert sorted(bronze_ids(root)) == sorted([("gw-7", 5), ("gw-7", 6), ("gw-7", 8)] * 2)
    found = quarantined(root)
    assert [q["reason"] for q in found] == [reason for _, _, reason, _ in v.BAD]  # in order
    assert all(q["remote_topic"] == "outpost/gw-7/m1/p" and q["payload_base64"] for q in found)

    again = Lander(mosquitto, root, "lander-b", *flags)  # nothing redelivered
    landers.append(again)
    assert again.terminate() == 0
    assert len(quarantined(root)) == len(v.BAD)
    assert len(bronze_ids(root)) == 6
