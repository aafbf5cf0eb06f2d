"""Serial line devices on socat ptys, through `outpost run`, to an MQTT client.

Lines, garbage, NMEA with bad checksums, a command written back, and the cable pulled (socat
killed: the pty vanishes) and plugged in again under the same name.
"""

from __future__ import annotations

import os
import select
from collections.abc import Callable
from pathlib import Path

from tests.bridge.support import SocatPair, Watcher
from tests.bridge.test_serial_parsing import GGA
from tests.gateway.broker.e2e.helpers import wait_for
from tests.support.broker_proc import BrokerProcess


def config(sensor: Path, gps: Path) -> str:
    return f"""
[bridge]
diagnostics_interval = 0.2

[[bridge.serial]]
name = "sensor"
device = "{sensor}"
delimiter = "\\r\\n"
pattern = 'T=(?P<temp>-?[0-9.]+) H=(?P<hum>[0-9]+)'
commands = {{ rate = "RATE {{value}}\\r\\n" }}
reopen_initial = 0.1
reopen_max = 0.3
points = [
  {{ name = "temperature", field = "temp", unit = "C" }},
  {{ name = "humidity", field = "hum", type = "int", unit = "%" }},
]

[[bridge.serial]]
name = "gps"
device = "{gps}"
parser = "nmea"
delimiter = "\\r\\n"
points = [
  {{ name = "lat", field = "GGA.2", type = "coordinate" }},
  {{ name = "altitude", field = "GGA.9", unit = "m" }},
]
"""


class PtyEnd:
    """The device side of a pty pair, written and read raw."""

    def __init__(self, path: Path) -> None:
        self.fd = os.open(path, os.O_RDWR | os.O_NOCTTY)

    def send(self, data: bytes) -> bool:
        """Write raw bytes; returns False so `send(...) or check()` reads as a retry loop."""
        os.write(self.fd, data)
        return False

    def read_until(self, marker: bytes, timeout: float = 5.0) -> bytes:
        data = b""

        def got() -> bool:
            nonlocal data
            if select.select([self.fd], [], [], 0.05)[0]:
                data += os.read(self.fd, 1024)
            return marker in data

        wait_for(got, timeout, message=f"never read {marker!r}, got {data!r}")
        return data

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def test_lines_garbage_commands_unplug_and_replug(
    tmp_path: Path, broker_factory: Callable[..., BrokerProcess]
) -> None:
    sensor = SocatPair(tmp_path, "sensor").start()
    gps = SocatPair(tmp_path, "gps").start()
    broker = broker_factory(config(sensor.a, gps.a))
    device = PtyEnd(sensor.b)
    gps_device = PtyEnd(gps.b)
    try:
        with Watcher(broker) as mqtt:
            # the bridge opens the port right after start; resend until it has
            wait_for(lambda: device.send(b"T=21.5 H=40\r\n") or mqtt.latest(
                "devices/sensor/temperature"), message="no temperature")
            assert mqtt.latest("devices/sensor/temperature") == {
                "value": 21.5, "unit": "C", "ts": mqtt.latest("devices/sensor/temperature")["ts"],
                "quality": "good"}
            assert mqtt.wait("devices/sensor/humidity")["value"] == 40
            assert mqtt.wait("devices/sensor/status") == "online"

            errors = mqtt.wait("devices/sensor/diagnostics")["crc_errors"]
            device.send(b"\x00\xff\x13garbage\r\nT=oops\r\nT=-3.25 H=41\r\n")
            assert mqtt.wait("devices/sensor/temperature", lambda v: v["value"] == -3.25)
            mqtt.wait("devices/sensor/diagnostics", lambda d: d["crc_errors"] >= errors + 2)
            values = [v["value"] for v in map(__import__("json").loads,
                                              mqtt.payloads("devices/sensor/temperature"))]
            assert set(values) <= {21.5, -3.25}

            wait_for(lambda: gps_device.send(GGA.replace(b"545.4", b"545.5") + b"\r\n" + GGA
                                             + b"\r\n") or mqtt.latest("devices/gps/altitude"))
            assert mqtt.latest("devices/gps/altitude")["value"] == 545.4  # bad checksum dropped
            assert abs(mqtt.latest("devices/gps/lat")["value"] - 48.1173) < 1e-6
            assert mqtt.wait("devices/gps/diagnostics", lambda d: d["crc_errors"] >= 1)

            assert mqtt.set("devices/sensor/rate", 1, 5) == {
                "id": 1, "ok": True, "error": None, "value": 5, "registers": None}
            assert b"RATE 5\r\n" in device.read_until(b"\r\n")
            assert mqtt.set("devices/sensor/reboot", 2, 1)["error"].startswith("unknown command")

            device.close()
            sensor.stop()  # unplugged: the pty is gone
            mqtt.wait("devices/sensor/status", lambda s: s == "offline")
            assert mqtt.latest("devices/gps/status") == "online"  # the other port is fine
            result = mqtt.set("devices/sensor/rate", 3, 1)
            assert result["ok"] is False and "not open" in result["error"]

            sensor.start()  # plugged back in under the same name
            device = PtyEnd(sensor.b)
            wait_for(lambda: device.send(b"T=22.0 H=42\r\n") or mqtt.latest(
                "devices/sensor/temperature")["value"] == 22.0, timeout=10,
                message="no value after replug")
            mqtt.wait("devices/sensor/status", lambda s: s == "online")
    finally:
        device.close()
        gps_device.close()
        sensor.stop()
        gps.stop()
