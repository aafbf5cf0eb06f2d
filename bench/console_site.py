"""A demonstration site for the console's screenshots and measurements: a pymodbus simulator
holding three energy meters (SDM630 input registers) and a PLC, `outpost run` with the console
on, and headless Chromium driven through Debian's chromedriver (selenium is given both paths,
so Selenium Manager never downloads anything).

`Site` starts everything in a work folder and stops it again; `Browser` logs in and drives
the console's forms the way a technician would.
"""

from __future__ import annotations

import math
import os
import re
import struct
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select

from bench.bridge.simulator import Simulator
from gateway.broker.net.security_files import set_password

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
ADMIN = ("admin", "admin-secret")
METERS = 3  # units 1..3: SDM630s; unit 10: the PLC
_CONSOLE_LINE = re.compile(r"outpost: console on (\S+)")
_LISTEN_LINE = re.compile(r"outpost: listening on (\S+):(\d+)")

CONFIG = """# A demonstration site: three energy meters on one Modbus TCP gateway, and a PLC.
gateway_id = "plant-7"

[status]
bind = "127.0.0.1:0"
history_interval = 1.0

[console]
enabled = {console}
password_file = "users"
users = {{ admin = "admin", viewer = "viewer" }}

[uplink]
enabled = true

[[uplink.remotes]]
name = "cloud"
addresses = ["127.0.0.1:9"]
backoff_initial = 5.0

[[uplink.forward]]
filter = "devices/#"

[bridge]
diagnostics_interval = 2.0

[[bridge.buses]]
name = "meters"
type = "tcp"
host = "127.0.0.1"
port = {port}

[[bridge.devices]]
name = "plc"
bus = "meters"
unit_id = 10
address_base = 0
poll_interval = 0.5
points = [
  {{ name = "temperature", address = 0, type = "int16", scale = 0.1, unit = "°C", deadband = 0.2 }},
  {{ name = "pressure", address = 1, type = "uint16", scale = 0.01, unit = "bar" }},
  {{ name = "setpoint", address = 10, type = "uint16", writable = true }},
]
"""


def f32(value: float) -> list[int]:
    return list(struct.unpack(">2H", struct.pack(">f", value)))


def wait(predicate: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        result = predicate()
        if result:
            return result
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(0.02)


class Site:
    """The simulator and one `outpost run` (console on or off) in `workdir`."""

    def __init__(self, workdir: Path, console: bool = True) -> None:
        self.workdir = workdir
        self.console_enabled = console
        self.simulator = Simulator((*range(1, METERS + 1), 10), "tcp", size=400)
        self.process: subprocess.Popen[str] | None = None
        self.url = ""
        self.mqtt: tuple[str, int] = ("127.0.0.1", 0)
        self.lines: list[str] = []

    def start(self) -> Site:
        port = self.simulator.start()
        for unit in range(1, METERS + 1):
            for wire, value in ((0, 230.1 + unit), (2, 229.8), (4, 231.0), (52, 2845.5 * unit),
                                (70, 49.98), (72, 12345.6 * unit)):
                self.simulator.set_registers(unit, "input", wire, f32(value))
        self.simulator.set_registers(10, "holding", 0, [215, 312])
        self.workdir.mkdir(parents=True, exist_ok=True)
        users = self.workdir / "users"
        users.unlink(missing_ok=True)
        for user, password in (ADMIN, ("viewer", "viewer-secret")):
            set_password(users, user, password.encode(), iterations=1000)
        config = self.workdir / "outpost.toml"
        config.write_text(CONFIG.format(port=port, console=str(self.console_enabled).lower()),
                          encoding="utf-8")
        state = self.workdir / "state"
        self.process = subprocess.Popen(
            [sys.executable, "-m", "outpost", "run", "--config", str(config), "--state-dir",
             str(state), "--listen", "127.0.0.1:0"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"})
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line)
            found = _LISTEN_LINE.search(line)
            if found:
                self.mqtt = (found.group(1), int(found.group(2)))
            status = re.search(r"outpost: status on (\S+)", line)
            if status and not self.console_enabled:
                self.url = status.group(1)
                break
            console = _CONSOLE_LINE.search(line)
            if console:
                self.url = console.group(1)
                break
        if not self.url:
            raise RuntimeError("outpost did not start:\n" + "".join(self.lines))
        return self

    def set_meter(self, unit: int, step: int) -> None:
        """Move a meter's values a little (the live pages have something to show)."""
        self.simulator.set_registers(unit, "input", 0, f32(230 + 2 * math.sin(step / 3)))
        self.simulator.set_registers(unit, "input", 52, f32(2800 + 90 * math.sin(step / 5)))

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(30)
            self.process = None
        self.simulator.stop()


def log_in(driver: Any, console: str, user: str, password: str) -> None:
    """Log `driver` in on the console at `console` (its URL, ending in /console/) and wait
    until a page of a logged-in user is shown: its account form (the login page has the
    same header and an empty nav, so waiting for the header alone races the POST)."""
    driver.get(console + "login")
    driver.find_element(By.NAME, "username").send_keys(user)
    driver.find_element(By.NAME, "password").send_keys(password)
    driver.find_element(By.ID, "login").click()
    wait(lambda: driver.find_elements(By.CSS_SELECTOR, "header form.account"), 15,
         f"{user} is not logged in on {driver.current_url}")


class Browser:
    """Headless Chromium on the console."""

    def __init__(self, width: int = 1280, height: int = 860) -> None:
        options = webdriver.ChromeOptions()
        options.binary_location = CHROMIUM
        for argument in ("--headless=new", "--no-sandbox", "--disable-gpu",
                         "--disable-dev-shm-usage", f"--window-size={width},{height}",
                         "--hide-scrollbars"):
            options.add_argument(argument)
        self.driver: Any = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))

    def open(self, url: str) -> None:
        self.driver.get(url)

    def find(self, selector: str, timeout: float = 15.0) -> Any:
        return wait(lambda: (self.driver.find_elements(By.CSS_SELECTOR, selector) or [None])[0],
                    timeout, f"no {selector} on {self.driver.current_url}")

    def fill(self, values: dict[str, str]) -> None:
        for name, value in values.items():
            element = self.driver.find_element(By.NAME, name)
            if element.tag_name == "select":
                Select(element).select_by_value(value)
            else:
                element.clear()
                element.send_keys(value)

    def click(self, selector: str) -> None:
        self.find(selector).click()

    def login(self, console: str) -> None:
        log_in(self.driver, console, *ADMIN)

    def add_meter(self, console: str, name: str, unit: int, probe: bool = True) -> None:
        """Fill the add-device form for an SDM630 and stop at the review page."""
        self.open(console + "devices/new")
        self.fill({"name": name, "map": "eastron-sdm630", "bus": "meters",
                   "unit_id": str(unit), "poll_interval": "1"})
        if probe:
            self.click("#probe")
            self.find("#probe-results")
        self.click("#review")
        self.find("#diff")

    def quit(self) -> None:
        self.driver.quit()
