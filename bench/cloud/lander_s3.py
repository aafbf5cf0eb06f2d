"""One lander to S3 against the same lander to local disk, and a plain paho subscriber.

    .venv/bin/python -m bench.cloud.lander_s3 [--batched] [--backlog 40000] [--gateways 100]
        [--s3-delay-ms 0] [--rounds 1] [--json FILE]

How this works, in one run: a SeaweedFS S3 server (tests/support/seaweedfs.py) and a
mosquitto (queues unlimited) are started; three persistent sessions subscribe ``outpost/#``
and leave: the plain paho-mqtt subscriber that acks at once (:mod:`bench.fleet.plain_sub`),
a lander with a local ``--root`` and a lander with ``--root s3://bench/landing`` (``--rounds
N``: N of each, drained alternately local, S3, local, S3, …, so that a change of the
machine's load hits both; the ratio is then the median of the rounds'). The fleet
benchmark's simulated gateways (:mod:`bench.fleet.gateways`; ``--batched``: the uplink's
batched format with its defaults) publish ``--backlog`` points, which the broker queues once
per session. Then each consumer drains its copy in turn, timed from its CONNACK to its last
message (a lander: to the commit of the file that holds it, i.e. the fsync+rename or the
PUT): points/s, the ratios S3/local and lander/plain, each lander's CPU per 10,000 points
and peak resident memory, and the objects the S3 lander wrote.

``--s3-delay-ms D`` puts a proxy between the S3 lander and SeaweedFS that delays every
chunk in each direction by D/2 ms (a link with a round trip of D ms; a PUT then takes at
least two round trips, ``Expect: 100-continue`` and the body): does a 20-100 ms store
throttle the lander?
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench.compare import free_port
from bench.fleet.gateways import run_gateways
from bench.fleet.run import MOST_HELD, Mosquitto, Proc, lander, plain, vm_hwm_mib, wait_landed
from bench.procstat import cpu_seconds
from bridge.uplink.config import BatchConfig
from tests.support.seaweedfs import SeaweedFS, start_seaweedfs


class DelayProxy:
    """A TCP proxy on 127.0.0.1 that holds every chunk ``delay_s`` before passing it on,
    in order, in both directions (an event loop on its own thread)."""

    def __init__(self, target_port: int, delay_s: float) -> None:
        self.target_port = target_port
        self.delay_s = delay_s
        self.port = free_port()
        self.loop = asyncio.new_event_loop()
        ready = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(ready,), daemon=True)
        self.thread.start()
        ready.wait(10)

    def _run(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)
        server = self.loop.run_until_complete(
            asyncio.start_server(self._client, "127.0.0.1", self.port))
        ready.set()
        self.loop.run_forever()
        server.close()

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

        async def send() -> None:
            while True:
                due, data = await queue.get()
                if not data:
                    break
                await asyncio.sleep(max(0.0, due - time.monotonic()))
                writer.write(data)
                await writer.drain()
            writer.close()

        sender = asyncio.ensure_future(send())
        with contextlib.suppress(ConnectionError):
            while data := await reader.read(65536):
                queue.put_nowait((time.monotonic() + self.delay_s, data))
        queue.put_nowait((0.0, b""))
        with contextlib.suppress(ConnectionError):
            await sender

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)


@contextlib.contextmanager
def s3_endpoint(s3: SeaweedFS, delay_ms: float) -> Iterator[str]:
    if delay_ms <= 0:
        yield s3.endpoint
        return
    proxy = DelayProxy(s3.ports["s3"], delay_ms / 2000)
    try:
        yield f"http://127.0.0.1:{proxy.port}"
    finally:
        proxy.stop()


def drain(proc: Proc, points: int) -> dict[str, Any]:
    """Time a lander draining its session's backlog of ``points``."""
    t0 = proc.wait_line("connected as")
    cpu0 = cpu_seconds(proc.proc.pid)
    t1 = wait_landed([proc], points, timeout=900)
    cpu = cpu_seconds(proc.proc.pid) - cpu0
    rss = vm_hwm_mib(proc.proc.pid)
    proc.stop()
    return {
        "points_per_s": round(points / (t1 - t0)),
        "seconds": round(t1 - t0, 2),
        "cpu_s_per_10k": round(cpu / points * 10_000, 3),
        "peak_rss_mib": round(rss, 1),
        "most_held": proc.grep(MOST_HELD),
    }


def run(work: Path, args: argparse.Namespace) -> dict[str, Any]:
    with start_seaweedfs(work / "s3") as s3, s3_endpoint(s3, args.s3_delay_ms) as endpoint:
        os.environ.update({k: v for k, v in s3.env().items() if k != "AWS_ENDPOINT_URL_S3"})
        bucket = s3.create_bucket("bench")
        to_s3 = (f"s3://{bucket}/landing", "--s3-endpoint", endpoint)
        broker = Mosquitto(work / "mosquitto")
        try:
            port = broker.port
            sub = plain(port, "--client-id", "plain", "--subscribe-only")
            sub.wait_line("connected")
            sub.proc.wait(timeout=30)
            rounds = range(1, args.rounds + 1)
            sessions = [(f"{kind}-{n}", kind) for n in rounds for kind in ("local", "s3")]
            for client_id, kind in sessions:
                proc = (lander(port, work / client_id, client_id) if kind == "local"
                        else lander(port, to_s3[0], client_id, *to_s3[1:]))
                proc.wait_line("subscribed")
                proc.stop()
            each = max(1, args.backlog // args.gateways)
            points = each * args.gateways
            gateways = asyncio.run(
                run_gateways("127.0.0.1", port, args.gateways, each, batching=args.batching))
            messages = sum(g.stats.messages for g in gateways)

            sub = plain(port, "--client-id", "plain", "--count", str(messages))
            t0 = sub.wait_line("connected")
            t1 = sub.wait_line("done", timeout=900)
            sub.proc.wait(timeout=30)
            plain_points = points / (t1 - t0)
            drained: dict[str, list[dict[str, Any]]] = {"local": [], "s3": []}
            for client_id, kind in sessions:
                proc = (lander(port, work / client_id, client_id) if kind == "local"
                        else lander(port, to_s3[0], client_id, *to_s3[1:]))
                drained[kind].append(drain(proc, points))
            objects = s3.list_keys(bucket, "landing/bronze/")
        finally:
            broker.stop()
    local = [d["points_per_s"] for d in drained["local"]]
    remote = [d["points_per_s"] for d in drained["s3"]]
    return {
        "backlog_points": points,
        "backlog_messages": messages,
        "s3_delay_ms": args.s3_delay_ms,
        "plain_messages_per_s": round(plain_points * messages / points),
        "plain_points_per_s": round(plain_points),
        "local": drained["local"],
        "s3": drained["s3"],
        "s3_objects": len(objects),
        "local_points_per_s_median": statistics.median(local),
        "s3_points_per_s_median": statistics.median(remote),
        "s3_vs_local_per_round": [round(r / lo, 3) for r, lo in zip(remote, local, strict=True)],
        "s3_vs_local": round(statistics.median(r / lo for r, lo in zip(remote, local,
                                                                        strict=True)), 3),
        "local_vs_plain": round(statistics.median(local) / plain_points, 3),
        "s3_vs_plain": round(statistics.median(remote) / plain_points, 3),
        "load_average_at_end": os.getloadavg(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gateways", type=int, default=100)
    parser.add_argument("--backlog", type=int, default=40_000, help="points queued, drained")
    parser.add_argument("--batched", action="store_true", help="the uplink's batched format")
    parser.add_argument("--s3-delay-ms", type=float, default=0.0,
                        help="round trip added between the S3 lander and the store")  # fmt: skip
    parser.add_argument("--rounds", type=int, default=1, help="drains of each lander")
    parser.add_argument("--json", type=Path, help="also write the result here")
    args = parser.parse_args(argv)
    args.batching = BatchConfig() if args.batched else None
    work = Path(tempfile.mkdtemp(prefix="lander-s3-bench-"))
    try:
        result = {"mode": "batched" if args.batched else "unbatched",
                  "load_average_at_start": os.getloadavg(), **run(work, args)}
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(result), flush=True)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
