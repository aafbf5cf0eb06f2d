"""Bytes on the wire per point: batched uplink messages against one message per point.

Run: `.venv/bin/python -m bench.uplink.wire_bytes [--seconds 60] [--meters 3]`

How this works: a pymodbus simulator (bench/bridge/simulator.py) holds `--meters` Eastron
SDM630 meters whose input registers change like a loaded three-phase supply (float32 values
with noise, energy counters that count up), refreshed every 0.5 s. Four `outpost run`
processes read them through the shipped profile (`map = "profile:eastron-sdm630"`, polled every
second, reported on change as shipped) and forward `devices/#` to one mosquitto, each through
its own counting TCP proxy (bench/uplink/tcp_count.py): single messages and batches (the
defaults: `batch = {}`), each on MQTT 5 and on 3.1.1. A subscriber on mosquitto unpacks what
arrives with the cloud's own code (`cloud_spark.records.bronze_records`) and counts the rows per
gateway. Over the measured window (after a warm-up), bytes per point = the bytes the proxy
forwarded in both directions (every PUBLISH, PUBACK and PINGREQ, TCP payload) / the rows that
arrived. The warm-up starts once every gateway forwarded its first point. The ratio batched /
single is taken per protocol in the same run; the goal is ≤ 1/8 (exit status 1 when missed).
"""

from __future__ import annotations

import argparse
import logging
import math
import random
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import paho.mqtt.client as mqtt

from bench.bridge.simulator import Simulator
from bench.compare import free_port
from bench.uplink.tcp_count import HOST, Counted, CountingProxies
from cloud_spark.records import bronze_records

REPO = Path(__file__).resolve().parents[2]
PROFILE = REPO / "bridge" / "profiles" / "eastron-sdm630.toml"
GOAL = 1 / 8
#: (gateway id, MQTT protocol level, batched)
VARIANTS = (("v5-single", 5, False), ("v5-batch", 5, True),
            ("v311-single", 4, False), ("v311-batch", 4, True))
#: a typical value per unit of the profile (line-to-line voltages are matched by name)
TYPICAL = {"V": 231.0, "A": 11.5, "W": 2650.0, "VA": 2800.0, "var": 610.0, "Hz": 50.0,
           "kWh": 18234.5, "kvarh": 2345.6, None: 0.94}


@dataclass
class Meter:
    """The SDM630's float32 input registers of one simulated meter."""

    unit: int
    points: list[tuple[str, int, str | None]]  # (name, register address, unit)
    rng: random.Random = field(default_factory=random.Random)

    def registers(self, t: float) -> dict[int, list[int]]:
        out = {}
        for index, (name, address, unit) in enumerate(self.points):
            line_to_line = name.count("_l") == 2  # voltage_l1_l2
            typical = TYPICAL.get(unit, 1.0) * (math.sqrt(3) if line_to_line else 1.0)
            if unit in ("kWh", "kvarh"):
                value = typical + self.unit * 100 + t * 0.0008 * (index + 1)
            else:
                swing = 0.0002 if unit == "Hz" else 0.03
                value = typical * (1 + swing * math.sin(t / (5 + index) + self.unit)
                                   + swing / 4 * self.rng.uniform(-1, 1))
            out[address] = list(struct.unpack(">HH", struct.pack(">f", value)))
        return out


def load_meter(unit: int) -> Meter:
    profile = tomllib.loads(PROFILE.read_text())
    base = profile.get("address_base", 1)
    points = [(p["name"], p["address"] - base, p.get("unit")) for p in profile["points"]]
    return Meter(unit, points, random.Random(unit))


def gateway_config(name: str, protocol: int, batched: bool, sim_port: int, cloud_port: int,
                   meters: int) -> str:
    lines = [f'gateway_id = "{name}"', "[bridge]",
             "[[bridge.buses]]", 'name = "sim"', 'type = "tcp"', f'host = "{HOST}"',
             f"port = {sim_port}"]
    for unit in range(1, meters + 1):
        lines += ["[[bridge.devices]]", f'name = "meter-{unit}"', 'bus = "sim"',
                  f"unit_id = {unit}", "address_base = 1", 'map = "profile:eastron-sdm630"',
                  "poll_interval = 1.0"]
    lines += ["[uplink]", "enabled = true", "[[uplink.remotes]]",
              f'addresses = ["{HOST}:{cloud_port}"]', f"protocol = {protocol}",
              f'client_id = "uplink-{name}"', 'status_topic = ""', 'diagnostics_topic = ""',
              "[[uplink.forward]]", 'filter = "devices/#"',
              f'topic = {{ strip = "devices/", prefix = "site/{name}/" }}']
    if batched:
        lines.append("batch = {}")
    return "\n".join(lines) + "\n"


class RowIds:
    """Every row that reaches mosquitto, by gateway: its seq, and whether it had an id."""

    def __init__(self, port: int) -> None:
        self.seqs: dict[str, list[int]] = {}
        self.without_id = 0
        self.lock = threading.Lock()
        self.client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, protocol=mqtt.MQTTv5)
        self.client.on_message = self._on_message
        self.client.connect(HOST, port)
        self.client.subscribe("site/#", qos=0)
        self.client.loop_start()

    def _on_message(self, client: mqtt.Client, userdata: object,
                    message: mqtt.MQTTMessage) -> None:
        props = getattr(message.properties, "UserProperty", None)
        records = bronze_records(remote_topic=message.topic, payload=message.payload,
                                 user_properties=props, ingest_ms=0, lander_id="bench")
        with self.lock:
            for record in records:
                if record["gateway"] is None or record["epoch"] is None or record["seq"] is None:
                    self.without_id += 1
                    continue
                self.seqs.setdefault(str(record["gateway"]), []).append(int(record["seq"]))

    def rows(self) -> dict[str, int]:
        with self.lock:
            return {gateway: len(seqs) for gateway, seqs in self.seqs.items()}

    def holes(self, gateway: str) -> int:
        """Seq numbers missing between the first and the last row (duplicates ignored)."""
        with self.lock:
            seen = set(self.seqs.get(gateway, []))
        return (max(seen) - min(seen) + 1 - len(seen)) if seen else 0

    def stop(self) -> None:
        self.client.loop_stop()
        self.client.disconnect()


def refresh(sim: Simulator, meters: list[Meter], stop: threading.Event) -> None:
    start = time.monotonic()
    while not stop.wait(0.5):
        t = time.monotonic() - start
        for meter in meters:
            for address, words in meter.registers(t).items():
                sim.set_registers(meter.unit, "input", address, words)


class Site:
    """The measured site: the simulator with `meters` SDM630s changing every second, a cloud
    mosquitto, and `outpost run` gateways each forwarding through its own counting proxy.

    `with Site(meters, prefix) as site:` starts the simulator and mosquitto; `proxy(name)`
    opens gateway `name`'s counting proxy (its port is the cloud broker the gateway is given);
    `gateway(name, config)` starts it; leaving the block stops everything (the working folder
    stays only when the block raised)."""

    def __init__(self, meters: int, prefix: str) -> None:
        self.work = Path(tempfile.mkdtemp(prefix=prefix))
        self.meters = [load_meter(unit) for unit in range(1, meters + 1)]
        self.sim = Simulator(units=range(1, meters + 1), size=400)
        self.cloud_port = free_port()
        self.proxies = CountingProxies()
        self.counted: dict[str, Counted] = {}
        self._stop = threading.Event()
        self._gateways: list[subprocess.Popen[bytes]] = []
        self._mosquitto: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Site:
        self.sim_port = self.sim.start()
        threading.Thread(target=refresh, args=(self.sim, self.meters, self._stop),
                         daemon=True).start()
        (self.work / "mosquitto.conf").write_text(
            f"listener {self.cloud_port} {HOST}\nallow_anonymous true\npersistence false\n"
            "max_queued_messages 0\n")
        self._mosquitto = subprocess.Popen(
            ["mosquitto", "-c", str(self.work / "mosquitto.conf")],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(0.5)  # mosquitto's listener (a benchmark, not a test)
        return self

    def proxy(self, name: str) -> int:
        """Opens gateway `name`'s counting proxy to the cloud broker; returns its port."""
        self.counted[name] = self.proxies.open(self.cloud_port)
        return self.counted[name].port

    def gateway(self, name: str, config: str) -> None:
        """Starts `outpost run` as gateway `name` with the configuration text `config`."""
        path = self.work / f"{name}.toml"
        path.write_text(config)
        log = (self.work / f"{name}.log").open("wb")
        self._gateways.append(subprocess.Popen(
            [sys.executable, "-m", "outpost", "run", "--listen", f"{HOST}:{free_port()}",
             "--config", str(path), "--state-dir", str(self.work / f"state-{name}")],
            cwd=REPO, stdout=log, stderr=subprocess.STDOUT))

    def bytes(self) -> dict[str, tuple[int, int]]:
        """Bytes each gateway's proxy forwarded so far: (up, down)."""
        return {name: counted.snapshot() for name, counted in self.counted.items()}

    def __exit__(self, kind: object, *_: object) -> None:
        self._stop.set()
        for gateway in self._gateways:
            gateway.terminate()
        for gateway in self._gateways:
            gateway.wait(30)
        self.proxies.close()
        if self._mosquitto is not None:
            self._mosquitto.terminate()
            self._mosquitto.wait(10)
        self.sim.stop()
        if kind is None:
            shutil.rmtree(self.work, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="measured window")
    parser.add_argument("--warmup", type=float, default=10.0,
                        help="seconds after every gateway forwarded its first point")
    parser.add_argument("--meters", type=int, default=3, help="SDM630 meters on the site")
    args = parser.parse_args(argv)
    logging.getLogger("pymodbus").setLevel(logging.CRITICAL)  # its frame dumps are not ours
    counter: RowIds | None = None
    with Site(args.meters, "outpost-wire-bytes-") as site:
        try:
            counter = RowIds(site.cloud_port)
            for name, protocol, batched in VARIANTS:
                site.gateway(name, gateway_config(name, protocol, batched, site.sim_port,
                                                  site.proxy(name), args.meters))
            deadline = time.monotonic() + 120  # until every gateway runs and forwards
            while len(counter.rows()) < len(VARIANTS):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"no points from some gateways: {counter.rows()}; "
                                       f"logs in {site.work}")
                time.sleep(0.5)
            time.sleep(args.warmup)
            rows0, bytes0 = counter.rows(), site.bytes()
            time.sleep(args.seconds)
            rows1, bytes1 = counter.rows(), site.bytes()
        finally:
            if counter is not None:
                counter.stop()
    per_point: dict[str, float] = {}
    print(f"site: {args.meters} x SDM630 (profile {PROFILE.name}, polled every 1 s), "
          f"{args.seconds:.0f} s window after {args.warmup:.0f} s warm-up")
    print(f"{'gateway':<12} {'points':>7} {'bytes up':>10} {'bytes down':>10} "
          f"{'bytes/point':>11} {'vs single':>9}")
    failed = False
    for name, _protocol, batched in VARIANTS:
        rows = rows1.get(name, 0) - rows0.get(name, 0)
        up = bytes1[name][0] - bytes0[name][0]
        down = bytes1[name][1] - bytes0[name][1]
        if rows <= 0:
            raise RuntimeError(f"{name}: no point arrived in the window")
        per_point[name] = (up + down) / rows
        ratio = ""
        if batched:
            single = per_point[name.replace("batch", "single")]
            value = per_point[name] / single
            verdict = "PASS" if value <= GOAL else "MISS"
            failed |= value > GOAL
            ratio = f"1/{1 / value:.1f} {verdict}"
        print(f"{name:<12} {rows:>7} {up:>10} {down:>10} {per_point[name]:>11.1f} {ratio:>9}")
    print(f"goal: batched <= 1/{1 / GOAL:.0f} of single, per protocol")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
