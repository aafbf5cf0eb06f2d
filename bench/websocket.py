"""QoS 0 throughput of the WebSocket listener: paho-mqtt over `ws` to a subscriber over `ws`.

Theory of operation: `outpost run` is started (its own process) with one `ws` listener on a
free loopback port; a paho subscriber on `bench/ws` and a paho publisher connect over
WebSockets (`transport="websockets"`). The publisher sends `--messages` QoS 0 messages of
`--size` bytes as fast as paho takes them; the figure is messages delivered to the subscriber
per second, from the first publish to the last delivery, and the broker's CPU time per message
(user + system, from /proc: less sensitive than the rate to other load on the machine, and
not limited by paho, which is pure Python and often the slower side). Every message crosses the
WebSocket adapter twice (in from the publisher, out to the subscriber). Figures from a shared
machine are noisy: repeat with `--runs`.

    .venv/bin/python -m bench.websocket --messages 20000 --runs 3
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion

from bench.procstat import cpu_seconds

ROOT = Path(__file__).resolve().parents[1]
CONFIG = """\
[status]
enabled = false
[[listeners]]
type = "ws"
bind = "127.0.0.1:0"
"""
_LISTENING = re.compile(r"listening on ([0-9.]+):(\d+) \(ws\)")


def start_broker(workdir: Path) -> tuple[subprocess.Popen[str], int]:
    """`outpost run` with one ws listener; returns the process and the bound port."""
    config = workdir / "outpost.toml"
    config.write_text(CONFIG, encoding="utf-8")
    proc = subprocess.Popen(
        [sys.executable, "-m", "outpost", "--log-level", "WARNING", "run", "--config",
         str(config)],
        stdout=subprocess.PIPE, stderr=(workdir / "broker.log").open("w"), text=True, cwd=ROOT,
    )
    assert proc.stdout is not None
    for line in proc.stdout:
        match = _LISTENING.search(line)
        if match:
            return proc, int(match.group(2))
    proc.kill()
    raise RuntimeError(f"outpost did not start: {(workdir / 'broker.log').read_text()[-2000:]}")


def ws_client(client_id: str, port: int) -> mqtt.Client:
    """A connected paho client over WebSockets with its network loop running."""
    client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=client_id,
                         transport="websockets")
    client.ws_set_options(path="/mqtt")
    client.max_queued_messages_set(0)
    client.connect("127.0.0.1", port, keepalive=60)
    client.loop_start()
    return client


def one_run(port: int, broker_pid: int, messages: int, size: int) -> tuple[float, float]:
    """(messages per second delivered, broker CPU microseconds per message) for one burst."""
    done = threading.Event()
    subscribed = threading.Event()
    received = 0
    last = 0.0

    def on_message(_c: mqtt.Client, _u: object, _m: mqtt.MQTTMessage) -> None:
        nonlocal received, last
        received += 1
        if received == messages:
            last = time.perf_counter()
            done.set()

    sub = ws_client("bench-ws-sub", port)
    sub.on_message = on_message
    sub.on_subscribe = lambda *_args: subscribed.set()
    sub.subscribe("bench/ws", qos=0)
    if not subscribed.wait(10):
        raise RuntimeError("no SUBACK")
    pub = ws_client("bench-ws-pub", port)
    payload = b"x" * size
    try:
        cpu = cpu_seconds(broker_pid)
        first = time.perf_counter()
        for _ in range(messages):
            pub.publish("bench/ws", payload, qos=0)
        if not done.wait(120):
            raise RuntimeError(f"only {received} of {messages} messages arrived")
        return messages / (last - first), (cpu_seconds(broker_pid) - cpu) / messages * 1e6
    finally:
        for client in (pub, sub):
            client.disconnect()
            client.loop_stop()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--size", type=int, default=64, help="payload bytes")
    parser.add_argument("--runs", type=int, default=3)
    opts = parser.parse_args(argv)
    proc, port = start_broker(Path(tempfile.mkdtemp(prefix="bench-ws-")))
    try:
        runs = [one_run(port, proc.pid, opts.messages, opts.size) for _ in range(opts.runs)]
    finally:
        proc.kill()
        proc.wait()
    rates = sorted(rate for rate, _ in runs)
    costs = sorted(cost for _, cost in runs)
    print(f"ws QoS 0, {opts.messages} x {opts.size} B, {opts.runs} runs: "
          f"{', '.join(f'{r:,.0f}' for r, _ in runs)} msg/s (median {rates[len(rates) // 2]:,.0f});"
          f" broker CPU {', '.join(f'{c:.1f}' for _, c in runs)} us/msg "
          f"(median {costs[len(costs) // 2]:.1f})")


if __name__ == "__main__":
    main()
