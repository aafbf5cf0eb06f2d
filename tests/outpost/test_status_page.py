"""The status page in a real headless Chromium (Debian's chromium package), loaded from a
running gateway with a polled Modbus device, a silent one, an uplink whose cloud is down (its
backlog grows) and a connected client: what the page shows after its JavaScript ran
(`--dump-dom`), and a screenshot kept as a test artifact: written to
`test-artifacts/status-page.png` at the repository root (git-ignored; another folder with
`OUTPOST_TEST_ARTIFACTS=DIR`), and copied to docs/status-page.png when
`OUTPOST_UPDATE_SCREENSHOT` is set."""

from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import require
from tests.gateway.broker.e2e.helpers import RawClient
from tests.outpost.support import (
    ROOT,
    MovingDevice,
    Outpost,
    bridge_config,
    start_outpost,
    status_json,
)
from tests.support.mosquitto import free_port
from tests.support.waiting import wait_for

UPLINK = """
[uplink]
enabled = true
status_interval = 0.3

[[uplink.remotes]]
name = "cloud"
addresses = ["127.0.0.1:{port}"]
backoff_initial = 0.5
backoff_max = 1.0

[[uplink.forward]]
filter = "devices/#"

[status]
bind = "127.0.0.1:0"
history_interval = 0.4
"""


def artifacts_dir() -> Path:
    """Where test artifacts are kept after the run: `$OUTPOST_TEST_ARTIFACTS`, else
    `test-artifacts/` at the repository root (in .gitignore)."""
    return Path(os.environ.get("OUTPOST_TEST_ARTIFACTS") or ROOT / "test-artifacts")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Outpost]:
    device = MovingDevice(units=(1,))
    port = device.start()
    workdir = tmp_path_factory.mktemp("page")
    config = 'gateway_id = "plant-7"\n' + bridge_config(port, {"meter-1": 1, "meter-2": 2}) + \
        UPLINK.format(port=free_port())
    outpost = start_outpost(workdir, config, "--state-dir", str(workdir / "state"))
    with RawClient(outpost.host, outpost.port) as client:
        assert client.connect("hmi-panel")[3] == 0
        client.subscribe(("devices/#", 0))

        def enough_history() -> bool:
            status = status_json(outpost, history=True)
            history = status["history"]
            return (len(history.get("points/meter-1/power", [])) >= 8
                    and len(history.get("uplink/backlog_messages", [])) >= 8
                    and status["uplink"]["backlog_messages"] > 0)

        wait_for(enough_history, timeout=20, message="no history to fill")
        yield outpost
    assert outpost.stop() == 0
    device.stop()


def chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    browser = shutil.which("chromium") or require("chromium")
    return subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu",
         "--disable-background-networking", "--disable-component-update", "--no-first-run",
         f"--user-data-dir={tmp_path / 'chromium-profile'}", "--window-size=1200,900",
         "--virtual-time-budget=3000", *args],
        capture_output=True, text=True, timeout=90, check=False,
    )


def test_page_shows_devices_uplink_and_clients(site: Outpost, tmp_path: Path) -> None:
    result = chromium(tmp_path, "--dump-dom", site.url("/"))
    assert result.returncode == 0, result.stderr[-2000:]
    dom = result.stdout
    assert 'data-ready="1"' in dom, "the page never rendered a status"
    assert re.search(r'id="error"[^>]*style="display: none;?"', dom), "the page shows an error"
    assert '<span id="gateway">plant-7</span>' in dom
    assert 'data-device="meter-1" data-state="online"' in dom
    assert 'data-device="meter-2" data-state="offline"' in dom
    row = re.search(r'<tr data-point="meter-1/power">(.*?)</tr>', dom, re.S)
    assert row, dom
    value = re.search(r'class="num value">([0-9.]+) kW<', row.group(1))
    assert value and 150 <= float(value.group(1)) <= 250
    samples = re.search(r'data-samples="(\d+)"', row.group(1))
    assert samples and int(samples.group(1)) >= 8  # a sparkline from the server's history
    assert "<polyline" in row.group(1)
    assert re.search(r'data-uplink="state">.*?disconnected', dom, re.S)
    backlog = re.search(r'data-uplink="backlog">(\d+) msgs', dom)
    assert backlog and int(backlog.group(1)) > 0
    chart = re.search(r'backlog over time</div><svg[^>]*data-samples="(\d+)"', dom)
    assert chart and int(chart.group(1)) >= 8
    assert '<tr data-client="hmi-panel">' in dom
    assert not re.search(r'(?:src|href)="(?:https?:)?//', dom)  # no external assets
    assert "<link" not in dom


def test_screenshot_artifact(site: Outpost, tmp_path: Path) -> None:
    shot = tmp_path / "status-page.png"
    result = chromium(tmp_path, f"--screenshot={shot}", site.url("/"))
    if shot.exists():  # kept before the checks: a wrong picture is the one worth looking at
        kept = artifacts_dir() / "status-page.png"
        kept.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(shot, kept)
    assert result.returncode == 0, result.stderr[-2000:]
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    assert (width, height) == (1200, 900)
    assert len(data) > 20_000  # a rendered page, not a blank one
    assert (artifacts_dir() / "status-page.png").read_bytes() == data
    if os.environ.get("OUTPOST_UPDATE_SCREENSHOT"):  # refresh the picture in docs/ on request
        shutil.copy(shot, ROOT / "docs" / "status-page.png")
