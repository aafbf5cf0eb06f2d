"""Scenarios of the load generator: start workers, measure a fixed window, report figures.

Theory of operation
-------------------
A scenario forks its clients (`bench.workers`) pinned to the load CPU (CPU 1 by default; the
broker under test owns CPU 0), waits until every one has connected and subscribed, raises the go
flag, lets the traffic warm up, then samples the shared counters, the CPU time of every worker
and of the broker (`bench.procstat`) and the busy time of each CPU at the start and the end of
a fixed window. Figures are the differences over that window. After the window publishers stop
and the subscribers drain, so lost = sent x subscribers - delivered is exact for QoS 0 too.

`loadgen_cpu_pct` is the CPU the load processes used during the window, in percent of one core
(they all share CPU 1, so 100 would mean the load generator could be the limit).

Topics and client ids (all prefixed `bench`):
  fan-in   publishers `bench-fanin-pub-N` on `bench/in/N`, subscriber `bench-fanin-sub-0` on
           `bench/in/+`
  fan-out  publisher `bench-fanout-pub-0` on `bench/out`, 16 subscribers
           `bench-fanout-sub-N` on `bench/out`
  qos1     publishers `bench-qos1-pub-N` on `bench/q1/N` (QoS 1, 32 in flight), subscriber
           `bench-qos1-sub-0` on `bench/q1/+` at QoS 1
  latency  `bench-lat-pub` on `bench/lat` (QoS 1), `bench-lat-sub` on `bench/lat` at QoS 1;
           the payload starts with the send time (CLOCK_MONOTONIC ns) and a sequence number
  idle     `bench-idle-N`, CONNECT with keepalive 600, then nothing
  retained `bench-ret-pub` publishes `bench/ret/NNNNNN` retained at QoS 1 and waits for every
           PUBACK; then `bench-ret-sub` subscribes to `#` at QoS 0 and is timed until it holds
           all of them

Run one scenario against a broker that is already running:
    python -m bench.loadgen fan-in --port 1883 --broker-pid PID
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field, replace
from multiprocessing.process import BaseProcess
from typing import Any, Protocol

from bench import procstat, wire
from bench import workers as W  # noqa: N812

# ---------------------------------------------------------------------------------------------
# orchestration (parent process)


class Probe(Protocol):
    """Told when a scenario's measured part starts and ends (bench/instructions.py counts the
    broker's instructions in between); `label` names the part."""

    def begin(self, label: str) -> None: ...

    def end(self, label: str) -> None: ...


class NoProbe:
    """The default probe: nothing is told."""

    def begin(self, label: str) -> None:
        """Nothing to do."""

    def end(self, label: str) -> None:
        """Nothing to do."""


NO_PROBE = NoProbe()


@dataclass
class LoadOptions:
    """Knobs shared by all scenarios."""

    warmup: float = 2.0
    duration: float = 10.0
    latency_duration: float = 10.0
    latency_rate: float = 1000.0
    window: int = 1000
    batch: int = 128
    lowat: int = 32 * 1024
    inflight: int = 32
    idle_connections: int = 5000
    idle_concurrency: int = 200
    idle_settle: float = 1.0
    retained: int = 50_000
    retained_inflight: int = 1000
    cpus: tuple[int, ...] | None = W.DEFAULT_LOAD_CPUS


class Fleet:
    """The worker processes of one scenario, each with a role name for the CPU breakdown."""

    def __init__(self, ctl: W.Control) -> None:
        self.ctl = ctl
        self.ctx = multiprocessing.get_context("fork")
        self.procs: list[tuple[str, BaseProcess]] = []

    def spawn(self, role: str, target: Callable[..., None], *args: Any) -> None:
        proc = self.ctx.Process(target=target, args=(self.ctl, *args), daemon=True)
        proc.start()
        self.procs.append((role, proc))

    def pids(self, role: str | None = None) -> list[int]:
        return [p.pid for r, p in self.procs if p.pid is not None and (role is None or r == role)]

    def cpu_seconds(self) -> dict[str, float]:
        """CPU seconds used so far, per role."""
        out: dict[str, float] = {}
        for role, proc in self.procs:
            if proc.pid is not None:
                out[role] = out.get(role, 0.0) + procstat.cpu_seconds(proc.pid)
        return out

    def check(self, what: str) -> None:
        """Raise if a worker has died (a broker that closed a connection, for instance)."""
        dead = [p for _, p in self.procs if p.exitcode not in (None, 0)]
        if dead:
            raise W.LoadError(f"{what}: a worker exited with code {dead[0].exitcode}")

    def wait_for(self, done: Callable[[], bool], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        for _ in range(1 << 62):
            if done():
                return
            self.check(what)
            if time.monotonic() > deadline:
                raise W.LoadError(f"{what}: timed out after {timeout:.0f} s")
            time.sleep(0.005)

    def wait_ready(self, slots: Iterable[int], timeout: float = W.SETUP_TIMEOUT) -> None:
        wanted = list(slots)
        self.wait_for(
            lambda: all(self.ctl.get(s, W.READY) for s in wanted), timeout, "connecting clients"
        )

    def finish(self, timeout: float = 10.0) -> None:
        self.ctl.raise_flag(W.STOP_PUB)
        self.ctl.raise_flag(W.STOP)
        deadline = time.monotonic() + timeout
        for _, proc in self.procs:
            proc.join(max(0.0, deadline - time.monotonic()))
        for _, proc in self.procs:
            if proc.is_alive():
                proc.kill()
                proc.join(2.0)

    def __enter__(self) -> Fleet:
        return self

    def __exit__(self, *exc: object) -> None:
        self.finish()


@dataclass(frozen=True)
class Throughput:
    """A throughput scenario: N publishers, M subscribers, one topic shape."""

    name: str
    publishers: int
    subscribers: int
    qos: int
    topic: str  # `{i}` is the publisher number
    topic_filter: str
    sub_procs: int = 1


FANIN = Throughput("fan-in", 4, 1, 0, "bench/in/{i}", "bench/in/+")
FANOUT = Throughput("fan-out", 1, 16, 0, "bench/out", "bench/out", sub_procs=4)
QOS1 = Throughput("qos1", 4, 1, 1, "bench/q1/{i}", "bench/q1/+")


@dataclass
class Sample:
    """Counters and CPU times at one instant."""

    at: float
    sent: int
    delivered: int
    load_cpu: dict[str, float]
    broker_cpu: float
    cpus: procstat.CpuTimes = field(repr=False)

    @staticmethod
    def take(ctl: W.Control, fleet: Fleet, pubs: range, subs: range, broker: int | None) -> Sample:
        return Sample(
            at=time.monotonic(),
            sent=ctl.total(W.SENT, pubs),
            delivered=ctl.total(W.DELIVERED, subs),
            load_cpu=fleet.cpu_seconds(),
            broker_cpu=procstat.cpu_seconds(broker) if broker else 0.0,
            cpus=procstat.CpuTimes.read(),
        )


def _cpu_report(first: Sample, last: Sample) -> dict[str, Any]:
    """CPU use over the window in percent of one core: load generator (total and per role),
    broker, and how busy each CPU was (which also shows foreign load on the machine)."""
    span = last.at - first.at
    by_role = {
        role: round(100 * (seconds - first.load_cpu.get(role, 0.0)) / span, 1)
        for role, seconds in last.load_cpu.items()
    }
    return {
        "loadgen_cpu_pct": round(sum(by_role.values()), 1),
        "loadgen_cpu_by_role_pct": by_role,
        "broker_cpu_pct": round(100 * (last.broker_cpu - first.broker_cpu) / span, 1),
        "cpu_busy_pct": last.cpus.busy_percent_since(first.cpus),
    }


def _wait_quiet(ctl: W.Control, slots: range, quiet: float, limit: float) -> None:
    """Wait until the delivered counters stop moving for `quiet` s (at most `limit` s)."""
    last = ctl.total(W.DELIVERED, slots)
    since = time.monotonic()
    end = since + limit
    for _ in range(1 << 62):
        time.sleep(0.02)
        now = time.monotonic()
        current = ctl.total(W.DELIVERED, slots)
        if current != last:
            last, since = current, now
        if now - since >= quiet or now > end:
            return


def run_throughput(
    spec: Throughput, host: str, port: int, opts: LoadOptions, broker_pid: int | None = None,
    probe: Probe = NO_PROBE,
) -> dict[str, Any]:
    """Subscribers first, then publishers; go; warm up; measure a fixed window; drain."""
    pubs = range(spec.publishers)
    subs = range(spec.publishers, spec.publishers + spec.subscribers)
    ctl = W.Control(spec.publishers + spec.subscribers)
    tag = spec.name.replace("-", "")
    common = W.Job(
        host=host, port=port, slot=0, cpus=opts.cpus,
        max_seconds=opts.warmup + opts.duration + 60.0, qos=spec.qos, pub_slots=pubs,
        sub_slots=subs, fanout=spec.subscribers, window=opts.window,
    )  # fmt: skip
    size, pid_offset, _ = wire.publish_layout(spec.topic.format(i=0), W.PAYLOAD_SIZE, spec.qos)
    # wake a QoS 0 subscriber only for a good chunk, well below what the window lets through
    # QoS 1: after 16 messages, so PUBACKs go out in groups while the broker still has plenty
    # in flight (mosquitto and outpost both allow 64 by default)
    lowat = min(opts.lowat, opts.window * size // 4) if spec.qos == 0 else 16 * size
    with Fleet(ctl) as fleet:
        per_proc = math.ceil(spec.subscribers / spec.sub_procs)
        for first in range(0, spec.subscribers, per_proc):
            last = min(first + per_proc, spec.subscribers)
            ids = tuple(f"bench-{tag}-sub-{i}" for i in range(first, last))
            job = replace(
                common, slot=subs.start + first, client_ids=ids, topic_filter=spec.topic_filter,
                msg_size=size, pid_offset=pid_offset, lowat=lowat,
            )  # fmt: skip
            fleet.spawn("subscribers", W.subscriber, job)
        fleet.wait_ready(subs)
        for i in pubs:
            job = replace(
                common, slot=i, client_id=f"bench-{tag}-pub-{i}", topic=spec.topic.format(i=i),
                batch=opts.batch, inflight=opts.inflight,
            )  # fmt: skip
            worker = W.qos0_publisher if spec.qos == 0 else W.qos1_publisher
            fleet.spawn("publishers", worker, job)
        fleet.wait_ready(pubs)
        ctl.raise_flag(W.GO)
        time.sleep(opts.warmup)
        probe.begin(spec.name)
        first_sample = Sample.take(ctl, fleet, pubs, subs, broker_pid)
        time.sleep(opts.duration)
        last_sample = Sample.take(ctl, fleet, pubs, subs, broker_pid)
        probe.end(spec.name)
        fleet.check(spec.name)
        ctl.raise_flag(W.STOP_PUB)
        _wait_quiet(ctl, subs, 0.5, 10.0)
        sent = ctl.total(W.SENT, pubs)
        delivered = ctl.total(W.DELIVERED, subs)
        errors = ctl.total(W.ERRORS, range(ctl.slots))
        processes = len(fleet.procs)
    span = last_sample.at - first_sample.at
    delivered_in_window = last_sample.delivered - first_sample.delivered
    broker_cpu = last_sample.broker_cpu - first_sample.broker_cpu
    return {
        "scenario": spec.name,
        "publishers": spec.publishers,
        "subscribers": spec.subscribers,
        "qos": spec.qos,
        "delivered_per_s": round(delivered_in_window / span),
        # what one second of broker CPU delivers: steadier than msg/s on a shared machine
        "delivered_per_broker_cpu_s": round(delivered_in_window / broker_cpu)
        if broker_cpu
        else None,
        "sent_per_s": round((last_sample.sent - first_sample.sent) / span),
        "window_s": round(span, 3),
        "delivered_in_window": delivered_in_window,
        "total_sent": sent,
        "total_delivered": delivered,
        "lost": sent * spec.subscribers - delivered,
        "errors": errors,
        "loadgen_processes": processes,
        **_cpu_report(first_sample, last_sample),
    }


def percentile(ordered: Sequence[float], q: float) -> float:
    """The nearest-rank `q` quantile of an ascending, non-empty sequence."""
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def run_latency(
    host: str, port: int, opts: LoadOptions, broker_pid: int | None = None,
    probe: Probe = NO_PROBE,
) -> dict[str, Any]:
    """A paced QoS 1 publisher and a QoS 1 subscriber; latency of messages sent in the window."""
    ctl = W.Control(2)
    common = W.Job(
        host=host, port=port, slot=0, cpus=opts.cpus,
        max_seconds=opts.warmup + opts.latency_duration + 60.0,
    )  # fmt: skip
    with Fleet(ctl) as fleet:
        reader, writer = fleet.ctx.Pipe(duplex=False)
        fleet.spawn("subscriber", W.latency_subscriber, replace(common, slot=1), writer)
        fleet.wait_ready([1])
        job = replace(common, slot=0, rate=opts.latency_rate)
        fleet.spawn("publisher", W.latency_publisher, job)
        fleet.wait_ready([0])
        ctl.raise_flag(W.GO)
        time.sleep(opts.warmup)
        probe.begin("latency")
        first_sample = Sample.take(ctl, fleet, range(1), range(1, 2), broker_pid)
        start_ns = time.monotonic_ns()
        time.sleep(opts.latency_duration)
        end_ns = time.monotonic_ns()
        last_sample = Sample.take(ctl, fleet, range(1), range(1, 2), broker_pid)
        probe.end("latency")
        fleet.check("latency")
        ctl.raise_flag(W.STOP_PUB)
        _wait_quiet(ctl, range(1, 2), 0.5, 5.0)
        sent = ctl.get(0, W.SENT)
        errors = ctl.get(1, W.ERRORS)
        ctl.raise_flag(W.STOP)
        if not reader.poll(15.0):
            raise W.LoadError("the latency subscriber sent no results")
        sent_at, latency = reader.recv()
    window = sorted(
        lat for ts, lat in zip(sent_at, latency, strict=True) if start_ns <= ts < end_ns
    )
    if not window:
        raise W.LoadError("no latency samples in the measured window")
    return {
        "scenario": "latency",
        "rate": opts.latency_rate,
        "samples": len(window),
        "p50_ms": round(percentile(window, 0.50) / 1e6, 3),
        "p99_ms": round(percentile(window, 0.99) / 1e6, 3),
        "max_ms": round(window[-1] / 1e6, 3),
        "total_sent": sent,
        "total_delivered": len(latency),
        "lost": sent - len(latency),
        "errors": errors,
        "delivered_in_window": last_sample.delivered - first_sample.delivered,
        **_cpu_report(first_sample, last_sample),
    }


def run_idle(
    host: str, port: int, opts: LoadOptions, broker_pid: int | None = None,
    probe: Probe = NO_PROBE,
) -> dict[str, Any]:
    """Open N connections that only CONNECT; broker RSS before and after."""
    count = opts.idle_connections
    ctl = W.Control(1)
    rss_before = procstat.rss_kib(broker_pid) if broker_pid else None
    limit = 60.0 + count / 50
    with Fleet(ctl) as fleet:
        job = W.Job(
            host=host, port=port, slot=0, cpus=opts.cpus, max_seconds=limit + 60.0,
            count=count, concurrency=opts.idle_concurrency,
        )  # fmt: skip
        probe.begin("idle")
        fleet.spawn("connections", W.idle_worker, job)
        fleet.wait_for(lambda: ctl.get(0, W.READY) == 2, limit, "idle connections")
        probe.end("idle")
        time.sleep(opts.idle_settle)
        rss_after = procstat.rss_kib(broker_pid) if broker_pid else None
        connected = ctl.get(0, W.DELIVERED)
        failed = ctl.get(0, W.ERRORS)
        seconds = ctl.get(0, W.VALUE) / 1e9
    per_conn = None
    if rss_before is not None and rss_after is not None and connected:
        per_conn = round((rss_after - rss_before) / connected, 3)
    return {
        "scenario": "idle",
        "connections": count,
        "connacked": connected,
        "failed": failed,
        "connect_s": round(seconds, 3),
        "rss_before_kib": rss_before,
        "rss_after_kib": rss_after,
        "kib_per_connection": per_conn,
    }


def run_retained(
    host: str, port: int, opts: LoadOptions, broker_pid: int | None = None,
    probe: Probe = NO_PROBE,
) -> dict[str, Any]:
    """Store N retained messages (every PUBACK received), then time a `#` subscriber."""
    count = opts.retained
    ctl = W.Control(2)
    limit = 60.0 + count / 200
    common = W.Job(host=host, port=port, slot=0, cpus=opts.cpus, max_seconds=limit + 30.0)
    with Fleet(ctl) as fleet:
        job = replace(common, count=count, inflight=opts.retained_inflight)
        fleet.spawn("publisher", W.retained_publisher, job)
        fleet.wait_ready([0])
        probe.begin("retained-store")
        ctl.raise_flag(W.GO)
        fleet.wait_for(lambda: ctl.get(0, W.READY) == 2, limit, "storing retained messages")
        probe.end("retained-store")
        acked = ctl.get(0, W.DELIVERED)
        store_s = ctl.get(0, W.VALUE) / 1e9
        if acked < count:
            raise W.LoadError(f"only {acked} of {count} retained publishes were acknowledged")
        probe.begin("retained-delivery")
        fleet.spawn("subscriber", W.retained_subscriber, replace(common, slot=1, count=count))
        fleet.wait_for(lambda: ctl.get(1, W.READY) == 2, limit, "retained delivery")
        probe.end("retained-delivery")
        delivered = ctl.get(1, W.DELIVERED)
        seconds = ctl.get(1, W.VALUE) / 1e9
        publishes = ctl.get(1, W.EXTRA)
        errors = ctl.get(0, W.ERRORS) + ctl.get(1, W.ERRORS)
    return {
        "scenario": "retained",
        "retained": count,
        "store_s": round(store_s, 3),
        "delivered": delivered,
        "publishes_received": publishes,
        "delivery_s": round(seconds, 4),
        "delivered_per_s": round(delivered / seconds) if seconds else None,
        "errors": errors,
    }


Scenario = Callable[[str, int, LoadOptions, "int | None"], dict[str, Any]]

SCENARIOS: dict[str, Scenario] = {
    "fan-in": lambda h, p, o, b: run_throughput(FANIN, h, p, o, b),
    "fan-out": lambda h, p, o, b: run_throughput(FANOUT, h, p, o, b),
    "qos1": lambda h, p, o, b: run_throughput(QOS1, h, p, o, b),
    "latency": run_latency,
    "idle": run_idle,
    "retained": run_retained,
}


def cpu_list(text: str) -> tuple[int, ...] | None:
    """`1` or `1,2` -> a tuple of CPU numbers; `none` or empty -> no pinning."""
    if text.strip().lower() in ("", "none"):
        return None
    return tuple(int(c) for c in text.split(","))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run one load scenario against a running broker")
    parser.add_argument("scenario", choices=list(SCENARIOS))
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=1883)
    parser.add_argument("--broker-pid", type=int, help="sample this process's CPU and RSS")
    parser.add_argument("--load-cpus", default="1", help="comma list, or 'none' (default: 1)")
    parser.add_argument("--warmup", type=float, default=LoadOptions.warmup)
    parser.add_argument("--duration", type=float, default=LoadOptions.duration)
    parser.add_argument("--window", type=int, default=LoadOptions.window)
    parser.add_argument("--idle-connections", type=int, default=LoadOptions.idle_connections)
    parser.add_argument("--retained", type=int, default=LoadOptions.retained)
    args = parser.parse_args(argv)
    opts = LoadOptions(
        warmup=args.warmup,
        duration=args.duration,
        latency_duration=args.duration,
        window=args.window,
        idle_connections=args.idle_connections,
        retained=args.retained,
        cpus=cpu_list(args.load_cpus),
    )
    W.pin_to(opts.cpus)  # this process only samples, but keep it off the broker's CPU too
    result = SCENARIOS[args.scenario](args.host, args.port, opts, args.broker_pid)
    json.dump({"options": asdict(opts), "result": result}, sys.stdout, indent=2)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
