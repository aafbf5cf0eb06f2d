"""docs/getting-started.md, walked command by command against a simulated SDM630.

The meter is the pymodbus simulator on the far end of a socat pty pair (the page's
`/dev/ttyUSB0`), holding SDM630 values in its input registers; the cloud broker is a real
mosquitto. Each `<!-- step: NAME -->` block of the page runs as written, with only the
machine-specific parts replaced: the serial port, /etc/outpost and /var/lib/outpost, the
ports, the cloud host name, and (for the `mosquitto_sub` steps, which watch forever) `-C`/`-W`
so that they end.
"""

from __future__ import annotations

import json
import logging
import re
import shlex
import struct
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.bridge.simulator import Simulator
from tests.bridge.support import SocatPair
from tests.conftest import require
from tests.gateway.broker.e2e.helpers import wait_for
from tests.support.mosquitto import (
    free_port,
    mosquitto_available,
    start_mosquitto,
    wait_for_port,
)

ROOT = Path(__file__).resolve().parents[2]
PAGE = (ROOT / "docs" / "getting-started.md").read_text(encoding="utf-8")
logging.getLogger("pymodbus").setLevel(logging.CRITICAL)

# SDM630 input registers (1-based parameter numbers, float32 high word first)
METER = {1: 230.1, 3: 229.8, 5: 231.2, 7: 4.5, 53: 2845.5, 71: 49.98, 73: 12345.5}


def step(name: str) -> str:
    match = re.search(rf"<!-- step: {name} -->\n```[a-z]*\n(.*?)^```", PAGE,
                      re.MULTILINE | re.DOTALL)
    assert match, f"docs/getting-started.md has no step {name!r}"
    return match.group(1)


class Machine:
    """What the page's names stand for on this test machine."""

    def __init__(self, tmp_path: Path, tty: Path, cloud_port: int) -> None:
        self.etc = tmp_path / "etc"
        self.state = tmp_path / "state"
        self.etc.mkdir()
        self.state.mkdir()
        self.replacements = [
            ("/dev/ttyUSB0", str(tty)),
            ("/etc/outpost/", f"{self.etc}/"),
            ("/var/lib/outpost", str(self.state)),
            ("cloud.example.com:1883", f"127.0.0.1:{cloud_port}"),
            ("-h cloud.example.com -p 1883", f"-h 127.0.0.1 -p {cloud_port}"),
            ("127.0.0.1:8080", f"127.0.0.1:{free_port()}"),
        ]
        self.listener = free_port()
        self.replacements.append(("1883", str(self.listener)))  # the gateway's own listener

    def local(self, text: str) -> str:
        for name, here in self.replacements:
            text = text.replace(name, here)
        return text

    def command(self, name: str) -> list[str]:
        args = shlex.split(self.local(step(name)).strip())
        if args[0] == "outpost":
            return [sys.executable, "-m", "outpost", *args[1:]]
        return [require(args[0]), *args[1:]]


def run(args: list[str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, cwd=ROOT, check=False,
                          timeout=timeout)


@pytest.fixture
def meter(tmp_path: Path) -> Iterator[Path]:
    """A simulated SDM630 at unit 1, 9600 baud, behind the pty the test calls /dev/ttyUSB0."""
    pair = SocatPair(tmp_path, "usb").start()
    sim = Simulator([1], "rtu", device=str(pair.b), size=400, baudrate=9600)
    sim.start()
    for number, value in METER.items():
        sim.set_registers(1, "input", number - 1,
                          list(struct.unpack(">HH", struct.pack(">f", value))))
    yield pair.a
    sim.stop()
    pair.stop()


def test_getting_started_page_end_to_end(tmp_path: Path, meter: Path) -> None:
    if not mosquitto_available():
        pytest.skip("mosquitto is not installed")
    with start_mosquitto(tmp_path / "cloud") as cloud:
        machine = Machine(tmp_path, meter, cloud.port)

        probe = run(machine.command("probe"))
        assert probe.returncode == 0, probe.stdout + probe.stderr
        assert "32 of 32 point(s) answered, 0 failed" in probe.stdout
        rows = {line.split()[0]: line.split()[1:] for line in probe.stdout.splitlines()}
        assert rows["voltage_l1"] == ["input", "1", "0x0000", "230.1", "V"]
        assert rows["frequency"][3:] == ["49.98", "Hz"]

        config = machine.etc / "outpost.toml"
        config.write_text(machine.local(step("config")), encoding="utf-8")
        check = run(machine.command("check"))
        assert check.returncode == 0, check.stderr
        assert check.stdout.strip() == f"{config}: OK"

        plan = run(machine.command("plan"))
        assert plan.returncode == 0, plan.stderr
        shown = re.search(r"<!-- step: plan -->\n```sh\n.*?```\n\n```\n(.*?)```", PAGE,
                          re.DOTALL)
        assert shown
        for line in machine.local(shown.group(1)).splitlines():
            if line != "...":  # the page shortens the output
                assert line.removesuffix("...") in plan.stdout, line

        gateway = subprocess.Popen(machine.command("run"), stdout=subprocess.DEVNULL,
                                   stderr=subprocess.PIPE, text=True, cwd=ROOT)
        try:
            wait_for_port("127.0.0.1", machine.listener, 30)
            watch = run([*machine.command("watch"), "-C", "33", "-W", "30"])
            values = dict(line.split(" ", 1) for line in watch.stdout.splitlines())
            point = json.loads(values["devices/meter-1/voltage_l1"])
            assert (point["value"], point["unit"], point["quality"]) == (230.1, "V", "good")
            assert json.loads(values["devices/meter-1/import_energy"])["value"] == 12345.5

            def status_online() -> str | None:
                done = run(machine.command("status"))
                return done.stdout if done.returncode == 0 and "1 online" in done.stdout \
                    else None

            wait_for(status_online, 30, message="outpost status never showed the meter online")

            remote = run([*machine.command("cloud"), "-C", "5", "-W", "30"])
            lines = remote.stdout.splitlines()
            assert len(lines) == 5, remote.stdout + remote.stderr
            assert all(line.startswith("site-1/meter-1/") for line in lines)
            forwarded = dict(line.split(" ", 1) for line in lines)
            if "site-1/meter-1/voltage_l1" in forwarded:
                assert json.loads(forwarded["site-1/meter-1/voltage_l1"])["value"] == 230.1
        finally:
            gateway.terminate()
            _out, err = gateway.communicate(timeout=30)
        assert "meter-1: online" in err
