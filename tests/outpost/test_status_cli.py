"""`outpost status --config FILE`: it asks the endpoint that file configures, and says so
plainly when that endpoint is disabled instead of trying the default port."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def status(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "outpost", "status", *args],
                          capture_output=True, text=True, timeout=30, cwd=ROOT, check=False)


def test_disabled_endpoint_is_reported_not_tried(tmp_path: Path) -> None:
    config = tmp_path / "outpost.toml"
    config.write_text("[status]\nenabled = false\n", encoding="utf-8")
    result = status("--config", str(config))
    assert result.returncode == 1
    assert result.stderr.startswith(
        f"outpost status: the status endpoint is disabled ([status] of {config} has enabled "
        f"= false)")
    assert "8080" not in result.stderr


def test_unreachable_endpoint_names_the_bind_it_used(tmp_path: Path) -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    config = tmp_path / "outpost.toml"
    config.write_text(f'[status]\nbind = "127.0.0.1:{port}"\n', encoding="utf-8")
    result = status("--config", str(config))
    assert result.returncode == 1
    assert f"(bind 127.0.0.1:{port} from [status] of {config})" in result.stderr
