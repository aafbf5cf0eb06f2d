"""Side by side: the same scenarios against outpost and mosquitto, one after another, one run.

Theory of operation
-------------------
For every scenario and every broker a fresh broker process is started on a free loopback port,
pinned to the broker CPU (`taskset -c 0`) with its open-file limit raised, and probed with a
CONNECT until it answers. The load generator (`bench.loadgen`, pinned to the load CPU) runs the
scenario, the broker is stopped, and the next broker gets the same scenario. Running scenario
by scenario (not broker by broker) keeps both brokers' figures close in time, so a change in
background load on the machine hits both.

`--generator go` runs the scenarios with the Go load generator (`bench/goload/`, on
paho.mqtt.golang; `bench.gogen` builds it once per run) instead of `bench.loadgen`'s Python
workers: the same clients, topics, windows and result keys, started from this process (so
pinned to the load CPU the same way).

`--brokers` adds peers beside mosquitto and outpost: `moquette` (0.17, Java, from
tests/support/cloud_brokers/moquette: `make java-packages`) and `aedes` (1.2, Node.js, Mosca's
successor, bench/peers/aedes: `make node-packages`), both in memory like the other two.

The table shows absolute figures, the ratio of each broker to mosquitto and which direction is
better, then each target with PASS or MISS, then the CPU evidence that the load generator was
not the bottleneck. `--json FILE` writes everything, including the raw per-scenario results.

    .venv/bin/python -m bench.compare --json bench-results.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench import gogen, loadgen, procstat, workers

REPO = Path(__file__).resolve().parents[1]
HOST = "127.0.0.1"
BROKERS = ("mosquitto", "outpost", "moquette", "aedes")
DEFAULT_BROKERS = ("mosquitto", "outpost")
PEERS = ("moquette", "aedes")  # shown beside mosquitto and outpost when asked for
MOQUETTE_LIB = REPO / "tests" / "support" / "cloud_brokers" / "moquette" / "lib"
AEDES_DIR = REPO / "bench" / "peers" / "aedes"
GENERATORS = ("python", "go")
START_TIMEOUT = 20.0
JVM_START_TIMEOUT = 90.0  # moquette: a JVM's start on a busy machine

# Mosquitto is configured so it is never throttled by its own defaults: the load generator's
# window keeps every queue small, so the queue limit only has to be out of the way; the
# in-flight window towards a QoS 1 subscriber equals outpost's default ([limits] max_inflight).
MOSQUITTO_CONF = """\
listener {port} {host}
allow_anonymous true
persistence false
max_connections -1
max_queued_messages 1000000
max_queued_bytes 0
max_inflight_messages 64
max_inflight_bytes 0
set_tcp_nodelay true
connection_messages false
log_dest stderr
log_type error
log_type warning
log_type notice
"""

# Like mosquitto here (persistence false): nothing on disk, so both measure the broker itself.
# The durable store has its own benchmarks in bench/storage/.
OUTPOST_CONF = '[limits]\nmax_connections = 20000\n[storage]\ndurability = "memory"\n'

# The peers, in memory as well: moquette 0.17 (Java; its in-flight window is its own, 0.17 has
# no setting for it) and Aedes 1.2 (Node.js, Mosca's successor; its queue limit out of the way).
MOQUETTE_CONF = """\
port {port}
host {host}
allow_anonymous true
persistence_enabled false
telemetry_enabled false
"""



@dataclass(frozen=True)
class Target:
    """A goal for outpost: a ratio to mosquitto's figure, or an absolute bound."""

    scenario: str
    metric: str
    label: str
    higher_is_better: bool
    limit: float
    absolute: bool = False

    def judge(self, outpost: float | None, mosquitto: float | None) -> tuple[float | None, str]:
        """(the figure compared with the limit, PASS / MISS / n/a)."""
        if outpost is None:
            return None, "n/a"
        if self.absolute:
            value: float | None = outpost
        elif mosquitto:
            value = outpost / mosquitto
        else:
            return None, "n/a"
        assert value is not None
        ok = value >= self.limit if self.higher_is_better else value <= self.limit
        return value, "PASS" if ok else "MISS"

    def describe(self) -> str:
        sign = ">=" if self.higher_is_better else "<="
        if self.absolute:
            return f"outpost {sign} {self.limit:g}"
        return f"outpost/mosquitto {sign} {self.limit:g}x"


TARGETS = (
    Target("fan-in", "delivered_per_s", "delivered msg/s", True, 1.0),
    Target("fan-out", "delivered_per_s", "delivered msg/s", True, 1.0),
    Target("qos1", "delivered_per_s", "delivered msg/s", True, 0.7),
    Target("latency", "p99_ms", "p99 latency ms", False, 2.0),
    Target("idle", "kib_per_connection", "KiB per connection", False, 4.0, absolute=True),
    Target("retained", "delivery_s", "time to deliver all s", False, 1.5),
)

# (scenario, metric, label, higher is better) rows of the figures table
ROWS = (
    ("fan-in", "delivered_per_s", "delivered msg/s", True),
    ("fan-in", "delivered_per_broker_cpu_s", "  per broker CPU-second", True),
    ("fan-out", "delivered_per_s", "delivered msg/s (total)", True),
    ("fan-out", "delivered_per_broker_cpu_s", "  per broker CPU-second", True),
    ("qos1", "delivered_per_s", "delivered msg/s", True),
    ("qos1", "delivered_per_broker_cpu_s", "  per broker CPU-second", True),
    ("latency", "p50_ms", "p50 ms", False),
    ("latency", "p99_ms", "p99 ms", False),
    ("latency", "max_ms", "max ms", False),
    ("idle", "kib_per_connection", "KiB per connection", False),
    ("idle", "rss_after_kib", "RSS with all connected KiB", False),
    ("retained", "delivery_s", "all retained delivered s", False),
    ("retained", "store_s", "stored (all PUBACKed) s", False),
)


# ---------------------------------------------------------------------------------------------
# brokers


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class Broker:
    """One running broker process."""

    name: str
    port: int
    proc: subprocess.Popen[bytes]
    log: Path
    command: list[str]

    @property
    def pid(self) -> int:
        return self.proc.pid

    def log_tail(self, lines: int = 15) -> str:
        try:
            text = self.log.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(5.0)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5.0)


@dataclass(frozen=True)
class BrokerSetup:
    """How to start the brokers."""

    workdir: Path
    broker_cpu: int | None = 0
    mosquitto: str = "/usr/sbin/mosquitto"
    python: str = str(REPO / ".venv" / "bin" / "python")

    def command(self, name: str, port: int) -> list[str]:
        if name == "mosquitto":
            conf = self.workdir / f"mosquitto-{port}.conf"
            conf.write_text(MOSQUITTO_CONF.format(port=port, host=HOST))
            conf.chmod(0o644)
            return [self.mosquitto, "-c", str(conf)]
        if name == "outpost":
            conf = self.workdir / f"outpost-{port}.toml"
            conf.write_text(OUTPOST_CONF)
            state = self.workdir / f"outpost-state-{port}"
            state.mkdir(exist_ok=True)
            return [
                self.python, "-m", "outpost", "run", "--listen", f"{HOST}:{port}",
                "--config", str(conf), "--state-dir", str(state),
            ]  # fmt: skip
        if name == "moquette":
            if not any(MOQUETTE_LIB.glob("*.jar")):
                raise RuntimeError(f"moquette is not in {MOQUETTE_LIB}: run make java-packages")
            home = self.workdir / f"moquette-{port}"
            (home / "config").mkdir(parents=True, exist_ok=True)
            (home / "config" / "moquette.conf").write_text(
                MOQUETTE_CONF.format(port=port, host=HOST))
            return ["java", f"-Dmoquette.path={home}", "-cp", f"{MOQUETTE_LIB}/*",
                    "io.moquette.broker.Server"]
        if name == "aedes":
            if not (AEDES_DIR / "node_modules" / "aedes").is_dir():
                raise RuntimeError(f"aedes is not installed in {AEDES_DIR}: run make "
                                   "node-packages")
            return ["node", str(AEDES_DIR / "broker.mjs"), str(port), HOST]
        raise ValueError(f"unknown broker {name!r}")

    def start(self, name: str) -> Broker:
        port = free_port()
        command = self.command(name, port)
        if self.broker_cpu is not None:
            taskset = shutil.which("taskset")
            if taskset is None:
                raise RuntimeError("taskset not found (util-linux); use --broker-cpu none")
            command = [taskset, "-c", str(self.broker_cpu), *command]
        log = self.workdir / f"{name}-{port}.log"
        workers.raise_nofile()  # inherited by the broker: thousands of connections
        with log.open("wb") as out:
            proc = subprocess.Popen(
                command,
                cwd=REPO,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        broker = Broker(name, port, proc, log, command)
        try:
            wait_accepting(broker, JVM_START_TIMEOUT if name == "moquette" else START_TIMEOUT)
        except BaseException:
            broker.stop()
            raise
        return broker


def wait_accepting(broker: Broker, timeout: float = START_TIMEOUT) -> None:
    """Until the broker answers a CONNECT with an accepting CONNACK."""
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    for _ in range(10_000):
        if broker.proc.poll() is not None:
            raise RuntimeError(
                f"{broker.name} exited with code {broker.proc.returncode} at start:\n"
                f"{broker.log_tail()}"
            )
        if time.monotonic() > deadline:
            break
        try:
            sock = workers.open_client(HOST, broker.port, "bench-probe", timeout=2.0)
        except (OSError, workers.LoadError) as exc:
            last = exc
            time.sleep(0.05)
            continue
        with contextlib.suppress(OSError):
            sock.sendall(b"\xe0\x00")
        sock.close()
        time.sleep(0.2)  # let the broker forget the probe before anything is measured
        return
    raise RuntimeError(f"{broker.name} did not accept connections: {last}\n{broker.log_tail()}")


# ---------------------------------------------------------------------------------------------
# running and reporting


def wait_for_quiet(cpus: Sequence[int], threshold: float, max_wait: float) -> dict[int, float]:
    """Wait (at most `max_wait` s) until `cpus` were each under `threshold` % busy for 1 s.

    Other people's work on a shared machine would land in the figures; this waits it out if
    it is short and returns the last reading, which goes into the results either way.
    """
    deadline = time.monotonic() + max_wait
    busy: dict[int, float] = {}
    for _ in range(10_000):
        before = procstat.CpuTimes.read()
        time.sleep(1.0)
        busy = procstat.CpuTimes.read().busy_percent_since(before)
        if all(busy.get(c, 0.0) < threshold for c in cpus) or time.monotonic() > deadline:
            break
    return {c: busy.get(c, 0.0) for c in cpus}


# (scenario, host, port, options, broker pid) -> the scenario's result
Runner = Callable[[str, str, int, loadgen.LoadOptions, "int | None"], dict[str, Any]]


def python_runner(
    scenario: str, host: str, port: int, opts: loadgen.LoadOptions, broker_pid: int | None
) -> dict[str, Any]:
    """The scenario with bench.loadgen's Python workers."""
    return loadgen.SCENARIOS[scenario](host, port, opts, broker_pid)


def go_runner(binary: Path) -> Runner:
    """The scenario with the Go load generator built at `binary`."""

    def run(
        scenario: str, host: str, port: int, opts: loadgen.LoadOptions, broker_pid: int | None
    ) -> dict[str, Any]:
        return gogen.run(binary, scenario, host, port, opts, broker_pid)

    return run


def run_all(
    scenarios: Sequence[str],
    brokers: Sequence[str],
    setup: BrokerSetup,
    opts: loadgen.LoadOptions,
    quiet_wait: float = 0.0,
    runner: Runner = python_runner,
    generator: str = "python",
) -> dict[str, dict[str, dict[str, Any]]]:
    results: dict[str, dict[str, dict[str, Any]]] = {}
    watched = sorted(
        {*(opts.cpus or ()), *([setup.broker_cpu] if setup.broker_cpu is not None else [])}
    )
    unavailable: dict[str, str] = {}
    for scenario in scenarios:
        results[scenario] = {}
        for name in brokers:
            if name in unavailable:
                results[scenario][name] = {"error": unavailable[name]}
                continue
            background = wait_for_quiet(watched, 15.0, quiet_wait) if quiet_wait > 0 else {}
            print(
                f"-- {scenario} on {name} (background busy % {background})",
                file=sys.stderr,
                flush=True,
            )
            try:
                broker = setup.start(name)
            except (OSError, RuntimeError) as exc:
                unavailable[name] = f"could not start: {exc}"
                print(f"   {unavailable[name]}", file=sys.stderr)
                results[scenario][name] = {"error": unavailable[name]}
                continue
            try:
                result = runner(scenario, HOST, broker.port, opts, broker.pid)
            except (OSError, workers.LoadError) as exc:
                result = {"error": f"{type(exc).__name__}: {exc}", "log": broker.log_tail()}
            finally:
                broker.stop()
            result["generator"] = generator
            result["broker_command"] = broker.command
            result["background_busy_pct_before"] = background
            results[scenario][name] = result
            print(f"   {_brief(result)}", file=sys.stderr, flush=True)
    return results


def _brief(result: dict[str, Any]) -> str:
    if "error" in result:
        return f"ERROR {result['error']}"
    keys = ("delivered_per_s", "p99_ms", "kib_per_connection", "delivery_s", "loadgen_cpu_pct")
    return ", ".join(f"{k}={result[k]}" for k in keys if k in result)


def _figure(result: dict[str, Any] | None, metric: str) -> float | None:
    if not result or "error" in result:
        return None
    value = result.get(metric)
    return float(value) if isinstance(value, int | float) else None


def _fmt(value: float | None) -> str:
    if value is None:
        return "-"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    if abs(value) >= 100:
        return f"{value:.1f}"
    return f"{value:.3g}" if abs(value) < 10 else f"{value:.2f}"


def _ratio(outpost: float | None, mosquitto: float | None) -> float | None:
    if outpost is None or not mosquitto:
        return None
    return outpost / mosquitto


def report(results: dict[str, dict[str, dict[str, Any]]]) -> tuple[str, list[dict[str, Any]]]:
    """The printed report and the list of judged targets."""
    lines = []
    peers = [p for p in PEERS if any(p in per_broker for per_broker in results.values())]
    header = (f"{'scenario':<9} {'figure':<27} {'mosquitto':>11} {'outpost':>11} {'o/m':>8}"
              + "".join(f" {peer:>11} {peer[0] + '/m':>8}" for peer in peers) + "  better")
    lines += [header, "-" * len(header)]
    for scenario, metric, label, higher in ROWS:
        if scenario not in results:
            continue
        m = _figure(results[scenario].get("mosquitto"), metric)
        row = f"{scenario:<9} {label:<27} {_fmt(m):>11}"
        for name in ("outpost", *peers):  # each with its ratio to mosquitto
            figure = _figure(results[scenario].get(name), metric)
            ratio = _ratio(figure, m)
            row += f" {_fmt(figure):>11} {f'{ratio:.2f}x' if ratio is not None else '-':>8}"
        lines.append(f"{row}  {'higher' if higher else 'lower'}")
    lines += ["", "targets (o/m = outpost / mosquitto):"]
    judged: list[dict[str, Any]] = []
    for target in TARGETS:
        if target.scenario not in results:
            continue
        m = _figure(results[target.scenario].get("mosquitto"), target.metric)
        o = _figure(results[target.scenario].get("outpost"), target.metric)
        value, verdict = target.judge(o, m)
        shown = "-" if value is None else (f"{value:.3g}" if target.absolute else f"{value:.2f}x")
        lines.append(
            f"  {verdict:<4} {target.scenario:<9} {target.label:<24} {shown:>8}  "
            f"(target {target.describe()}, {'higher' if target.higher_is_better else 'lower'} "
            "is better)"
        )
        judged.append({
            "scenario": target.scenario, "metric": target.metric, "outpost": o,
            "mosquitto": m, "value": value, "target": target.describe(), "result": verdict,
        })  # fmt: skip
    lines += ["", "load generator vs broker CPU during the measured window (% of one core):"]
    lines.append(
        f"  {'scenario':<9} {'broker':<10} {'loadgen':>8} {'broker':>7} {'cpu0 busy':>10} "
        f"{'cpu1 busy':>10}  lost  errors"
    )
    for scenario, per_broker in results.items():
        for name, result in per_broker.items():
            if "error" in result:
                lines.append(f"  {scenario:<9} {name:<10} ERROR {result['error'][:200]}")
                continue
            if "loadgen_cpu_pct" not in result:
                continue
            busy = result.get("cpu_busy_pct", {})
            lines.append(
                f"  {scenario:<9} {name:<10} {result['loadgen_cpu_pct']:>8} "
                f"{result['broker_cpu_pct']:>7} {busy.get(0, busy.get('0', '-')):>10} "
                f"{busy.get(1, busy.get('1', '-')):>10}  {result.get('lost', '-'):>4}  "
                f"{result.get('errors', '-')}"
            )
    lines += _warnings(results)
    return "\n".join(lines), judged


def _warnings(results: dict[str, dict[str, dict[str, Any]]]) -> list[str]:
    out = []
    for scenario, per_broker in results.items():
        for name, result in per_broker.items():
            if "loadgen_cpu_pct" not in result:
                continue
            busy = {int(k): v for k, v in result.get("cpu_busy_pct", {}).items()}
            if result["loadgen_cpu_pct"] >= 80:
                out.append(f"  WARNING {scenario}/{name}: load generator near one full core")
            foreign0 = busy.get(0, 0.0) - result["broker_cpu_pct"]
            foreign1 = busy.get(1, 0.0) - result["loadgen_cpu_pct"]
            if foreign0 > 10 or foreign1 > 10:
                out.append(
                    f"  WARNING {scenario}/{name}: other processes used ~{foreign0:.0f}% of "
                    f"cpu0 and ~{foreign1:.0f}% of cpu1; figures are disturbed"
                )
    return out


def _machine() -> dict[str, Any]:
    info: dict[str, Any] = {
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "cpus": os.cpu_count(),
    }
    with contextlib.suppress(OSError, IndexError), open("/proc/cpuinfo", encoding="ascii") as f:
        names = [line.split(":", 1)[1].strip() for line in f if line.startswith("model name")]
        info["cpu_model"] = names[0]
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        out = subprocess.run(
            ["/usr/sbin/mosquitto", "-h"], capture_output=True, timeout=5, check=False
        )
        info["mosquitto"] = out.stdout.decode(errors="replace").splitlines()[0]
    return info


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Run the benchmark scenarios against outpost and mosquitto; print ratios."
    )
    defaults = loadgen.LoadOptions()
    parser.add_argument(
        "--brokers", default=",".join(DEFAULT_BROKERS),
        help=f"of {', '.join(BROKERS)}; default: %(default)s",
    )  # fmt: skip
    parser.add_argument(
        "--scenarios", default=",".join(loadgen.SCENARIOS), help="default: %(default)s"
    )
    parser.add_argument("--json", type=Path, help="write all results to this file")
    parser.add_argument(
        "--generator", choices=GENERATORS, default="python",
        help="load generator: python (bench.loadgen) or go (bench/goload, paho.mqtt.golang); "
        "default: %(default)s",
    )  # fmt: skip
    parser.add_argument("--warmup", type=float, default=defaults.warmup, help="s, per scenario")
    parser.add_argument(
        "--duration", type=float, default=defaults.duration, help="measured window, s"
    )
    parser.add_argument("--latency-duration", type=float, default=defaults.latency_duration)
    parser.add_argument("--latency-rate", type=float, default=defaults.latency_rate)
    parser.add_argument(
        "--window", type=int, default=defaults.window,
        help="at most this many messages per subscriber sent but not yet delivered",
    )  # fmt: skip
    parser.add_argument("--idle-connections", type=int, default=defaults.idle_connections)
    parser.add_argument("--retained", type=int, default=defaults.retained)
    parser.add_argument("--broker-cpu", default="0", help="CPU for the broker, or 'none'")
    parser.add_argument("--load-cpus", default="1", help="CPUs for the load, or 'none'")
    parser.add_argument(
        "--quiet-wait", type=float, default=5.0,
        help="before each run wait up to this many s for other load on the CPUs to stop",
    )  # fmt: skip
    parser.add_argument("--mosquitto", default="/usr/sbin/mosquitto")
    parser.add_argument("--python", default=str(REPO / ".venv" / "bin" / "python"),
                        help="interpreter that runs `-m outpost run`")  # fmt: skip
    args = parser.parse_args(argv)

    brokers = [b.strip() for b in args.brokers.split(",") if b.strip()]
    scenarios = [s.strip() for s in args.scenarios.split(",") if s.strip()]
    for name in brokers:
        if name not in BROKERS:
            parser.error(f"unknown broker {name!r}; choose from {', '.join(BROKERS)}")
    for name in scenarios:
        if name not in loadgen.SCENARIOS:
            parser.error(f"unknown scenario {name!r}; choose from {', '.join(loadgen.SCENARIOS)}")
    broker_cpu = loadgen.cpu_list(args.broker_cpu)
    opts = loadgen.LoadOptions(
        warmup=args.warmup,
        duration=args.duration,
        latency_duration=args.latency_duration,
        latency_rate=args.latency_rate,
        window=args.window,
        idle_connections=args.idle_connections,
        retained=args.retained,
        cpus=loadgen.cpu_list(args.load_cpus),
    )
    runner: Runner = python_runner
    if args.generator == "go":
        try:
            binary = gogen.build()
        except gogen.GoUnavailableError as exc:
            print(f"bench.compare: {exc}", file=sys.stderr)
            return 2
        print(f"-- load generator: {binary} (Go, paho.mqtt.golang)", file=sys.stderr)
        runner = go_runner(binary)
    workers.pin_to(opts.cpus)
    workers.raise_nofile()
    started = time.time()
    with tempfile.TemporaryDirectory(prefix="outpost-bench-") as tmp:
        os.chmod(tmp, 0o755)  # mosquitto drops root privileges but must read its config
        setup = BrokerSetup(
            workdir=Path(tmp),
            broker_cpu=broker_cpu[0] if broker_cpu else None,
            mosquitto=args.mosquitto,
            python=args.python,
        )
        results = run_all(
            scenarios, brokers, setup, opts, args.quiet_wait, runner, args.generator
        )
    text, judged = report(results)
    print(f"load generator: {args.generator}\n")
    print(text)
    if args.json:
        document = {
            "command": [sys.executable, "-m", "bench.compare", *(argv or sys.argv[1:])],
            "started": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(started)),
            "seconds": round(time.time() - started, 1),
            "machine": _machine(),
            "generator": args.generator,
            "options": asdict(opts),
            "broker_cpu": broker_cpu,
            "mosquitto_conf": MOSQUITTO_CONF,
            "outpost_conf": OUTPOST_CONF,
            "results": results,
            "targets": judged,
        }
        args.json.write_text(json.dumps(document, indent=2) + "\n")
        print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
