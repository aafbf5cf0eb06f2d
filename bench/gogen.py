"""The Go load generator (`bench/goload/`, on paho.mqtt.golang) seen from Python.

Theory of operation
-------------------
`build()` checks that `go` is there and at least as new as the `go` line of
`bench/goload/go.mod` asks (a `GoUnavailableError` with a readable message otherwise), then builds
the program once with `go build -mod=readonly` into a cache folder under the system's temporary
directory (written to a temporary name and renamed, so two builds never see half a binary).
`run()` runs one scenario of it against a running broker with the options of a
`bench.loadgen.LoadOptions` and returns the `result` object it prints, whose keys are the ones
`bench.loadgen` returns for the same scenario; so `bench.compare --generator go` reports both
generators the same way. The program inherits this process's CPU affinity: `bench.compare`
pins itself to the load CPU before it starts anything, as it does for the Python workers.

    .venv/bin/python -m bench.compare --generator go --scenarios qos1,fan-in
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from bench import loadgen, workers

GO_DIR = Path(__file__).resolve().parent / "goload"
SCENARIOS = tuple(loadgen.SCENARIOS)
BUILD_TIMEOUT = 600.0


class GoUnavailableError(RuntimeError):
    """No usable `go` command: missing, or older than bench/goload/go.mod needs."""


def go_command() -> str:
    """The `go` on PATH, else the official install's /usr/local/go/bin/go."""
    found = shutil.which("go")
    if found:
        return found
    fallback = Path("/usr/local/go/bin/go")
    if fallback.exists():
        return str(fallback)
    raise GoUnavailableError(
        "the Go load generator needs `go` (not on PATH, nor /usr/local/go/bin/go); "
        f"install Go {'.'.join(map(str, go_needed()))} or newer, or use --generator python"
    )


def go_needed() -> tuple[int, int]:
    """(major, minor) of the `go` directive of bench/goload/go.mod."""
    text = (GO_DIR / "go.mod").read_text()
    match = re.search(r"^go (\d+)\.(\d+)", text, re.MULTILINE)
    if match is None:
        raise GoUnavailableError(f"no go directive in {GO_DIR / 'go.mod'}")
    return int(match[1]), int(match[2])


def go_version(go: str) -> tuple[int, int] | None:
    """(major, minor) of `go env GOVERSION`, None if it cannot be told."""
    try:
        out = subprocess.run(
            [go, "env", "GOVERSION"], capture_output=True, text=True, timeout=60, check=False
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    match = re.match(r"go(\d+)\.(\d+)", out.strip())
    return (int(match[1]), int(match[2])) if match else None


def check_go() -> str:
    """The `go` command if new enough for bench/goload/go.mod; GoUnavailableError otherwise."""
    go = go_command()
    needed = go_needed()
    have = go_version(go)
    if have is None or have < needed:
        shown = "an unknown version" if have is None else f"go{have[0]}.{have[1]}"
        raise GoUnavailableError(
            f"{go} is {shown}; bench/goload/go.mod needs go{needed[0]}.{needed[1]} or newer "
            "(or use --generator python)"
        )
    return go


def default_binary() -> Path:
    return Path(tempfile.gettempdir()) / f"outpost-goload-{os.getuid()}" / "goload"


def build(binary: Path | None = None) -> Path:
    """Build bench/goload into `binary` (default: a cache folder in the temp directory)."""
    go = check_go()
    target = binary or default_binary()
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f".{target.name}.{os.getpid()}")
    try:
        built = subprocess.run(
            [go, "build", "-mod=readonly", "-buildvcs=false", "-o", str(partial), "."],
            cwd=GO_DIR, capture_output=True, text=True, timeout=BUILD_TIMEOUT, check=False,
        )  # fmt: skip
    except subprocess.TimeoutExpired as exc:
        raise GoUnavailableError(f"go build of {GO_DIR} took over {BUILD_TIMEOUT:.0f} s") from exc
    if built.returncode != 0:
        partial.unlink(missing_ok=True)
        raise GoUnavailableError(
            f"go build of {GO_DIR} failed (modules missing? `make go-packages` fetches them):\n"
            f"{built.stderr.strip()}"
        )
    partial.replace(target)
    return target


def arguments(
    scenario: str, host: str, port: int, opts: loadgen.LoadOptions, broker_pid: int | None
) -> list[str]:
    """The command-line flags that give the Go program the same options."""
    args = [
        scenario, "-host", host, "-port", str(port),
        "-warmup", str(opts.warmup), "-duration", str(opts.duration),
        "-latency-duration", str(opts.latency_duration), "-latency-rate", str(opts.latency_rate),
        "-window", str(opts.window), "-inflight", str(opts.inflight), "-lowat", str(opts.lowat),
        "-idle-connections", str(opts.idle_connections),
        "-idle-concurrency", str(opts.idle_concurrency), "-idle-settle", str(opts.idle_settle),
        "-retained", str(opts.retained), "-retained-inflight", str(opts.retained_inflight),
    ]  # fmt: skip
    if broker_pid:
        args += ["-broker-pid", str(broker_pid)]
    return args


def time_limit(scenario: str, opts: loadgen.LoadOptions) -> float:
    """How long the program may run before it is killed (its own waits are shorter)."""
    if scenario == "idle":
        return 120.0 + opts.idle_connections / 50 + opts.idle_settle
    if scenario == "retained":
        return 150.0 + opts.retained / 100
    if scenario == "latency":
        return 90.0 + opts.warmup + opts.latency_duration
    return 90.0 + opts.warmup + opts.duration


def run(
    binary: Path, scenario: str, host: str, port: int, opts: loadgen.LoadOptions,
    broker_pid: int | None = None,
) -> dict[str, Any]:
    """Run one scenario; its result (the keys of bench.loadgen's). LoadError if it failed."""
    if scenario not in SCENARIOS:
        raise ValueError(f"unknown scenario {scenario!r}")
    command = [str(binary), *arguments(scenario, host, port, opts, broker_pid)]
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=time_limit(scenario, opts),
            check=False,
        )  # fmt: skip
    except subprocess.TimeoutExpired as exc:
        raise workers.LoadError(f"goload {scenario} did not finish in {exc.timeout:.0f} s") from exc
    if done.returncode != 0:
        tail = "\n".join(done.stderr.strip().splitlines()[-5:])
        raise workers.LoadError(f"goload {scenario} exited with {done.returncode}: {tail}")
    lines = done.stdout.strip().splitlines()
    if not lines:
        raise workers.LoadError(f"goload {scenario} printed nothing")
    document = json.loads(lines[-1])
    result: dict[str, Any] = document["result"]
    return result
