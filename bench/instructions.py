"""Instructions per delivered message: the broker's work, counted where seconds are noise.

Theory of operation
-------------------
Rates on a shared 2-core machine move by tens of percent with other people's work; the number
of instructions the broker executes per message does not. For every workload a fresh
`outpost run` is started under valgrind's callgrind with instrumentation off (so start-up is
not counted and runs at valgrind's uninstrumented pace), the load generator (`bench.loadgen`,
the same six scenarios as `bench.compare`) runs it, and around each measured part
(`loadgen.Probe`) the counters are switched on and zeroed (`callgrind_control -i on`, `-z`)
and read at its end (`callgrind_control -e`: the instructions, `Ir`, of every thread of the
broker). The figure is those instructions divided by what the part delivered:

  fan-in, fan-out, qos1, latency   per message delivered to a subscriber in the window
  idle                             per accepted connection (CONNECT, session, CONNACK)
  retained-store                   per retained QoS 1 publish stored and acknowledged
  retained-delivery                per retained message delivered to a new `#` subscriber

Under callgrind the broker runs about fifty times slower, so the throughput workloads keep it
saturated and it reads and writes in bigger batches than at full speed: compare figures of this
mode with each other (before / after a change, same options), not with a run at full speed.
`perf stat -e instructions` would count at full speed, but many virtual machines (this
project's included) do not expose the hardware counter; callgrind counts the same anywhere.
Counts move by about 1 % between runs (hash seeds, timer ticks, batch sizes).

    .venv/bin/python -m bench.instructions --json instructions.json
    .venv/bin/python -m bench.instructions --scenarios qos1,idle
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench import compare, loadgen, workers

SCENARIOS = ("fan-in", "fan-out", "qos1", "latency", "idle", "retained")
# The reference harness's limits (bench/README.md, "Under overload"): an in-flight window of
# 20 towards a QoS 1 subscriber, queues that never drop, nothing persisted.
OUTPOST_CONF = """\
[limits]
max_connections = 100000
max_queued_messages = 1000000
max_queued_bytes = 4294967296
max_inflight = 20
[sys]
interval = 0
[status]
enabled = false
[storage]
durability = "memory"
"""
# Start-up under valgrind takes about ten seconds on an idle machine.
START_TIMEOUT = 120.0
_THREAD_TOTAL = re.compile(r"^\s*Th\s+\d+\s+([\d,]+)\s*$", re.MULTILINE)


def counted_instructions(report: str) -> int:
    """The sum over threads of `callgrind_control -e` output (its `Th N  count` lines)."""
    totals = _THREAD_TOTAL.findall(report)
    if not totals:
        raise RuntimeError(f"no instruction totals in callgrind_control output:\n{report}")
    return sum(int(total.replace(",", "")) for total in totals)


@dataclass
class Callgrind:
    """A `loadgen.Probe` that counts a callgrind-run broker's instructions per part."""

    pid: int
    control: str = "callgrind_control"
    counts: dict[str, int] = field(default_factory=dict)

    def _run(self, *args: str) -> str:
        done = subprocess.run(
            [self.control, *args, str(self.pid)], capture_output=True, text=True, timeout=120,
            check=True,
        )  # fmt: skip
        return done.stdout

    def begin(self, label: str) -> None:
        """Count from now on."""
        self._run("--instr=on")
        self._run("--zero")

    def end(self, label: str) -> None:
        """Record what was counted since `begin` under `label`; stop counting."""
        self.counts[label] = counted_instructions(self._run("-e", "Ir"))
        self._run("--instr=off")


@dataclass(frozen=True)
class Setup:
    """How the broker is started."""

    workdir: Path
    broker_cpu: int | None = 0
    python: str = str(compare.REPO / ".venv" / "bin" / "python")
    valgrind: str = "valgrind"

    def start(self) -> compare.Broker:
        """`outpost run` under callgrind, instrumentation off, accepting connections."""
        port = compare.free_port()
        conf = self.workdir / f"outpost-{port}.toml"
        conf.write_text(OUTPOST_CONF)
        command = [
            self.valgrind, "--tool=callgrind", "--instr-atstart=no",
            f"--callgrind-out-file={self.workdir}/callgrind.out.{port}",
            self.python, "-m", "outpost", "run", "--listen", f"{compare.HOST}:{port}",
            "--config", str(conf),
        ]  # fmt: skip
        if self.broker_cpu is not None:
            command = ["taskset", "-c", str(self.broker_cpu), *command]
        log = self.workdir / f"outpost-{port}.log"
        workers.raise_nofile()
        with log.open("wb") as out:
            proc = subprocess.Popen(
                command, cwd=compare.REPO, stdin=subprocess.DEVNULL, stdout=out,
                stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
        broker = compare.Broker("outpost", port, proc, log, command)
        try:
            compare.wait_accepting(broker, START_TIMEOUT)
        except BaseException:
            broker.stop()
            raise
        return broker


def _per(instructions: int, count: int) -> float | None:
    return round(instructions / count) if count > 0 else None


def figures(scenario: str, result: dict[str, Any], counts: dict[str, int]
            ) -> list[dict[str, Any]]:
    """One row per measured part: instructions, what it delivered, instructions per unit."""
    rows: list[tuple[str, str, int]] = []
    if scenario in ("fan-in", "fan-out", "qos1", "latency"):
        rows.append((scenario, "delivered message", result["delivered_in_window"]))
    elif scenario == "idle":
        rows.append((scenario, "connection", result["connacked"]))
    elif scenario == "retained":
        rows.append(("retained-store", "retained publish", result["retained"]))
        rows.append(("retained-delivery", "retained delivery", result["delivered"]))
    return [
        {"part": part, "unit": unit, "count": count, "instructions": counts[part],
         "per_unit": _per(counts[part], count)}
        for part, unit, count in rows if part in counts
    ]  # fmt: skip


def run_scenario(scenario: str, setup: Setup, opts: loadgen.LoadOptions) -> dict[str, Any]:
    """One workload on a fresh broker under callgrind."""
    broker = setup.start()
    probe = Callgrind(broker.pid)
    try:
        host, port = compare.HOST, broker.port
        if scenario == "fan-in":
            result = loadgen.run_throughput(loadgen.FANIN, host, port, opts, broker.pid, probe)
        elif scenario == "fan-out":
            result = loadgen.run_throughput(loadgen.FANOUT, host, port, opts, broker.pid, probe)
        elif scenario == "qos1":
            result = loadgen.run_throughput(loadgen.QOS1, host, port, opts, broker.pid, probe)
        elif scenario == "latency":
            result = loadgen.run_latency(host, port, opts, broker.pid, probe)
        elif scenario == "idle":
            result = loadgen.run_idle(host, port, opts, broker.pid, probe)
        elif scenario == "retained":
            result = loadgen.run_retained(host, port, opts, broker.pid, probe)
        else:
            raise ValueError(f"unknown scenario {scenario!r}")
    finally:
        broker.stop()
    return {"result": result, "figures": figures(scenario, result, probe.counts)}


def report(results: dict[str, dict[str, Any]]) -> str:
    """The printed table."""
    header = f"{'part':<18} {'unit':<18} {'count':>8} {'instructions':>15} {'per unit':>10}"
    lines = [header, "-" * len(header)]
    for scenario, outcome in results.items():
        if "error" in outcome:
            lines.append(f"{scenario:<18} ERROR {outcome['error']}")
            continue
        for row in outcome["figures"]:
            per = "-" if row["per_unit"] is None else f"{row['per_unit']:,}"
            lines.append(
                f"{row['part']:<18} {row['unit']:<18} {row['count']:>8,} "
                f"{row['instructions']:>15,} {per:>10}"
            )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the chosen workloads under callgrind and print instructions per message."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenarios", default=",".join(SCENARIOS))
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--latency-rate", type=float, default=100.0,
                        help="msg/s of the latency workload (callgrind keeps up with ~500)")
    parser.add_argument("--idle-connections", type=int, default=1000)
    parser.add_argument("--retained", type=int, default=5000)
    parser.add_argument("--broker-cpu", default="0", help="a CPU number or 'none'")
    parser.add_argument("--load-cpus", default="1", help="comma list, or 'none'")
    parser.add_argument("--json", type=Path, help="write options and results here")
    args = parser.parse_args(argv)
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        print("valgrind (with callgrind_control) is not installed", file=sys.stderr)
        return 2
    scenarios = [s.strip() for s in args.scenarios.split(",") if s.strip()]
    unknown = sorted(set(scenarios) - set(SCENARIOS))
    if unknown:
        parser.error(f"unknown scenario(s): {', '.join(unknown)}")
    opts = loadgen.LoadOptions(
        warmup=args.warmup, duration=args.duration, latency_duration=args.duration,
        latency_rate=args.latency_rate, idle_connections=args.idle_connections,
        retained=args.retained, cpus=loadgen.cpu_list(args.load_cpus),
    )  # fmt: skip
    broker_cpu = None if args.broker_cpu.strip().lower() == "none" else int(args.broker_cpu)
    workers.pin_to(opts.cpus)
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-instructions-") as tmp:
        setup = Setup(workdir=Path(tmp), broker_cpu=broker_cpu)
        for scenario in scenarios:
            print(f"-- {scenario}", file=sys.stderr, flush=True)
            started = time.monotonic()
            try:
                results[scenario] = run_scenario(scenario, setup, opts)
            except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
                results[scenario] = {"error": f"{type(exc).__name__}: {exc}"}
            results[scenario]["seconds"] = round(time.monotonic() - started, 1)
    print(report(results))
    if args.json is not None:
        args.json.write_text(json.dumps({"options": asdict(opts), "results": results}, indent=2))
    return 0 if all("error" not in r for r in results.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
