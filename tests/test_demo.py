"""`outpost demo` in a shortened run: the whole pipeline, then its report.

Runs `python -m outpost demo --duration 12` in a child process (it starts the simulators, two
outposts, the lander and Spark itself) and checks the JSON report it leaves behind: everything
the gateway handed to the uplink landed, no sequence number is missing, rollups were built, and
availability tells the truth about the run: the stopped cloud broker is one link outage as long
as the uplink was without it, the SIGKILL one gateway outage, and no device was ever down (the
simulated devices never stop; their status flaps at each gateway start are not outages).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.pipeline  # minutes: `make pipeline-test`
@pytest.mark.timeout(960)
def test_quick_demo_lands_everything(tmp_path: Path) -> None:
    if shutil.which("java") is None:
        pytest.skip("java not found: the demo's Spark jobs need Java 17+ "
                    "(apt-get install default-jre-headless)")
    work = tmp_path / "demo-data"
    # The bound catches a hang only: Spark on a loaded 2-core machine takes minutes.
    done = subprocess.run(
        [sys.executable, "-m", "outpost", "demo", "--duration", "12", "--work-dir", str(work)],
        cwd=ROOT, capture_output=True, text=True, timeout=900, check=False)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    report = json.loads((work / "demo-report.json").read_text())
    assert report["spark"] is True
    assert report["sent"] > 0
    assert report["landed"] >= report["sent"], report
    assert report["missing_seq"] == 0, report
    assert report["rollup_rows"] > 0, report
    assert report["uplink_diagnostics_rows"] > 0, report  # the uplink's own, by default
    assert report["device_outages"] == 0, report
    assert report["gateway_outages"] == 1 and report["gateway_down_s"] > 0, report
    assert report["link_outages"] == 1, report
    # the diagnostics come every second: the outage is seen within a report or two
    assert abs(report["link_down_s"] - report["cloud_outage_s"]) <= 3.0, report
    assert "OK: nothing lost" in done.stdout
    for phase in ("1/7", "3/7", "5/7", "7/7", "== report"):
        assert phase in done.stdout
