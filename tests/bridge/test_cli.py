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
    return subprocess.run([sys.executable, "-m", "outpost", *args], capture_output=True,
                          text=True, cwd=ROOT, check=False, timeout=60)


def test_modbus_plan_command(tmp_path: Path) -> None:
    path = write(tmp_path, EXAMPLE)
    done = outpost("modbus", "plan", str(path))
    assert done.returncode == 0, done.stderr
    assert "device plc-1 (unit_id 1, address_base 0, 5 points)" in done.stdout
    assert "FC01 coil 0..0 = wire 0x0000..0x0000 (1 bits, 0 unused): run" in done.stdout
    assert "FC04 input 343..344 = wire 0x0156..0x0157 (2 registers, 0 unused): energy" \
        in done.stdout


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
        assert "check --table" in missing.stderr and "--count (default 4" in missing.stderr
        hexed = outpost("modbus", "probe", "--tcp", f"127.0.0.1:{port}", "--unit-id", "0x7",
                        "--address", "0x3", "--address-base", "0", "--count", "0x2")
        assert hexed.returncode == 0, hexed.stderr
        assert "holding 3: 0x47F1 18417 18417" in hexed.stdout.splitlines()
        wrong = outpost("modbus", "probe", "--tcp", f"127.0.0.1:{port}", "--address", "0x4G",
                        "--address-base", "0")
        assert wrong.returncode == 2 and "not a number: '0x4G'" in wrong.stderr
    finally:
        sim.stop()


def test_modbus_probe_help_states_the_defaults() -> None:
    done = outpost("modbus", "probe", "--help")
    text = " ".join(done.stdout.split())
    for default in ("default holding (FC03)", "registers or bits to read (default 4)",
                    "Modbus unit id (default 1)", "hex (0x48)"):
        assert default in text, default


def test_modbus_probe_reads_a_profile_and_says_which_points_fail() -> None:
    """The SDM120 profile against a simulated meter whose map stops after the first points."""
    sim = Simulator([3], "tcp", size=40)  # input registers 0..39: voltage .. frequency only
    port = sim.start()
    try:
        sim.set_registers(3, "input", 0, [0x4366, 0x8000])  # 230.5 V, float32 ABCD
        done = outpost("modbus", "probe", "--tcp", f"127.0.0.1:{port}", "--unit-id", "3",
                       "--map", "profile:eastron-sdm120", "--timeout", "0.5")
        assert done.returncode == 1, done.stderr
        lines = {line.split()[0]: line for line in done.stdout.splitlines()}
        assert lines["voltage"].split()[1:] == ["input", "1", "0x0000", "230.5", "V"]
        assert "FAILED: " in lines["frequency"] and "exception 2" in lines["frequency"]
        assert "no input register here" in lines["total_energy"]
        assert "7 of 14 point(s) answered, 7 failed" in done.stdout
    finally:
        sim.stop()


def test_modbus_probe_of_a_closed_port_reads_once_and_says_so(tmp_path: Path) -> None:
    sim = Simulator([1], "tcp", size=4)
    port = sim.start()
    sim.stop()  # nothing listens on the port any more
    done = outpost("modbus", "probe", "--tcp", f"127.0.0.1:{port}", "--address", "0",
                   "--address-base", "0")
    assert done.returncode == 1
    assert "probe failed:" in done.stderr and "retrying" not in done.stderr
    unknown = outpost("modbus", "probe", "--tcp", f"127.0.0.1:{port}",
                      "--map", "profile:eastron-sdm603")
    assert unknown.returncode == 2
    assert "did you mean 'profile:eastron-sdm630'?" in unknown.stderr
