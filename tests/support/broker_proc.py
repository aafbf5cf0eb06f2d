"""Start `outpost run` as a real process on 127.0.0.1 port 0 and learn its port."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

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


def start_broker(
    workdir: Path, config_text: str = "", extra_args: tuple[str, ...] = (), timeout: float = 15.0
) -> BrokerProcess:
    """Run `python -m gateway run --listen 127.0.0.1:0` with an optional TOML config."""
    workdir.mkdir(parents=True, exist_ok=True)
    args = [sys.executable, "-m", "gateway", "--log-level", "DEBUG", "run",
            "--listen", "127.0.0.1:0"]
    if config_text:
        config = workdir / "outpost.toml"
        config.write_text(config_text, encoding="utf-8")
        args += ["--config", str(config)]
    args += list(extra_args)
    log_path = workdir / "broker.log"
    log_file = log_path.open("w", encoding="utf-8")
    process = subprocess.Popen(
        args, stdout=subprocess.PIPE, stderr=log_file, text=True,
        cwd=Path(__file__).resolve().parents[2], env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    log_file.close()
    deadline = time.monotonic() + timeout
    assert process.stdout is not None
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            break
        match = _LISTENING.search(line)
        if match:
            return BrokerProcess(process, match.group(1), int(match.group(2)), log_path)
    process.kill()
    process.wait()
    raise RuntimeError(f"broker did not start:\n{log_path.read_text()}")
