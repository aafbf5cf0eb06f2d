"""`outpost modbus plan` and `outpost modbus probe`, run as commands."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

from bench.bridge.simulator import Simulator
from tests.bridge.test_config import EXAMPLE, write

ROOT = Path(__file__).resolve().parents[2]
logging.getLogger("pymodbus").setLevel(logging.CRITICAL)


def outpost(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gateway", *args], capture_output=True,
                          text=True, cwd=ROOT, check=False, timeout=60)


def test_modbus_plan_command(tmp_path: Path) -> None:
    path = write(tmp_path, EXAMPLE)
    done = outpost("modbus", "plan", str(path))
    assert done.returncode == 0, done.stderr
    assert "device plc-1 (unit 1, address_base 0, 5 points)" in done.stdout
    assert "FC01 coil 0..0 (1 bits, 0 unused): run" in done.stdout



def test_modbus_plan_reports_config_errors(tmp_path: Path) -> None:
    done = outpost("modbus", "plan", str(write(tmp_path, EXAMPLE.replace("CDAB", "CDBA"))))
    assert done.returncode == 2
    assert "bridge.devices.1.byte_order: Input should be" in done.stderr


def test_modbus_probe_prints_every_type_and_order() -> None:
    sim = Simulator([7], "tcp", size=20)
    port = sim.start()
    try:
        sim.set_registers(7, "holding", 3, [0x47F1, 0x2000])
        done = outpost("modbus", "probe", "--tcp", f"127.0.0.1:{port}", "--unit", "7",
                       "--address", "4", "--address-base", "1", "--count", "2")
        assert done.returncode == 0, done.stderr
        lines = done.stdout.splitlines()
        assert "holding 4: 0x47F1 18417 18417" in lines
        assert "holding 5: 0x2000 8192 8192" in lines
        assert any(line.split() == ["4", "float32", "ABCD", "123456.0"] for line in lines)
        assert any(line.split() == ["4", "int32", "CDAB", "536889329"] for line in lines)
        assert any(line.split() == ["5", "uint16", "BA", "32"] for line in lines)
        missing = outpost("modbus", "probe", "--tcp", f"127.0.0.1:{port}", "--unit", "7",
                          "--address", "30", "--address-base", "0", "--timeout", "0.5")
        assert missing.returncode == 1
        assert "exception 2 (illegal data address)" in missing.stderr
    finally:
        sim.stop()
