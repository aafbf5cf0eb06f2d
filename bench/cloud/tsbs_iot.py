"""A TSBS-IoT-shaped bronze data set generator (deterministic for a given seed).

How this works: like the TSBS "IoT" use case, a fleet of trucks (devices) reports readings
(latitude, longitude, elevation, velocity, heading, grade, fuel consumption, load, fuel
state). Trucks are spread over gateways; each gateway is simulated on its own, with its own
``random.Random`` seeded from ``(seed, gateway)``, so the output does not depend on how many
worker processes share the work.

Every ``step`` (10 s) each reading takes a random-walk step; it is *reported* only when it
moved more than its deadband since the last report, or when the heartbeat (60 s) is due —
the change-only reporting of the device bridge. The gateway numbers every message it
forwards (``seq`` 1, 2, … in receive order, one epoch UUID per gateway) and the generator
writes the bronze record the lander would have written, through
:func:`cloud_spark.records.bronze_record`, so the format is the lander's own. Faults:

* device outages: status ``offline``, silence, then ``online`` (``outage_rate`` per device-hour);
* link outages: the gateway keeps receiving, but messages land only when the link is back
  (a backlog flush, so they are late), and the uplink diagnostics say ``connected: false``;
* late records (``late_rate``: landed 5-60 min after receipt) and network jitter, so bronze
  order is not seq order;
* duplicates (``dup_rate``: the same message landed again up to 10 min later);
* malformed payloads with a valid id (``bad_rate``) and a few messages without any id;
* device diagnostics (cumulative counters) every minute, uplink diagnostics every 30 s;
* a few devices with a skewed clock.

Files: ``<root>/bronze/ingest_date=…/ingest_hour=…/part-gen-….json.gz``, gzip level 1, at most
``rows_per_file`` lines each, committed by rename. :func:`generate` returns a manifest with
the exact counts the Spark jobs must reproduce (distinct ids, duplicates, quarantined, …);
``generate.json`` next to ``bronze/`` holds it too.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import random
import sys
import time
import uuid
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from json.encoder import encode_basestring as _str  # type: ignore[attr-defined]
from pathlib import Path
from typing import IO

from cloud_spark import contract as c
from cloud_spark.records import bronze_record, encode_record, partition_dir

HOUR_MS = 3_600_000

#: (name, unit, start, step sigma, deadband, low, high, decimals)
READINGS: tuple[tuple[str, str, float, float, float, float, float, int], ...] = (
    ("latitude", "deg", 52.0, 0.0004, 0.0005, -90.0, 90.0, 5),
    ("longitude", "deg", 4.9, 0.0004, 0.0005, -180.0, 180.0, 5),
    ("elevation", "m", 120.0, 1.5, 2.0, 0.0, 3000.0, 1),
    ("velocity", "km/h", 60.0, 4.0, 3.0, 0.0, 120.0, 1),
    ("heading", "deg", 180.0, 6.0, 5.0, 0.0, 359.9, 1),
    ("grade", "%", 0.0, 0.4, 0.5, -10.0, 10.0, 2),
    ("fuel_consumption", "l/100km", 25.0, 0.8, 1.0, 5.0, 60.0, 1),
    ("current_load", "kg", 8000.0, 30.0, 50.0, 0.0, 20000.0, 0),
    ("fuel_state", "%", 80.0, 0.05, 1.0, 0.0, 100.0, 1),
)
#: (local topic under ``<prefix>/<device>``, payload): each ends up in quarantine
MALFORMED = (
    ("{base}/velocity", '{"value": 1,'),
    ("{base}/velocity", '{"value": 1, "quality": "good"}'),
    ("{base}/velocity", '{"value": 1, "ts": "soon", "quality": "good"}'),
    ("{base}/velocity", '{"value": [1], "ts": 1717430400000, "quality": "good"}'),
    ("{base}", '{"value": 1, "ts": 1717430400000, "quality": "good"}'),
)


@dataclass(frozen=True)
class GenConfig:
    """What to generate; ``rows`` is the exact number of bronze rows written."""

    rows: int
    seed: int = 7
    gateways: int = 10
    devices: int = 1000
    points: int = len(READINGS)
    start_ms: int = 1_717_372_800_000  # 2024-06-03T00:00:00Z
    step_ms: int = 10_000
    heartbeat_ms: int = 60_000
    dup_rate: float = 0.01
    late_rate: float = 0.005
    bad_rate: float = 0.0005
    outage_rate: float = 0.05
    link_outage_rate: float = 0.1
    rows_per_file: int = 250_000
    prefix: str = c.DEFAULT_DEVICE_PREFIX


@dataclass
class Manifest:
    """Exact counts of what was written (the Spark jobs must find the same)."""

    rows: int = 0
    distinct_ids: int = 0
    duplicates: int = 0
    no_id: int = 0
    malformed: int = 0
    points: int = 0
    status: int = 0
    device_diagnostics: int = 0
    uplink_diagnostics: int = 0
    late_injected: int = 0
    device_outages: int = 0
    link_outages: int = 0
    files: int = 0
    epochs: dict[str, str] = field(default_factory=dict)
    last_seq: dict[str, int] = field(default_factory=dict)

    def add(self, other: Manifest) -> None:
        for name, value in asdict(other).items():
            if isinstance(value, dict):
                getattr(self, name).update(value)
            else:
                setattr(self, name, getattr(self, name) + value)


LANDER = "lander-gen"


def bronze_line(
    gateway: str, epoch: str, seq: int, topic: str, received_ms: int, remote: str, payload: str
) -> bytes:
    """The bronze JSON line of an id-carrying UTF-8 message, with ``%d`` for ingest_ms.

    Byte for byte what :func:`cloud_spark.records.encode_record` writes for the record
    :func:`cloud_spark.records.bronze_record` builds (a test checks it); only much faster.
    """
    return (
        f'{{"gateway":{_str(gateway)},"epoch":{_str(epoch)},"seq":{seq},'
        f'"local_topic":{_str(topic)},"received_ms":{received_ms},'
        f'"remote_topic":{_str(remote)},"payload":{_str(payload).replace("%", "%%")},'
        f'"payload_encoding":"utf8","ingest_ms":%d,"lander_id":"{LANDER}"}}\n'
    ).encode()


class _Buckets:
    """One open gzip file per ingest hour; files are committed by rename when full/closed."""

    def __init__(self, root: Path, shard: str, rows_per_file: int) -> None:
        self.bronze = root / c.BRONZE_DIR
        self.shard = shard
        self.rows_per_file = rows_per_file
        self.open: dict[int, tuple[IO[bytes], Path, Path, int]] = {}
        self.pending: dict[int, list[bytes]] = {}
        self.counter = 0
        self.files = 0

    def write(self, ingest_ms: int, line: bytes) -> None:
        hour = ingest_ms // HOUR_MS
        lines = self.pending.setdefault(hour, [])
        lines.append(line)
        if len(lines) >= 4096:
            self._flush(hour)

    def _flush(self, hour: int) -> None:
        lines = self.pending.pop(hour, [])
        while lines:
            entry = self.open.get(hour)
            if entry is None:
                directory = self.bronze / partition_dir(hour * HOUR_MS)
                directory.mkdir(parents=True, exist_ok=True)
                self.counter += 1
                name = f"part-gen-{self.shard}-{hour}-{self.counter:05d}{c.BRONZE_SUFFIX}"
                temp = directory / f".{name}.tmp"
                handle = gzip.open(temp, "wb", compresslevel=1)  # noqa: SIM115
                entry = (handle, temp, directory / name, 0)
            handle, temp, final, count = entry
            room = self.rows_per_file - count
            chunk, lines = lines[:room], lines[room:]
            handle.write(b"".join(chunk))
            count += len(chunk)
            if count >= self.rows_per_file:
                self._commit(handle, temp, final)
                self.open.pop(hour, None)
            else:
                self.open[hour] = (handle, temp, final, count)

    def _commit(self, handle: IO[bytes], temp: Path, final: Path) -> None:
        handle.close()
        os.rename(temp, final)
        self.files += 1

    def close_before(self, hour: int) -> None:
        for key in [key for key in self.pending if key < hour]:
            self._flush(key)
        for key in [key for key in self.open if key < hour]:
            handle, temp, final, _ = self.open.pop(key)
            self._commit(handle, temp, final)

    def close(self) -> None:
        self.close_before(sys.maxsize)


class _Gateway:
    """Simulates one gateway and its trucks until its row budget is spent."""

    def __init__(self, cfg: GenConfig, index: int, budget: int, root: Path) -> None:
        self.cfg = cfg
        self.rng = random.Random(f"{cfg.seed}-{index}")
        self.name = f"gw-{index:03d}"
        self.epoch = str(uuid.UUID(int=self.rng.getrandbits(128), version=4))
        self.budget = budget
        self.out = _Buckets(root, self.name, cfg.rows_per_file)
        self.m = Manifest(epochs={self.name: self.epoch})
        self.seq = 0
        per_gateway = cfg.devices // cfg.gateways + (index < cfg.devices % cfg.gateways)
        self.devices = [f"truck-{index:03d}-{n:04d}" for n in range(per_gateway)]
        self.readings = READINGS[: cfg.points]
        self.skew_ms = [90_000 if self.rng.random() < 0.01 else 0 for _ in self.devices]
        self.values = [[r[2] for r in self.readings] for _ in self.devices]
        self.reported = [[math.nan] * len(self.readings) for _ in self.devices]
        self.last_report = [[-(10**15)] * len(self.readings) for _ in self.devices]
        self.offline_until = [0] * len(self.devices)
        self.counters = [[0, 0, 0, 0, 0] for _ in self.devices]
        self.link_down_until = 0
        self.backlog = 0
        self.dropped = 0

    @property
    def full(self) -> bool:
        return self.m.rows >= self.budget

    def emit(self, topic: str, payload: str, received_ms: int, *, with_id: bool = True) -> bool:
        """Forward one message: assign seq, decide when it lands, write bronze (+ copies).

        Returns False (and writes nothing) once the row budget is spent.
        """
        if self.m.rows >= self.budget:
            return False
        rand = self.rng.random
        if received_ms < self.link_down_until:
            ingest_ms = self.link_down_until + self.backlog // 4
            self.backlog += 1
        else:
            ingest_ms = received_ms + 20 + int(rand() * 380)
        if rand() < self.cfg.late_rate:
            ingest_ms += 300_000 + int(rand() * 3_300_000)
            self.m.late_injected += 1
        remote = f"outpost/{self.name}/{topic}"
        if not with_id:
            record = bronze_record(
                remote_topic=remote,
                payload=payload.encode(),
                user_properties=None,
                ingest_ms=ingest_ms,
                lander_id=LANDER,
            )
            self.out.write(ingest_ms, encode_record(record))
            self.m.rows += 1
            self.m.no_id += 1
            return True
        self.seq += 1
        line = bronze_line(self.name, self.epoch, self.seq, topic, received_ms, remote, payload)
        self.out.write(ingest_ms, line % ingest_ms)
        self.m.rows += 1
        self.m.distinct_ids += 1
        self.m.last_seq[f"{self.name}/{self.epoch}"] = self.seq
        if self.m.rows < self.budget and rand() < self.cfg.dup_rate:
            again = ingest_ms + 1_000 + int(rand() * 599_000)
            self.out.write(again, line % again)
            self.m.rows += 1
            self.m.duplicates += 1
        return True

    def step(self, now: int) -> None:
        cfg, rng = self.cfg, self.rng
        rand = rng.random
        steps_per_hour = HOUR_MS / cfg.step_ms
        if now >= self.link_down_until and rng.random() < cfg.link_outage_rate / steps_per_hour:
            self.link_down_until = now + rng.randint(300_000, 1_800_000)
            self.backlog = 0
            self.m.link_outages += 1
        spacing = max(1, cfg.step_ms // (len(self.devices) * (len(self.readings) + 3) + 1))
        offset = 0
        for d, device in enumerate(self.devices):
            base = f"{cfg.prefix}/{device}"
            if self.offline_until[d]:
                if now < self.offline_until[d]:
                    continue
                self.offline_until[d] = 0
                self.m.status += self.emit(f"{base}/status", c.STATUS_ONLINE, now + offset)
            elif rng.random() < cfg.outage_rate / steps_per_hour:
                self.offline_until[d] = now + rng.randint(120_000, 1_200_000)
                if self.emit(f"{base}/status", c.STATUS_OFFLINE, now + offset):
                    self.m.status += 1
                    self.m.device_outages += 1
                continue
            for p, (name, unit, _, sigma, deadband, low, high, decimals) in enumerate(
                self.readings
            ):
                offset += spacing
                value = self.values[d][p] + (rand() - 0.5) * sigma * 3.4641
                value = high if value > high else low if value < low else value
                self.values[d][p] = value
                shown = round(value, decimals)
                due = now - self.last_report[d][p] >= cfg.heartbeat_ms
                if not due and abs(shown - self.reported[d][p]) <= deadband:
                    continue
                self.reported[d][p], self.last_report[d][p] = shown, now
                received = now + offset
                event = received - 5 - int(rand() * 45) + self.skew_ms[d]
                if rand() < cfg.bad_rate:
                    topic, text = MALFORMED[rng.randrange(len(MALFORMED))]
                    self.m.malformed += self.emit(topic.format(base=base), text, received)
                    continue
                quality = "good" if rand() > 0.002 else "uncertain"
                payload = f'{{"value":{shown},"unit":"{unit}","ts":{event},"quality":"{quality}"}}'
                self.m.points += self.emit(f"{base}/{name}", payload, received)
            if now % 60_000 == 0:
                counts = self.counters[d]
                counts[0] += 6
                counts[1] += rng.random() < 0.02
                counts[2] += rng.random() < 0.005
                diag = {
                    "ts": now + offset,
                    "requests": counts[0],
                    "timeouts": counts[1],
                    "crc_errors": counts[2],
                    "exceptions": 0,
                    "stale_frames": 0,
                    "latency_ms": round(rng.uniform(8, 60), 1),
                }
                diag_topic = f"{base}/diagnostics"
                self.m.device_diagnostics += self.emit(diag_topic, json.dumps(diag), now + offset)
        if now % 30_000 == 0:
            connected = now >= self.link_down_until
            uplink = {
                "ts": now,
                "connected": connected,
                "backlog_messages": 0 if connected else self.backlog,
                "backlog_bytes": 0 if connected else self.backlog * 180,
                "oldest_age_s": None if connected else (now - self.link_down_until) / 1000,
                "dropped": self.dropped,
            }
            topic = c.UPLINK_DIAGNOSTICS_TOPIC
            self.m.uplink_diagnostics += self.emit(topic, json.dumps(uplink), now + offset + 1)
        if rng.random() < self.cfg.bad_rate * 10:
            self.emit("nowhere", "no id at all", now + offset + 2, with_id=False)

    def run(self) -> Manifest:
        now = self.cfg.start_ms
        while not self.full:
            self.step(now)
            now += self.cfg.step_ms
            if now % HOUR_MS == 0:
                self.out.close_before(now // HOUR_MS - 3)
        self.out.close()
        self.m.files = self.out.files
        return self.m


def _run_gateway(args: tuple[GenConfig, int, int, str]) -> Manifest:
    cfg, index, budget, root = args
    return _Gateway(cfg, index, budget, Path(root)).run()


def generate(cfg: GenConfig, root: Path, workers: int = 1) -> Manifest:
    """Write ``cfg.rows`` bronze rows under ``root``; return (and store) the manifest."""
    gateways = range(cfg.gateways)
    budgets = [cfg.rows // cfg.gateways + (g < cfg.rows % cfg.gateways) for g in gateways]
    jobs = [(cfg, g, budgets[g], str(root)) for g in range(cfg.gateways)]
    total = Manifest()
    if workers > 1:
        with ProcessPoolExecutor(workers) as pool:
            for manifest in pool.map(_run_gateway, jobs):
                total.add(manifest)
    else:
        for job in jobs:
            total.add(_run_gateway(job))
    (root / "generate.json").write_text(
        json.dumps({"config": asdict(cfg), "manifest": asdict(total)}, indent=2) + "\n"
    )
    return total


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, required=True, help="bronze rows to write")
    parser.add_argument("--out", type=Path, required=True, help="landing root (bronze/ inside)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--gateways", type=int, default=10)
    parser.add_argument("--devices", type=int, default=1000)
    parser.add_argument("--dup-rate", type=float, default=0.01)
    parser.add_argument("--late-rate", type=float, default=0.005)
    parser.add_argument("--bad-rate", type=float, default=0.0005)
    parser.add_argument("--rows-per-file", type=int, default=250_000)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args(argv)
    cfg = GenConfig(
        rows=args.rows,
        seed=args.seed,
        gateways=args.gateways,
        devices=args.devices,
        dup_rate=args.dup_rate,
        late_rate=args.late_rate,
        bad_rate=args.bad_rate,
        rows_per_file=args.rows_per_file,
    )
    started = time.monotonic()
    manifest = generate(cfg, args.out, args.workers)
    elapsed = time.monotonic() - started
    first = datetime.fromtimestamp(cfg.start_ms / 1000, tz=UTC).isoformat()
    print(
        f"wrote {manifest.rows:,} rows ({manifest.distinct_ids:,} ids, {manifest.duplicates:,} "
        f"duplicates) in {manifest.files} files from {first} in {elapsed:.1f}s "
        f"({manifest.rows / max(elapsed, 1e-9):,.0f} rows/s)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
