"""Landing rate of one lander behind a cloud broker that caps its in-flight messages.

    .venv/bin/python -m bench.cloud.lander_rate [--messages 5000] [--max-inflight 64]
        [--roll-seconds 5] [--receive-maximum 1000]

Starts outpost as the cloud broker (``[limits] max_inflight`` and ``receive_maximum`` both
``--max-inflight``: it sends at most that many unacknowledged messages to a client and
announces the number in its CONNACK, as EMQX does) and ``python -m cloud_spark land`` with
the given flags, publishes ``--messages`` QoS 1 messages numbered like the gateway uplink
(MQTT 5 user properties; at most ``--max-inflight`` unacknowledged, the broker's Receive
Maximum), and reports the time until every one of them is in a committed bronze file, the
messages landed per second and the number of bronze files. (mosquitto 2.0 does not cap
what it sends to an MQTT 5 client below the client's own Receive Maximum, so it cannot
stall the lander this way.)
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import paho.mqtt.client as mqtt
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from bench.compare import free_port
from bench.uplink.drain import wait_port

ROOT = Path(__file__).resolve().parents[2]


def _landed(root: Path) -> tuple[int, int]:
    """(distinct seqs, files) in committed bronze files."""
    seqs: set[int] = set()
    files = sorted(root.glob("bronze/*/*/part-*.json.gz"))
    for path in files:
        with gzip.open(path, "rt") as handle:
            seqs.update(json.loads(line)["seq"] for line in handle)
    return len(seqs), len(files)


def _wait_for_log(path: Path, text: str, deadline: float) -> None:
    while text not in (path.read_text() if path.exists() else ""):
        if time.monotonic() > deadline:
            raise SystemExit(f"{path} never said {text!r}")
        time.sleep(0.05)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=5000)
    parser.add_argument("--max-inflight", type=int, default=64)
    parser.add_argument("--roll-seconds", type=float, default=5.0)
    parser.add_argument("--receive-maximum", type=int, default=1000)
    parser.add_argument("--timeout", type=float, default=600.0)
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="lander-rate-"))
    port = free_port()
    (work / "outpost.toml").write_text(
        f"[limits]\nmax_inflight = {args.max_inflight}\nreceive_maximum = {args.max_inflight}\n"
        "max_queued_messages = 10000000\nmax_queued_bytes = 10000000000\n"
    )
    broker = subprocess.Popen(
        [
            sys.executable, "-m", "outpost", "run", "--listen", f"127.0.0.1:{port}",
            "--config", str(work / "outpost.toml"),
        ],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    lander = None
    try:
        wait_port(port)
        root = work / "landing"
        with (work / "lander.log").open("w") as log_file:  # the child keeps its own copy
            lander = subprocess.Popen(
                [
                    sys.executable, "-m", "cloud_spark", "land",
                    "--broker", f"127.0.0.1:{port}", "--topic", "outpost/#", "--root", str(root),
                    "--client-id", "lander-rate", "--roll-seconds", str(args.roll_seconds),
                    "--receive-maximum", str(args.receive_maximum),
                ],
                cwd=ROOT,
                stderr=log_file,
            )  # fmt: skip
        # the lander's subscription exists before the first publish
        _wait_for_log(work / "lander.log", "subscribed", time.monotonic() + 30)
        client = mqtt.Client(
            mqtt.CallbackAPIVersion.VERSION2, client_id="uplink-rate", protocol=mqtt.MQTTv5
        )
        client.max_inflight_messages_set(args.max_inflight)
        client.connect("127.0.0.1", port)
        client.loop_start()
        started = time.monotonic()
        infos = []
        for seq in range(1, args.messages + 1):
            props = Properties(PacketTypes.PUBLISH)  # type: ignore[no-untyped-call]
            meta = {"gateway": "gw-rate", "epoch": "e-rate", "seq": seq, "topic": "devices/m/p"}
            props.UserProperty = [(key, str(value)) for key, value in meta.items()]
            payload = json.dumps({"value": seq, "ts": 1_717_372_800_000 + seq, "quality": "good"})
            topic = "outpost/gw-rate/devices/m/p"
            infos.append(client.publish(topic, payload, 1, properties=props))
        for info in infos:
            info.wait_for_publish(timeout=60)
        published = time.monotonic() - started
        deadline = started + args.timeout
        landed, files = _landed(root)
        while landed < args.messages and time.monotonic() < deadline:
            time.sleep(0.2)
            landed, files = _landed(root)
        elapsed = time.monotonic() - started
        client.loop_stop()
        client.disconnect()
    finally:
        if lander is not None:
            lander.terminate()
            lander.wait(timeout=30)
        broker.terminate()
        broker.wait(timeout=10)
        shutil.rmtree(work, ignore_errors=True)
    print(
        json.dumps(
            {
                "messages": args.messages,
                "landed": landed,
                "max_inflight": args.max_inflight,
                "roll_seconds": args.roll_seconds,
                "published_s": round(published, 2),
                "landed_s": round(elapsed, 2),
                "landed_per_s": round(landed / elapsed),
                "files": files,
            }
        )
    )
    return 0 if landed == args.messages else 1


if __name__ == "__main__":
    sys.exit(main())
