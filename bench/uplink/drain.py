"""Uplink benchmark: a backlog built during an outage drains to a local mosquitto.

Run: `.venv/bin/python -m bench.uplink.drain --messages 1000000 [--durability full] [--batch]`

1. outpost starts (pinned to CPU 0) with an uplink to a mosquitto port where nothing listens yet;
2. a raw publisher sends N QoS 1 messages (64-byte payloads, 64 in flight): local publish rate
   with the uplink storing every message (run once with `--no-uplink` for the baseline);
3. mosquitto starts with a raw subscriber on the remote topics; the time until all N arrived
   gives the drain rate; outpost's RSS is sampled every 0.5 s during the drain.

With `--batch` the forward rule sends batches (`batch = {}`: the defaults), and the subscriber
counts the rows inside them.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench import wire
from bench.compare import HOST, free_port
from bench.procstat import rss_kib
from cloud_spark.batch_format import decode_batch, is_batch

REPO = Path(__file__).resolve().parents[2]



def wait_port(port: int, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex((HOST, port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"nothing listens on {port}")


def mqtt_connect(port: int, client_id: str) -> socket.socket:
    sock = socket.create_connection((HOST, port))
    sock.sendall(wire.connect(client_id, keepalive=600))
    assert sock.recv(4) == b"\x20\x02\x00\x00", "CONNECT refused"
    return sock


def publish_all(port: int, count: int, window: int = 64) -> float:
    """Send `count` QoS 1 publishes with `window` in flight; returns seconds taken."""
    sock = mqtt_connect(port, "bench-uplink-pub")
    payload = b"x" * 64
    start = time.perf_counter()
    sent = acked = 0
    buffer = bytearray()
    while acked < count:
        batch = []
        while sent < count and sent - acked < window:
            sent += 1
            batch.append(wire.publish(f"devices/bench/{sent % 100}", payload, 1,
                                      sent % 65535 + 1))
        if batch:
            sock.sendall(b"".join(batch))
        buffer += sock.recv(65536)
        acked += len(buffer) // 4
        del buffer[: len(buffer) // 4 * 4]
    elapsed = time.perf_counter() - start
    sock.close()
    return elapsed


def count_remote(port: int, count: int, timeout: float) -> tuple[float, int]:
    """Subscribe on the cloud broker and wait for `count` publishes; (seconds, received)."""
    sock = mqtt_connect(port, "bench-uplink-cloud")
    sock.sendall(wire.subscribe(1, "site/#", 0))
    start = time.perf_counter()
    buffer = bytearray()
    received = 0
    sock.settimeout(1.0)
    deadline = time.monotonic() + timeout
    while received < count and time.monotonic() < deadline:
        try:
            data = sock.recv(1 << 20)
        except TimeoutError:
            continue
        if not data:
            break
        buffer += data
        end = 0
        for first, body, packet_end in wire.iter_packets(buffer):
            if first >> 4 == wire.PUBLISH:
                payload = bytes(buffer[body + 2 + len(wire.publish_topic(buffer, body)):
                                       packet_end])
                received += len(decode_batch(payload).rows) if is_batch(payload) else 1
            end = packet_end
        del buffer[:end]
    elapsed = time.perf_counter() - start
    sock.close()
    return elapsed, received


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--durability", choices=["full", "normal", "memory"], default="full")
    parser.add_argument("--no-uplink", action="store_true", help="baseline publish rate")
    parser.add_argument("--batch", action="store_true", help="a batched forward rule")
    parser.add_argument("--inflight", type=int, default=64, help="PUBLISHes awaiting PUBACK")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="outpost-uplink-bench-"))
    cloud_port, local_port = free_port(), free_port()
    config = work / "outpost.toml"
    config.write_text(
        f'gateway_id = "bench"\n[storage]\ndurability = "{args.durability}"\n'
        "[limits]\nmax_queued_messages = 10000000\n"
        f"[uplink]\nenabled = {'false' if args.no_uplink else 'true'}\n"
        f'[[uplink.remotes]]\naddresses = ["{HOST}:{cloud_port}"]\ninflight = {args.inflight}\n'
        "backoff_initial = 0.2\nbackoff_max = 0.5\n"
        '[[uplink.forward]]\nfilter = "devices/#"\ntopic = { strip = "devices/", '
        'prefix = "site/" }\nmax_messages = 10000000\nmax_bytes = 4000000000\n'
        + ("batch = {}\n" if args.batch else "")
    )
    taskset = ["taskset", "-c", "0"] if shutil.which("taskset") else []
    os.sched_setaffinity(0, {1} if os.cpu_count() and os.cpu_count() > 1 else {0})  # type: ignore[operator]
    log = (work / "outpost.log").open("wb")
    outpost = subprocess.Popen(
        [*taskset, sys.executable, "-m", "outpost", "run", "--listen", f"{HOST}:{local_port}",
         "--config", str(config), "--state-dir", str(work / "state")],
        cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
    )
    mosquitto = None
    result: dict[str, object] = {"messages": args.messages, "durability": args.durability,
                                 "uplink": not args.no_uplink, "batch": args.batch}
    try:
        wait_port(local_port)
        rss_before = rss_kib(outpost.pid)
        publish_s = publish_all(local_port, args.messages)
        result["local_publish_msg_s"] = round(args.messages / publish_s)
        result["rss_after_fill_kib"] = rss_kib(outpost.pid)
        result["rss_before_kib"] = rss_before
        print(f"local QoS 1 publish: {args.messages / publish_s:,.0f} msg/s "
              f"({'uplink on' if not args.no_uplink else 'no uplink'}, {args.durability})")
        if not args.no_uplink:
            conf = work / "mosquitto.conf"
            conf.write_text(f"listener {cloud_port} {HOST}\nallow_anonymous true\n"
                            "persistence false\nmax_queued_messages 0\n")
            mosquitto = subprocess.Popen(["/usr/sbin/mosquitto", "-c", str(conf)],
                                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            wait_port(cloud_port)
            samples: list[int] = []
            done = threading.Event()

            def sample() -> None:
                while not done.wait(0.5):
                    samples.append(rss_kib(outpost.pid))

            sampler = threading.Thread(target=sample, daemon=True)
            sampler.start()
            if os.environ.get("PYSPY"):
                subprocess.Popen(["py-spy", "record", "-d", "8", "-o", os.environ["PYSPY"],
                                  "-f", "raw", "-p", str(outpost.pid)])
            drain_s, received = count_remote(cloud_port, args.messages, timeout=3600)
            done.set()
            sampler.join()
            result.update(drain_msg_s=round(received / drain_s), received=received,
                          drain_seconds=round(drain_s, 1),
                          rss_drain_min_kib=min(samples, default=0),
                          rss_drain_max_kib=max(samples, default=0))
            print(f"drain: {received:,} of {args.messages:,} in {drain_s:.1f} s = "
                  f"{received / drain_s:,.0f} msg/s; RSS during drain "
                  f"{min(samples, default=0) / 1024:.0f}-{max(samples, default=0) / 1024:.0f} MiB")
    finally:
        outpost.terminate()
        outpost.wait(30)
        if mosquitto is not None:
            mosquitto.terminate()
            mosquitto.wait(10)
        log.close()
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
