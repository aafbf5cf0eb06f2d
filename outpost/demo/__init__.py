"""`outpost demo`: the whole pipeline on one machine, on 127.0.0.1 only.

How this works: every part is a real child process in its own process group, with its log in
`<work>/logs/`: the Modbus simulator and the serial sensor (`outpost.demo.devices`, the
sensor
behind a socat pty pair), the gateway (`python -m outpost run` with a generated config: bridge,
uplink forwarding `devices/#` plus, by default, its own diagnostics and status, status
endpoint), a second outpost as the cloud broker (plain broker configuration, its own state
directory) and the lander writing `<work>/bronze` (the device data, the uplink diagnostics and
the gateway status). The
script then stops the cloud broker for a while (the uplink backlog grows), starts it again
(the backlog drains), kills the gateway with SIGKILL and starts it again, stops the gateway,
drains what is left with a bridge-less restart, waits until bronze holds every sequence number
the gateway handed out, and runs `python -m cloud_spark all`. Every wait is bounded; every child
is stopped in `finally` (Ctrl-C and SIGTERM included).
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, TextIO

from outpost.demo.devices import POINTS
from outpost.status_client import StatusUnavailableError, fetch_status

UNITS = (1, 2, 3)
GATEWAY_ID = "demo-gw"
CLOUD_PREFIX = "outpost/demo/"
#: what the lander subscribes to: the devices' data, the uplink's diagnostics and the gateway
#: status (the uplink's defaults for the last two)
LANDER_TOPICS = (CLOUD_PREFIX + "#", "outpost-diagnostics/+", "outpost-status/+",
                 "outpost-alarms/#")  # (and the alarms' transitions: the uplink's default too)
WORK_SUBDIRS = ("state", "cloud-state", "bronze", "tables", "logs", "tty", "config")


class DemoError(RuntimeError):
    """A part of the demo did not come up or did not finish in time."""


def free_port() -> int:
    """A free TCP port on 127.0.0.1 (kept for the whole run, so restarts reuse it)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def port_open(port: int) -> bool:
    """Whether something accepts TCP connections on 127.0.0.1:port."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def bar(done: float, total: float, width: int = 30) -> str:
    """`[#########.........]` for done/total."""
    filled = int(width * min(max(done / total, 0.0), 1.0)) if total > 0 else width
    return "[" + "#" * filled + "." * (width - filled) + "]"


@dataclass
class Ports:
    """Every port of the run, chosen once."""

    modbus: int = field(default_factory=free_port)
    gateway: int = field(default_factory=free_port)
    status: int = field(default_factory=free_port)
    cloud: int = field(default_factory=free_port)


def gateway_config(ports: Ports, tty: Path | None, bridge: bool = True) -> str:
    """The demo gateway's outpost.toml."""
    lines = [
        f'gateway_id = "{GATEWAY_ID}"',
        "[storage]",
        'durability = "normal"',
        "[status]",
        f'bind = "127.0.0.1:{ports.status}"',
        "history_interval = 1.0",
        "[sys]",
        "interval = 5.0",
        "[uplink]",
        "enabled = true",
        # the bridge-less drain at the end reports once (at its connect), so its outbox
        # empties and stays empty
        f"status_interval = {1.0 if bridge else 3600.0}",
        "[[uplink.remotes]]",
        'name = "cloud"',
        f'addresses = ["127.0.0.1:{ports.cloud}"]',
        f'client_id = "{GATEWAY_ID}-uplink"',
        "backoff_initial = 0.5",
        "backoff_max = 2.0",
        "[[uplink.forward]]",
        'filter = "devices/#"',
        f'topic = {{ strip = "devices/", prefix = "{CLOUD_PREFIX}" }}',
    ]
    if not bridge:
        return "\n".join(lines) + "\n"
    lines += [
        "[bridge]",
        'prefix = "devices"',
        "diagnostics_interval = 5.0",
        "[[bridge.buses]]",
        'name = "plant"',
        'type = "tcp"',
        'host = "127.0.0.1"',
        f"port = {ports.modbus}",
        "connect_timeout = 1.0",
        "reconnect_max = 2.0",
    ]
    for unit in UNITS:
        lines += [
            "[[bridge.devices]]",
            f'name = "meter-{unit}"',
            'bus = "plant"',
            f"unit_id = {unit}",
            "address_base = 0",
            "poll_interval = 1.0",
            'report = "poll"',
        ]
        for name, address, kind, unit_name, scale in POINTS:
            lines += [
                "[[bridge.devices.points]]",
                f'name = "{name}"',
                'table = "input"',
                f"address = {address}",
                f'type = "{kind}"',
                f'unit = "{unit_name}"',
                f"scale = {scale}",
                "precision = 2",
            ]
            if (unit, name) == (1, "power"):  # one-minute windows beside its raw values
                lines.append('aggregate = "1m"')
    if tty is not None:
        lines += [
            "[[bridge.serial]]",
            'name = "climate"',
            f'device = "{tty}"',
            "baudrate = 9600",
            'framing = "line"',
            'delimiter = "\\r\\n"',
            'parser = "regex"',
            "pattern = 'T=(?P<temp>-?[0-9.]+) H=(?P<hum>[0-9.]+)'",
            "silence_timeout = 5.0",
            "reopen_initial = 0.5",
            "reopen_max = 2.0",
            "points = [",
            '  { name = "temperature", field = "temp", type = "float", unit = "C", '
            'report = "poll" },',
            '  { name = "humidity", field = "hum", type = "float", unit = "%", '
            'report = "poll" },',
            "]",
        ]
    # An alarm the simulator crosses: meter-1's current swings 5.3-7.7 A every ~19 s.
    lines += [
        "[[alarms.rules]]",
        'name = "meter-1-current-high"',
        'point = "meter-1/current"',
        'kind = "high"',
        "limit = 7.0",
        "deadband = 0.2",
        'severity = "high"',
    ]
    return "\n".join(lines) + "\n"


CLOUD_CONFIG = """\
gateway_id = "demo-cloud"
[limits]
# the lander's Receive Maximum: it acks a file at a time, so a smaller window stalls it
max_inflight = 1000
max_queued_messages = 10000000
max_queued_bytes = 4294967296
[storage]
durability = "normal"
[status]
enabled = false
[sys]
interval = 0
"""


class Child:
    """One child process in its own process group, its output in a log file."""

    def __init__(self, name: str, args: list[str], logs: Path, cwd: Path) -> None:
        self.name, self.args, self.logs, self.cwd = name, args, logs, cwd
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def log_path(self) -> Path:
        return self.logs / f"{self.name}.log"

    def start(self) -> Child:
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                self.args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                cwd=self.cwd, start_new_session=True,
                env={**os.environ, "PYTHONUNBUFFERED": "1"})
        return self

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 15.0) -> None:
        """Signal the whole process group, wait, SIGKILL what is left."""
        process, self.process = self.process, None
        if process is None:
            return
        if process.poll() is None:
            try:
                os.killpg(process.pid, sig)
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(10)
            except ProcessLookupError:
                pass
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)  # stragglers (socat, Spark's JVM)


class Demo:
    """One run of the demo; `run()` returns the report dict."""

    def __init__(self, work: Path, duration: float, out: TextIO = sys.stdout) -> None:
        self.work = work.resolve()
        self.duration = duration
        self.out = out
        self.ports = Ports()
        self.root = Path(__file__).resolve().parents[3]
        self.children: list[Child] = []
        self.py = sys.executable
        self.tty: Path | None = None
        self._last_progress = 0.0
        self.cloud_outage_s = 0.0

    # -- output ------------------------------------------------------------------------------
    def say(self, text: str) -> None:
        print(text, file=self.out, flush=True)

    def phase(self, text: str) -> None:
        self.say(f"\n== {text}")

    def progress(self, text: str, final: bool = False) -> None:
        """A line redrawn in place on a terminal; one line per 5 s otherwise (logs, CI)."""
        if self.out.isatty():
            print("\r" + text.ljust(100), end="", file=self.out, flush=True)
        elif final or time.monotonic() - self._last_progress >= 5.0:
            self._last_progress = time.monotonic()
            print(text, file=self.out, flush=True)

    def end_progress(self) -> None:
        if self.out.isatty():
            print(file=self.out, flush=True)

    # -- children ----------------------------------------------------------------------------
    def child(self, name: str, args: list[str]) -> Child:
        found = Child(name, args, self.work / "logs", self.root).start()
        self.children.append(found)
        return found

    def wait_until(self, what: str, check: Callable[[], bool], timeout: float,
                   watch: Child | None = None) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if check():
                return
            if watch is not None and not watch.running():
                raise DemoError(f"{what}: {watch.name} exited, see {watch.log_path}")
            time.sleep(0.2)
        raise DemoError(f"{what}: not within {timeout:.0f} s")

    def start_gateway(self, config: Path) -> Child:
        gw = self.child("gateway", [self.py, "-m", "outpost", "run", "--config", str(config),
                                    "--listen", f"127.0.0.1:{self.ports.gateway}",
                                    "--state-dir", str(self.work / "state")])
        self.wait_until("gateway", lambda: port_open(self.ports.gateway)
                        and self.uplink() is not None, 30, gw)
        return gw

    def start_cloud(self) -> Child:
        cloud = self.child("cloud-broker", [
            self.py, "-m", "outpost", "run", "--config", str(self.work / "config/cloud.toml"),
            "--listen", f"127.0.0.1:{self.ports.cloud}",
            "--state-dir", str(self.work / "cloud-state")])
        self.wait_until("cloud broker", lambda: port_open(self.ports.cloud), 30, cloud)
        return cloud

    def uplink(self) -> dict[str, Any] | None:
        """The uplink section of the gateway's /status, None when it cannot be read."""
        try:
            status = fetch_status(f"http://127.0.0.1:{self.ports.status}")
        except (StatusUnavailableError, OSError, ValueError):
            return None
        uplink = status.get("uplink")
        return uplink if isinstance(uplink, dict) else None

    def uplink_line(self) -> str:
        up = self.uplink()
        if up is None:
            return "uplink: (no status yet)"
        remotes = up.get("remotes") or [{}]
        state = "connected" if up.get("connected") else "DISCONNECTED"
        return (f"uplink {state:<12} backlog {up.get('backlog_messages', 0):>6}  "
                f"sent {remotes[0].get('sent', 0):>6}  drain {up.get('drain_rate', 0)} msg/s")

    def run_for(self, what: str, seconds: float) -> None:
        """Let the pipeline run, with a progress bar and the uplink figures."""
        start = time.monotonic()
        while (elapsed := time.monotonic() - start) < seconds:
            self.progress(f"  {what} {bar(elapsed, seconds)} {elapsed:4.0f}/{seconds:.0f} s  "
                          f"{self.uplink_line()}")
            time.sleep(min(1.0, max(seconds - elapsed, 0.05)))
        self.end_progress()

    # -- bronze ------------------------------------------------------------------------------
    def landed_ids(self) -> tuple[int, set[tuple[str, int]]]:
        """(bronze lines, distinct (epoch, seq)) over the committed bronze files."""
        lines, ids = 0, set()
        for path in (self.work / "bronze").rglob("part-*.json.gz"):
            with gzip.open(path, "rt", encoding="utf-8") as f:
                for line in f:
                    lines += 1
                    record = json.loads(line)
                    if record.get("seq") is not None:
                        ids.add((str(record.get("epoch")), int(record["seq"])))
        return lines, ids

    def outbox_counts(self) -> tuple[int, int]:
        """(sequence numbers handed out, rows still in the outbox) of the stopped gateway."""
        db = self.work / "state" / "outpost.db"
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        try:
            row = conn.execute(
                "SELECT value FROM meta WHERE key = 'outbox_seq_reserved'").fetchone()
            left = conn.execute("SELECT count(*) FROM outbox").fetchone()[0]
        finally:
            conn.close()
        return int(row[0]) if row else 0, int(left)

    # -- the run -----------------------------------------------------------------------------
    def prepare(self) -> None:
        self.work.mkdir(parents=True, exist_ok=True)
        for name in WORK_SUBDIRS:
            shutil.rmtree(self.work / name, ignore_errors=True)
            (self.work / name).mkdir()
        (self.work / "demo-report.json").unlink(missing_ok=True)
        config = self.work / "config"
        if shutil.which("socat") is not None:
            self.tty = self.work / "tty" / "sensor-a"
        else:
            self.say("  socat not found: no serial device (apt-get install socat)")
        (config / "outpost.toml").write_text(gateway_config(self.ports, self.tty))
        (config / "flush.toml").write_text(gateway_config(self.ports, None, bridge=False))
        (config / "cloud.toml").write_text(CLOUD_CONFIG)

    def run(self) -> dict[str, Any]:
        d = self.duration
        started = time.monotonic()
        p = self.ports
        self.phase(f"1/7 setting up in {self.work} (about {d:.0f} s of device data)")
        self.prepare()
        cfg = self.work / "config"
        sim = self.child("modbus-sim", [self.py, "-m", "outpost.demo.devices", "modbus",
                                        "--port", str(p.modbus),
                                        "--units", ",".join(map(str, UNITS))])
        self.wait_until("modbus simulator", lambda: port_open(p.modbus), 20, sim)
        self.say(f"  modbus simulator     127.0.0.1:{p.modbus}  units {UNITS} "
                 f"({len(POINTS)} points each, values change every 0.5 s)")
        if self.tty is not None:
            other = self.work / "tty" / "sensor-b"
            socat = self.child("socat", ["socat", f"pty,raw,echo=0,link={self.tty}",
                                         f"pty,raw,echo=0,link={other}"])
            self.wait_until("socat pty pair", lambda: self.tty is not None and self.tty.exists()
                            and other.exists(), 10, socat)
            self.child("serial-sensor", [self.py, "-m", "outpost.demo.devices", "serial",
                                         "--tty", str(other)])
            self.say(f"  serial sensor        {self.tty} (socat pty, 'T=21.53 H=45.2' lines)")
        cloud = self.start_cloud()
        self.say(f"  cloud broker         127.0.0.1:{p.cloud}  (outpost, plain broker)")
        lander = self.child("lander", [
            self.py, "-m", "cloud_spark", "land", "--broker", f"127.0.0.1:{p.cloud}",
            *(arg for topic in LANDER_TOPICS for arg in ("--topic", topic)),
            "--root", str(self.work),
            "--client-id", "demo-lander", "--roll-seconds", "1"])
        self.say(f"  lander               -> {self.work / 'bronze'}")
        gw = self.start_gateway(cfg / "outpost.toml")
        self.say(f"  gateway              127.0.0.1:{p.gateway}  "
                 f"(mosquitto_sub -h 127.0.0.1 -p {p.gateway} -t 'devices/#' -v)")
        self.say(f"  status page          http://127.0.0.1:{p.status}/")
        self.say(f"  logs                 {self.work / 'logs'}")

        self.phase("2/7 devices -> gateway -> uplink -> cloud broker -> lander")
        self.run_for("running", 0.3 * d)

        self.phase("3/7 cloud broker stopped: the uplink keeps everything in its outbox")
        stopped_at = time.monotonic()
        cloud.stop()
        self.children.remove(cloud)
        self.run_for("cloud down", 0.3 * d)
        peak = (self.uplink() or {}).get("backlog_messages", 0)
        self.say(f"  backlog after the outage: {peak} messages")

        self.phase("4/7 cloud broker back: the backlog drains")
        self.start_cloud()
        start = time.monotonic()
        self.wait_until("uplink reconnect", lambda: bool((self.uplink() or {}).get(
            "connected")), 60, gw)
        self.cloud_outage_s = time.monotonic() - stopped_at  # until the uplink was back
        self.wait_until("backlog drain", lambda: (self.uplink() or {}).get(
            "backlog_messages", 1) < 20, 60, gw)
        self.say(f"  drained in {time.monotonic() - start:.1f} s; {self.uplink_line()}")
        self.run_for("running", 0.1 * d)

        self.phase("5/7 gateway killed (SIGKILL) and started again")
        gw.stop(signal.SIGKILL)
        self.children.remove(gw)
        time.sleep(2)
        gw = self.start_gateway(cfg / "outpost.toml")
        self.say("  gateway back; the outbox survived; unacknowledged messages are resent")
        self.run_for("running", 0.3 * d)

        self.phase("6/7 stopping the devices and the gateway; landing what is left")
        gw.stop()
        self.children.remove(gw)
        flush = self.start_gateway(cfg / "flush.toml")  # no bridge: only the outbox drains
        self.wait_until("final drain", lambda: (self.uplink() or {}).get(
            "backlog_messages", 1) == 0, 60, flush)
        flush.stop()
        self.children.remove(flush)
        sent, left = self.outbox_counts()
        deadline = time.monotonic() + 60
        lines, ids = self.landed_ids()
        while len(ids) < sent and time.monotonic() < deadline:
            self.progress(f"  landing {bar(len(ids), sent)} {len(ids)}/{sent}")
            time.sleep(1)
            lines, ids = self.landed_ids()
        self.progress(f"  landing {bar(len(ids), sent)} {len(ids)}/{sent}", final=True)
        self.end_progress()
        lander.stop()
        self.stop_all()
        device_seconds = time.monotonic() - started

        self.phase("7/7 Spark jobs (local mode): silver, rollups, availability, quality, "
                   "health, report")
        report = self.spark(sent, left, lines, len(ids))
        report["pipeline_s"] = round(device_seconds, 1)
        report["cloud_outage_s"] = round(self.cloud_outage_s, 1)
        report["total_s"] = round(time.monotonic() - started, 1)
        (self.work / "demo-report.json").write_text(json.dumps(report, indent=2) + "\n")
        self.print_report(report)
        return report

    def spark(self, sent: int, left: int, lines: int, distinct: int) -> dict[str, Any]:
        report: dict[str, Any] = {
            "sent": sent, "left_in_outbox": left, "bronze_lines": lines,
            "landed_distinct": distinct, "spark": False,
        }
        if shutil.which("java") is None:
            self.say("  java not found: Spark skipped (Java 17+: apt-get install "
                     "default-jre-headless); counts below come from the bronze files")
            report["duplicates_removed"] = lines - distinct
            return report
        tables = self.work / "tables"
        job = self.child("spark", [self.py, "-m", "cloud_spark", "--log-level", "WARNING",
                                   "all", "--root", str(self.work), "--out", str(tables),
                                   "--master", "local[2]",
                                   "--conf", "spark.sql.shuffle.partitions=4",
                                   "--conf", "spark.ui.enabled=false"])
        start, timeout = time.monotonic(), 600.0
        while job.running() and (elapsed := time.monotonic() - start) < timeout:
            self.progress(f"  spark {bar(elapsed % 60, 60, 20)} {elapsed:4.0f} s")
            time.sleep(1)
        self.end_progress()
        code = job.process.returncode if job.process is not None else None
        job.stop()
        if code != 0:
            raise DemoError(f"Spark jobs failed or timed out, see {job.log_path}")
        results: dict[str, dict[str, Any]] = {}
        for line in job.log_path.read_text(errors="replace").splitlines():
            if line.startswith('{"job"'):
                data = json.loads(line)
                results[data.pop("job")] = data
        summary = json.loads((tables / "report.json").read_text())
        rollups = dict(results.get("rollups", {}))  # rows per grain
        rollups.pop("recomputed_days", None)  # how many days the run rewrote, not a grain
        report.update({
            "spark": True,
            "landed": summary["messages"],
            "duplicates_removed": summary["duplicates_removed"],
            "missing_seq": summary["missing_seq"],
            "epochs": summary["epochs"],
            "points": summary["points"],
            "rollup_rows": sum(int(v) for v in rollups.values()),
            "rollups_by_grain": rollups,
            "device_outages": summary["device_outages"],
            "device_down_s": round(summary["downtime_s"], 1),
            "gateway_outages": summary["gateway_outages"],
            "gateway_down_s": round(summary["gateway_down_s"], 1),
            "link_outages": summary["link_outages"],
            "link_down_s": round(summary["link_down_s"], 1),
            "uplink_diagnostics_rows": summary["uplink_diagnostics_rows"],
            "status_rows": summary["status_rows"],
            "quarantined": summary["quarantined"],
            "alarm_occurrences": results.get("alarms", {}).get("occurrences", 0),
            "tables": str(tables),
        })
        return report

    def print_report(self, r: dict[str, Any]) -> None:
        self.phase("report")
        # Every message the uplink forwarded has a sequence number: device readings, status
        # and diagnostics and the uplink's own diagnostics alike; those are what must land.
        self.say(f"  messages forwarded through the outbox       {r['sent']:>8,}"
                 "   (device readings, status, diagnostics; uplink diagnostics)")
        if r.get("spark"):
            self.say(f"  messages landed (unique)                    {r['landed']:>8,}")
            self.say(f"  bronze rows                                 {r['bronze_lines']:>8,}")
            self.say(f"  duplicates removed                          "
                     f"{r['duplicates_removed']:>8,}")
            self.say(f"  missing sequence numbers                    {r['missing_seq']:>8,}"
                     f"   over {r['epochs']} epoch(s)")
            self.say(f"  point rows                                  {r['points']:>8,}")
            self.say(f"  rollup rows                                 {r['rollup_rows']:>8,}"
                     f"   {r['rollups_by_grain']}")
            self.say(f"  device outages                              {r['device_outages']:>8,}"
                     f"   {r['device_down_s']:,.1f} s down")
            self.say(f"  gateway outages                             {r['gateway_outages']:>8,}"
                     f"   {r['gateway_down_s']:,.1f} s down (the SIGKILL)")
            self.say(f"  link outages                                {r['link_outages']:>8,}"
                     f"   {r['link_down_s']:,.1f} s down (cloud broker stopped, uplink back "
                     f"after {r['cloud_outage_s']:.1f} s)")
            self.say(f"  uplink diagnostics / status rows            "
                     f"{r['uplink_diagnostics_rows']:>8,} / {r['status_rows']:,}")
            self.say(f"  alarm occurrences (gold/alarms)             "
                     f"{r['alarm_occurrences']:>8,}   meter-1-current-high raised and cleared")
            verdict = ("OK: nothing lost" if r["missing_seq"] == 0 and r["landed"] >= r["sent"]
                       else "MISSING MESSAGES")
        else:
            self.say(f"  messages landed (unique, from bronze)       "
                     f"{r['landed_distinct']:>8,}")
            self.say(f"  duplicates removed                          "
                     f"{r['duplicates_removed']:>8,}")
            verdict = "(Spark skipped)"
        self.say(f"  {verdict}   pipeline {r['pipeline_s']:.0f} s, total {r['total_s']:.0f} s")
        tables = self.work / "tables"
        self.say(f"\n  status page (while a demo runs): http://127.0.0.1:{self.ports.status}/")
        self.say(f"  bronze:  {self.work / 'bronze'}")
        if r.get("spark"):
            self.say(f"  silver:  {tables / 'silver'}")
            self.say(f"  gold:    {tables / 'gold'}")
            self.say(f"  report:  {tables / 'report.json'}  and {self.work / 'demo-report.json'}")

    def stop_all(self) -> None:
        while self.children:
            self.children.pop().stop(timeout=10)


@contextmanager
def _terminate_as_interrupt() -> Iterator[None]:
    def handler(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, handler)
    previous_int = signal.signal(signal.SIGINT, signal.default_int_handler)  # even if ignored
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGINT, previous_int)


def run_demo(work: Path, duration: float) -> int:
    """Run the demo in `work`; 0 when nothing was lost."""
    demo = Demo(work, duration)
    with _terminate_as_interrupt():
        try:
            report = demo.run()
        except KeyboardInterrupt:
            demo.say("\ninterrupted: stopping every process")
            return 130
        except DemoError as exc:
            demo.say(f"\noutpost demo failed: {exc}")
            return 1
        finally:
            demo.stop_all()
    if report.get("spark") and (report["missing_seq"] != 0 or report["landed"] < report["sent"]):
        return 1
    return 0
