"""The console's alarms against a running `outpost run` (a pymodbus simulator drives the PLC's
temperature): the role gate of every POST route for operators and viewers, acknowledging and
shelving over HTTP, an alarm defined from the console through check, review and apply, and the
whole lifecycle in headless Chromium (raise, acknowledge, clear) seen on MQTT too."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from bench.bridge.simulator import Simulator
from bench.console_site import log_in
from gateway.broker.net.security_files import set_password
from outpost.console import (
    pages_admin,
    pages_alarms,
    pages_broker,
    pages_devices,
    pages_forms,
    pages_history,
)
from outpost.console.auth import OPERATOR_POSTS
from tests.bridge.support import Watcher
from tests.outpost.console.support import HttpSession, chrome
from tests.outpost.support import Outpost, start_outpost
from tests.support.waiting import wait_for

PASSWORDS = {"admin": "admin-secret", "olga": "operator-secret", "vic": "viewer-secret"}
CONFIG = """gateway_id = "plant-7"

[console]
enabled = true
password_file = "users"
users = {{ admin = "admin", olga = "operator", vic = "viewer" }}

[bridge]
diagnostics_interval = 0

[[bridge.buses]]
name = "line"
type = "tcp"
host = "127.0.0.1"
port = {port}

[[bridge.devices]]
name = "plc"
bus = "line"
unit_id = 2
address_base = 0
poll_interval = 0.1
points = [
  {{ name = "temperature", address = 0, type = "int16", scale = 0.1, unit = "°C" }},
  {{ name = "setpoint", address = 10, type = "uint16", writable = true }},
]

[[alarms.rules]]
name = "too-hot"
point = "plc/temperature"
kind = "high"
limit = 30.0
deadband = 1.0
severity = "high"
"""


class AlarmSite:
    def __init__(self, workdir: Path) -> None:
        self.simulator = Simulator((2,), "tcp", size=20)
        port = self.simulator.start()
        self.temperature(21.5)
        workdir.mkdir(parents=True, exist_ok=True)
        for user, password in PASSWORDS.items():
            set_password(workdir / "users", user, password.encode(), iterations=1000)
        self.outpost: Outpost = start_outpost(workdir, CONFIG.format(port=port), "--state-dir",
                                              str(workdir / "state"))
        self.watcher = Watcher(self.outpost)
        self.watcher.subscribe("alarms/#", 1)

    def temperature(self, celsius: float) -> None:
        self.simulator.set_registers(2, "holding", 0, [round(celsius * 10) & 0xFFFF])

    def session(self, user: str) -> HttpSession:
        http = HttpSession(self.outpost.url("/"))
        assert http.login(user, PASSWORDS[user]) in (200, 303)
        return http

    def events(self) -> list[dict[str, Any]]:
        return [json.loads(p) for p in self.watcher.payloads("alarms/too-hot/event")]

    def state(self) -> Any:
        return self.watcher.latest("alarms/too-hot/state")

    def wait_state(self, state: str) -> None:
        wait_for(lambda: (self.state() or {}).get("state") == state, 15,
                 message=f"alarm state {state}: last {self.state()!r}")

    def stop(self) -> None:
        self.watcher.disconnect()
        self.outpost.stop()
        self.simulator.stop()


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AlarmSite]:
    site = AlarmSite(tmp_path_factory.mktemp("alarms"))
    yield site
    site.stop()


def post_routes() -> list[str]:
    """Every POST route the console's pages register, with its parameters filled in."""
    router = web.UrlDispatcher()
    for pages in (pages_forms, pages_devices, pages_admin, pages_broker, pages_history,
                  pages_alarms):
        pages.add_routes(router)
    fill = {"device": "plc", "index": "0", "name": "too-hot", "change": "nothing",
            "version": "1"}
    paths = []
    for route in router.routes():
        if route.method == "POST":
            canonical = route.resource.canonical if route.resource is not None else ""
            paths.append(re.sub(r"\{(\w+)\}", lambda m: fill.get(m.group(1), "x"), canonical))
    return sorted(set(paths))


def test_every_post_route_is_gated_by_role(site: AlarmSite) -> None:
    routes = post_routes()
    allowed = [p for p in routes if OPERATOR_POSTS.fullmatch(p)]
    assert allowed == ["/console/alarms/too-hot/ack", "/console/alarms/too-hot/shelve",
                       "/console/devices/plc/write"]
    assert "/console/alarms" in routes and "/console/changes/nothing/apply" in routes
    for user in ("olga", "vic"):
        http = site.session(user)
        token = http.csrf("/console/alarms")
        for path in routes:
            status, body = http.request(path, {"csrf": token, "minutes": "0", "point":
                                               "setpoint", "value": "7"})
            if user == "olga" and path in allowed:
                assert status == 200 and "refused" not in body, (user, path, status)
            else:
                assert status == 403 and "read-only" in body, (user, path, status, body[:200])


def test_an_operator_acknowledges_shelves_and_writes(site: AlarmSite) -> None:
    site.temperature(35.0)
    site.wait_state("active_unacked")
    olga = site.session("olga")
    _, page = olga.request("/console/alarms")
    assert 'class="count" id="alarm-count">1<' in page and "acknowledge" in page
    assert "add an alarm" not in page  # definitions are the admin's
    token = olga.csrf("/console/alarms")
    status, page = olga.request("/console/alarms/too-hot/ack", {"csrf": token})
    assert status == 200 and "alarm too-hot acknowledged" in page
    site.wait_state("active_acked")
    assert site.events()[-1]["user"] == "olga"
    olga.request("/console/alarms/too-hot/shelve", {"csrf": token, "minutes": "inf"})
    status, page = olga.request("/console/alarms/too-hot/shelve", {"csrf": token,
                                                                  "minutes": "15"})
    assert "shelved for 15 min" in page
    site.wait_state("shelved")
    olga.request("/console/alarms/too-hot/shelve", {"csrf": token, "minutes": "0"})
    site.wait_state("active_unacked")
    olga.request("/console/alarms/too-hot/ack", {"csrf": token})
    site.temperature(21.0)
    site.wait_state("normal")
    _, page = olga.request("/console/devices/plc")
    assert 'id="write-setpoint"' in page and "review change" not in page
    status, page = olga.request("/console/devices/plc/write", {"csrf": token,
                                                              "point": "setpoint", "value": "42"})
    assert "wrote plc/setpoint = 42" in page
    numbers = [e["transition"] for e in site.events()]
    assert numbers == list(range(1, len(numbers) + 1))
    vic = site.session("vic")
    _, page = vic.request("/console/alarms")
    assert '/ack"' not in page and '/shelve"' not in page and "too-hot" in page


def test_an_admin_defines_an_alarm_through_review_and_apply(site: AlarmSite) -> None:
    admin = site.session("admin")
    token = admin.csrf("/console/alarms")
    form = {"csrf": token, "name": "frozen", "point": "plc/temperature", "kind": "stale",
            "stale_after": "inf", "severity": "low"}
    status, page = admin.request("/console/alarms", form)
    assert status == 200 and "finite number" in page and 'data-error-for="stale_after"' in page
    status, page = admin.request("/console/alarms", {**form, "point": "plc/pressure",
                                                     "stale_after": "600"})
    assert "has no point &#x27;pressure&#x27;" in page and 'data-error-for="point"' in page
    status, page = admin.request("/console/alarms", {**form, "stale_after": "600"})
    change = re.search(r'action="/console/changes/([^/"]+)/apply"', page)
    assert change is not None and "+name = &quot;frozen&quot;" in page.replace('"', "&quot;")
    status, page = admin.request(f"/console/changes/{change.group(1)}/apply", {"csrf": token})
    assert status == 200
    wait_for(lambda: (site.watcher.latest("alarms/frozen/state") or {}).get("state") == "normal",
             15, message="the new alarm's state on MQTT")
    assert "kind = \"stale\"" in site.outpost.config_path.read_text()
    _, page = admin.request("/console/alarms")
    assert "frozen" in page and "too-hot" in page


def test_the_lifecycle_in_the_browser(site: AlarmSite, tmp_path: Path) -> None:
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By

    driver: Any = chrome()

    def look(action: Any) -> Any:
        """`action()`, or None while alarms.js redraws the page (a state changed)."""
        try:
            return action()
        except StaleElementReferenceException:
            return None

    def state_is(expected: str) -> Any:
        cells = driver.find_elements(By.CSS_SELECTOR, '[data-alarm="too-hot"]')
        return look(lambda: cells and expected == cells[0].text)

    def count_is(expected: str) -> Any:
        return look(lambda: driver.find_element(By.ID, "alarm-count").text == expected)

    def acknowledge() -> Any:
        buttons = driver.find_elements(By.CSS_SELECTOR, "button.ack")
        return look(lambda: buttons and (buttons[0].click() or True))

    try:
        log_in(driver, site.outpost.url("/console/"), "olga", PASSWORDS["olga"])
        driver.get(site.outpost.url("/console/alarms"))
        wait_for(lambda: state_is("normal"), 15, message="normal, on the page")
        before = len(site.events())
        site.temperature(40.0)  # over the limit: raised
        wait_for(lambda: state_is("active unacked"), 15, message="raised, on the page")
        wait_for(lambda: count_is("1"), 10, message="the count in the navigation")
        driver.save_screenshot(str(tmp_path / "console-alarms.png"))
        wait_for(acknowledge, 10, message="the acknowledge button")
        wait_for(lambda: state_is("active acked"), 15, message="acknowledged, on the page")
        site.temperature(20.0)  # back under the limit and its deadband: cleared
        wait_for(lambda: state_is("normal"), 15, message="cleared, on the page")
        wait_for(lambda: look(lambda: not driver.find_element(By.ID, "alarm-count")
                              .is_displayed()), 10, message="no count in the navigation")
        seen = [(e["from"], e["to"]) for e in site.events()[before:]]
        assert seen == [("normal", "active_unacked"), ("active_unacked", "active_acked"),
                        ("active_acked", "normal")]
    finally:
        driver.quit()
