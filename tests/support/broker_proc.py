"""Start `outpost run` as a real process on 127.0.0.1 port 0 and learn its port."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_LISTENING = re.compile(r"outpost: listening on ([0-9.]+):(\d+)")


@dataclass
class BrokerProcess:
    """A running `outpost run`."""

    process: subprocess.Popen[str]
    host: str
    port: int
    log_path: Path

    def log(self) -> str:
        """Everything the broker logged so far."""
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 10.0) -> int:
        """Stop the broker and return its exit code."""
        if self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout)
        if self.process.stdout is not None:
            self.process.stdout.close()
        return self.process.returncode


def launch(
    args: list[str], log_path: Path, timeout: float,
    environ: Mapping[str, str] | None = None, env: Mapping[str, str] | None = None,
) -> tuple[BrokerProcess, list[str]]:
    """Run the `outpost` command line `args` in the repository root (stderr to `log_path`) and
    wait until it prints its first listening line. Returns the process and the stdout lines read
    so far. The environment is `environ` (default: ours) + PYTHONUNBUFFERED=1 + `env`."""
    base = os.environ if environ is None else environ
    with log_path.open("w", encoding="utf-8") as log_file:
        process = subprocess.Popen(
            args, stdout=subprocess.PIPE, stderr=log_file, text=True, cwd=ROOT,
            env={**base, "PYTHONUNBUFFERED": "1", **(env or {})},
        )
    lines: list[str] = []
    deadline = time.monotonic() + timeout
    assert process.stdout is not None
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            break
        lines.append(line)
        match = _LISTENING.search(line)
        if match:
            return BrokerProcess(process, match.group(1), int(match.group(2)), log_path), lines
    process.kill()
    process.wait()
    raise RuntimeError(f"outpost did not start:\n{''.join(lines)}\n{log_path.read_text()}")


def start_broker(
    workdir: Path, config_text: str = "", extra_args: tuple[str, ...] = (), timeout: float = 15.0
) -> BrokerProcess:
    """Run `python -m outpost run --listen 127.0.0.1:0` with an optional TOML config."""
    workdir.mkdir(parents=True, exist_ok=True)
    args = [sys.executable, "-m", "outpost", "--log-level", "DEBUG", "run",
            "--listen", "127.0.0.1:0"]
    if config_text:
        config = workdir / "outpost.toml"
        config.write_text(config_text, encoding="utf-8")
        args += ["--config", str(config)]
    args += list(extra_args)
    return launch(args, workdir / "broker.log", timeout)[0]
