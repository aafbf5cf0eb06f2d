"""Helpers of the console tests: a site (a pymodbus simulator and `outpost run` with the console),
headless Chromium (bench/console_site.py's, driven by selenium through Debian's chromedriver:
Selenium Manager never looks for or downloads anything), and plain HTTP sessions.
"""

from __future__ import annotations

import http.client
import http.cookiejar
import re
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

from bench.bridge.simulator import Simulator
from bench.console_site import CHROMEDRIVER, CHROMIUM, Browser, f32
from gateway.broker.net.security_files import set_password
from tests.outpost.support import Outpost, start_outpost

PASSWORDS = {"admin": "admin-secret", "viewer": "viewer-secret"}
SDM630 = {"voltage_l1": (0, 230.1), "voltage_l2": (2, 231.4), "power": (52, 2845.5),
          "frequency": (70, 49.98)}  # point -> (wire address of the input register, value)


CONFIG = """# The site's gateway: this comment must survive every change made from the console.
gateway_id = "plant-7"

[status]
bind = "127.0.0.1:0"
history_interval = 0.5

[console]
enabled = true
password_file = "users"
users = {{ admin = "admin", viewer = "viewer" }}

[uplink]
enabled = true

[[uplink.remotes]]
name = "cloud"
addresses = ["127.0.0.1:9"]  # nothing listens: the backlog grows
backoff_initial = 5.0

[[uplink.forward]]
filter = "devices/plc/#"

[bridge]
diagnostics_interval = 1.0

[[bridge.buses]]
name = "line"
type = "tcp"
host = "127.0.0.1"
port = {port}

# The PLC: a setpoint the technician writes, a temperature reported with a deadband.
[[bridge.devices]]
name = "plc"
bus = "line"
unit_id = 2
address_base = 0
poll_interval = 0.3
points = [
  {{ name = "temperature", address = 0, type = "int16", scale = 0.1, unit = "°C", deadband = 0.5 }},
  {{ name = "setpoint", address = 10, type = "uint16", writable = true }},
]
"""


@dataclass
class Site:
    simulator: Simulator
    outpost: Outpost
    workdir: Path

    @property
    def config_path(self) -> Path:
        return self.workdir / "outpost.toml"

    @property
    def console(self) -> str:
        return self.outpost.url("/console/")


def start_site(workdir: Path) -> Site:
    """The simulator (unit 1: an SDM630's input registers; unit 2: the PLC) and the gateway."""
    simulator = Simulator((1, 2), "tcp", size=400)
    port = simulator.start()
    for wire, value in SDM630.values():
        simulator.set_registers(1, "input", wire, f32(value))
    simulator.set_registers(2, "holding", 0, [215])
    workdir.mkdir(parents=True, exist_ok=True)
    for user, password in PASSWORDS.items():  # few iterations: the test pays less per login
        set_password(workdir / "users", user, password.encode(), iterations=1000)
    outpost = start_outpost(workdir, CONFIG.format(port=port))
    return Site(simulator, outpost, workdir)


def chrome() -> object:
    """A headless Chromium (Debian's) through Debian's chromedriver."""
    if not Path(CHROMIUM).exists() or not Path(CHROMEDRIVER).exists():
        pytest.skip("chromium and chromium-driver are not installed (make system-packages)")
    return Browser().driver


class HttpSession:
    """A plain HTTP client with a cookie jar: log in, GET and POST forms."""

    def __init__(self, base: str) -> None:
        self.base = base.rstrip("/")
        self.jar = http.cookiejar.CookieJar()
        self.opener = urllib.request.build_opener(
            urllib.request.ProxyHandler({}), urllib.request.HTTPCookieProcessor(self.jar))

    def request(self, path: str, form: dict[str, str] | None = None,
                headers: dict[str, str] | None = None) -> tuple[int, str]:
        data = None if form is None else urllib.parse.urlencode(form).encode()
        request = urllib.request.Request(self.base + path, data=data,
                                         headers={"Accept": "text/html", **(headers or {})})
        try:
            with self.opener.open(request, timeout=20) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    def login(self, user: str, password: str) -> int:
        _, page = self.request("/console/login")
        token = re.search(r'name="login_token" value="([^"]+)"', page)
        assert token is not None, page
        status, _ = self.request("/console/login", {"login_token": token.group(1),
                                                    "username": user, "password": password,
                                                    "next": "/console/"})
        return status

    def csrf(self, path: str = "/console/") -> str:
        _, page = self.request(path)
        found = re.search(r'name="csrf" value="([^"]+)"', page)
        assert found is not None, page
        return found.group(1)

    def raw(self, method: str, path: str, body: bytes = b"",
            headers: dict[str, str | bytes] | None = None, source: str = "127.0.0.1"
            ) -> tuple[int, dict[str, str], str]:
        """One request as sent, bytes and all (urllib would encode or refuse them), with the
        session's cookies, from the loopback address `source`: (status, headers, body)."""
        url = urllib.parse.urlsplit(self.base)
        connection = http.client.HTTPConnection(url.hostname or "", url.port, timeout=20,
                                                source_address=(source, 0))
        try:
            connection.putrequest(method, path)
            cookies = "; ".join(f"{c.name}={c.value}" for c in self.jar)
            sent: dict[str, str | bytes] = {"Cookie": cookies} if cookies else {}
            if body:
                sent["Content-Type"] = "application/x-www-form-urlencoded"
            for name, value in {**sent, **(headers or {}),
                                "Content-Length": str(len(body))}.items():
                connection.putheader(name, value)
            connection.endheaders(body)
            response = connection.getresponse()
            return (response.status, dict(response.getheaders()),
                    response.read().decode("utf-8", "replace"))
        finally:
            connection.close()
