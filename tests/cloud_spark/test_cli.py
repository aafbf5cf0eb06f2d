"""The command line: every command and flag documented; the module entry points run."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cloud_spark.cli import _range, build_parser, job_params
from cloud_spark.jobs import JOBS
from cloud_spark.jobs.quality import QualityParams
from cloud_spark.spark import submit_args

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "cloud.md"


def subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    raise AssertionError("no subcommands")


def test_every_command_and_flag_is_documented() -> None:
    text = DOC.read_text()
    missing = []
    for name, sub in subcommands().items():
        if f"python -m cloud_spark {name}" not in text:
            missing.append(name)
        for action in sub._actions:
            missing += [
                f"{name} {flag}"
                for flag in action.option_strings
                if flag.startswith("--")
                and flag != "--help"
                and f"`{flag}" not in text
                and f" {flag} " not in text
                and f"[{flag}" not in text
            ]
    assert missing == []
    assert set(subcommands()) == {"land", *JOBS, "all", "maintain"}  # maintain: not in all


def test_flags_become_job_parameters() -> None:
    args = build_parser().parse_args(
        ["quality", "--out", "o", "--range", "power=0:250", "--range", "rpm=:3000",
         "--stuck-after-s", "1.5"]
    )  # fmt: skip
    assert job_params("quality", args) == QualityParams(
        ranges=(("power", 0.0, 250.0), ("rpm", None, 3000.0)), stuck_after_ms=1500
    )
    rollups = build_parser().parse_args(["rollups", "--out", "o", "--grains", "1m,1h"])
    assert job_params("rollups", rollups).grains == ("1m", "1h")
    for job in ("quality", "health", "availability"):
        assert job_params(job, build_parser().parse_args([job, "--out", "o", "--full"])).full
        assert not job_params(job, build_parser().parse_args([job, "--out", "o"])).full
    everything = build_parser().parse_args(["all", "--root", "r", "--out", "o", "--full"])
    assert job_params("quality", everything).full and job_params("health", everything).full


@pytest.mark.parametrize("bad", ["power", "power=1", "=1:2", "p=a:b"])
def test_bad_ranges_are_refused(bad: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        _range(bad)


@pytest.mark.parametrize(
    "entry", [["-m", "cloud_spark"], [str(ROOT / "cloud_spark" / "__main__.py")]]
)
def test_module_and_script_entry_points(entry: list[str], tmp_path: Path) -> None:
    """``python -m cloud_spark`` and the script form spark-submit uses (from anywhere)."""
    done = subprocess.run(
        [sys.executable, *entry, "silver", "--help"],
        cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "--late-after-s" in done.stdout


def test_land_does_not_import_pyspark() -> None:
    code = (
        "import sys; from cloud_spark import cli, lander; "
        "sys.exit(1 if any(m.startswith('pyspark') for m in sys.modules) else 0)"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, timeout=60, check=False)
    assert done.returncode == 0


def test_spark_submit_runs_a_job(tmp_path: Path) -> None:
    """``spark-submit cloud_spark/__main__.py report …``: the cluster way to run a job."""
    bin_dir = Path(sys.executable).parent
    submit = bin_dir / "spark-submit"
    if not submit.exists():
        pytest.skip("spark-submit is not installed next to this Python")
    env = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
    }
    out = tmp_path / "tables"
    done = subprocess.run(
        [str(submit), "--master", "local[1]", *submit_args(),
         "--driver-java-options", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
         "--conf", "spark.ui.enabled=false",
         str(ROOT / "cloud_spark" / "__main__.py"), "--log-level", "WARNING",
         "report", "--out", str(out)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=100, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "OK: nothing lost" in done.stdout
    report = json.loads((out / "report.json").read_text())
    assert report["bronze_rows"] == 0 and report["missing_seq"] == 0
