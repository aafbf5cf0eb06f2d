"""Hostile-neighbour experiments against a real `outpost run` (docs/security.md has the figures).

    python -m bench.attack half-open [--sources 40 --sockets 2000 --duration 20]
    python -m bench.attack long-client-id [--connects 200]
    python -m bench.attack ... --tree /path/to/another/checkout   # the same run on other code

half-open: `--sources` addresses 127.0.0.2... open `--sockets` connections between them, send
the first half of a CONNECT and hold; whenever the broker closes one, it is opened again after
`--reopen-delay`, so the attack holds for the whole run (one process of its own). Meanwhile a
client from 127.0.0.250 connects (full CONNECT, waits for CONNACK) once every `--probe-every`
seconds; the figures are how many probes got a CONNACK within 1 s and the slowest one.

long-client-id: `--connects` CONNECTs with a 65,535-byte client id (refused, 0x85 / 2) from
127.0.0.1 (exempt from the per-address rate, so every one reaches the broker); the figure is
the bytes the broker logged meanwhile.

Each experiment starts its own broker with default limits (a temporary config, no status page)
and stops it at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.synchronize import Event as MpEvent
from pathlib import Path

from bench import wire
from bench.procstat import cpu_seconds

ROOT = Path(__file__).resolve().parents[1]
PROBE_SOURCE = "127.0.0.250"
_LISTENING = re.compile(r"listening on ([0-9.]+):(\d+)")
CONFIG = '[status]\nenabled = false\n[[listeners]]\nbind = "127.0.0.1:0"\n'


@dataclass
class Broker:
    process: subprocess.Popen[str]
    port: int
    log_path: Path


@contextmanager
def broker(tree: Path, extra_config: str = "") -> Iterator[Broker]:
    """`outpost run` from `tree` on 127.0.0.1, port chosen by the kernel (`extra_config`:
    more TOML, e.g. a `[limits]` section)."""
    with tempfile.TemporaryDirectory(prefix="outpost-attack-") as workdir:
        config = Path(workdir) / "outpost.toml"
        config.write_text(CONFIG + extra_config, encoding="utf-8")
        log_path = Path(workdir) / "broker.log"
        with log_path.open("w", encoding="utf-8") as log_file:
            process = subprocess.Popen(
                [sys.executable, "-m", "outpost", "run", "--config", str(config)],
                stdout=subprocess.PIPE, stderr=log_file, text=True, cwd=tree,
                env={**os.environ, "PYTHONPATH": str(tree), "PYTHONUNBUFFERED": "1"},
            )
        assert process.stdout is not None
        port = 0
        for line in process.stdout:
            match = _LISTENING.search(line)
            if match:
                port = int(match.group(2))
                break
        if not port:
            process.kill()
            raise RuntimeError(f"broker did not start:\n{log_path.read_text()}")
        try:
            yield Broker(process, port, log_path)
        finally:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


# -- half-open -----------------------------------------------------------------------------

async def _hold(port: int, source: str, stop: asyncio.Event, counts: dict[str, int],
                reopen_delay: float) -> None:
    """One attacking socket: half a CONNECT, then hold; reopened whenever the broker closes it."""
    half = wire.connect("attacker")[:8]
    while not stop.is_set():
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port,
                                                          local_addr=(source, 0))
        except OSError:
            counts["refused"] += 1
            await asyncio.sleep(reopen_delay)
            continue
        counts["opened"] += 1
        try:
            writer.write(half)
            read = asyncio.ensure_future(reader.read(1))
            waiter = asyncio.ensure_future(stop.wait())
            await asyncio.wait({read, waiter}, return_when=asyncio.FIRST_COMPLETED)
            for task in (read, waiter):
                task.cancel()
        except OSError:
            pass
        finally:
            writer.close()
        counts["closed_by_broker"] += 0 if stop.is_set() else 1
        await asyncio.sleep(reopen_delay)


def _probe(port: int) -> float | None:
    """Seconds from connect to CONNACK for a client from PROBE_SOURCE (None: refused)."""
    started = time.monotonic()
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5,
                                      source_address=(PROBE_SOURCE, 0)) as sock:
            sock.sendall(wire.connect(f"probe-{started}"))
            connack = sock.recv(4)
    except OSError:
        return None
    return time.monotonic() - started if connack[:2] == b"\x20\x02" else None


def _attack(port: int, sources: int, sockets: int, reopen_delay: float,
            stop: MpEvent, results: Connection) -> None:
    """The attacking process: `sockets` holders until `stop`; sends its counts back."""

    async def run() -> dict[str, int]:
        stopped = asyncio.Event()
        counts = {"opened": 0, "refused": 0, "closed_by_broker": 0}
        holders = [asyncio.ensure_future(_hold(port, f"127.0.0.{2 + n % sources}", stopped,
                                               counts, reopen_delay))
                   for n in range(sockets)]
        while not stop.is_set():
            await asyncio.sleep(0.1)
        stopped.set()
        await asyncio.gather(*holders, return_exceptions=True)
        return counts

    results.send(asyncio.run(run()))


def half_open(port: int, sources: int, sockets: int, duration: float, probe_every: float,
              reopen_delay: float) -> dict[str, object]:
    """Probe from PROBE_SOURCE while another process holds the attack (own CPU, own loop)."""
    stop = multiprocessing.Event()
    receive, send = multiprocessing.Pipe(duplex=False)
    attacker = multiprocessing.Process(
        target=_attack, args=(port, sources, sockets, reopen_delay, stop, send))
    attacker.start()
    time.sleep(2.0)  # let the attack build up before the first probe
    latencies: list[float | None] = []
    deadline = time.monotonic() + duration
    while time.monotonic() < deadline:
        latencies.append(_probe(port))
        time.sleep(probe_every)
    stop.set()
    counts = receive.recv()
    attacker.join()
    answered = [x for x in latencies if x is not None]
    return {
        "latencies_s": ",".join("-" if x is None else f"{x:.3f}" for x in latencies),
        "probes": len(latencies),
        "within_1s": sum(1 for x in answered if x <= 1.0),
        "failed": len(latencies) - len(answered),
        "slowest_s": round(max(answered), 3) if answered else None,
        **counts,
    }


# -- long client id ------------------------------------------------------------------------

def long_client_id(port: int, log_path: Path, connects: int) -> dict[str, object]:
    before = log_path.stat().st_size
    packet = wire.connect("x" * 65_535)
    for _ in range(connects):
        with socket.create_connection(("127.0.0.1", port), timeout=5,
                                      source_address=("127.0.0.1", 0)) as sock:
            sock.sendall(packet)
            with suppress(OSError):
                sock.recv(4)
    time.sleep(0.5)  # the broker writes its log line after the CONNACK
    return {"connects": connects, "log_bytes": log_path.stat().st_size - before}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("experiment", choices=["half-open", "long-client-id"])
    parser.add_argument("--tree", type=Path, default=ROOT, help="outpost source tree to run")
    parser.add_argument("--sources", type=int, default=40)
    parser.add_argument("--sockets", type=int, default=2000)
    parser.add_argument("--duration", type=float, default=20.0)
    parser.add_argument("--probe-every", type=float, default=0.5)
    parser.add_argument("--reopen-delay", type=float, default=0.05,
                        help="seconds an attacking socket waits before reopening")
    parser.add_argument("--connects", type=int, default=200)
    args = parser.parse_args()
    with broker(args.tree.resolve()) as running:
        cpu_before = cpu_seconds(running.process.pid)
        if args.experiment == "half-open":
            result = half_open(running.port, args.sources, args.sockets, args.duration,
                               args.probe_every, args.reopen_delay)
        else:
            result = long_client_id(running.port, running.log_path, args.connects)
        result["broker_cpu_s"] = round(cpu_seconds(running.process.pid) - cpu_before, 1)
    print(" ".join(f"{key}={value}" for key, value in result.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
