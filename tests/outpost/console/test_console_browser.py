"""The web console in a real browser (Debian's chromium through chromedriver and selenium),
against a real `outpost run` polling a pymodbus simulator, with a paho subscriber watching what
reaches MQTT. One gateway and one browser: one test walks through the steps in order, each
building on what the previous one left (a technician's session, step by step: one test, so that
no test runner can hand the steps to different workers), and the refusals are checked with
plain HTTP requests."""

from __future__ import annotations

import tomllib
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from tests.bridge.bacnet.support import NodeDevice
from tests.bridge.enip.support import LogixSimulator
from tests.bridge.s7.support import S7Server
from tests.bridge.support import SocatPair, Watcher
from tests.bridge.test_serial_e2e import PtyEnd
from tests.outpost.console.support import (
    PASSWORDS,
    HttpSession,
    Site,
    chrome,
    f32,
    start_site,
)
from tests.support.waiting import wait_for

COMMENT = "# The site's gateway: this comment must survive every change made from the console."


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    site = start_site(tmp_path_factory.mktemp("console"))
    yield site
    site.outpost.stop()
    site.simulator.stop()


@pytest.fixture(scope="module")
def browser(site: Site) -> Iterator[Any]:
    driver: Any = chrome()
    driver.implicitly_wait(0)
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def mqtt(site: Site) -> Iterator[Watcher]:
    with Watcher(site.outpost) as watcher:
        yield watcher
        watcher.disconnect()


def by_css(driver: Any, selector: str, timeout: float = 15.0) -> Any:
    from selenium.webdriver.common.by import By

    return wait_for(lambda: (driver.find_elements(By.CSS_SELECTOR, selector) or [None])[0],
                    timeout, message=f"no {selector} on {driver.current_url}")


def text_of(driver: Any, selector: str, expected: str, timeout: float = 15.0,
            message: str = "") -> str:
    """Wait until the element's text contains `expected` (fail with `message`, if given)."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By

    def found() -> str | None:
        try:
            for element in driver.find_elements(By.CSS_SELECTOR, selector):
                text = str(element.text)
                if expected.lower() in text.lower():
                    return text
        except StaleElementReferenceException:  # the page was replaced meanwhile: look again
            pass
        return None

    return wait_for(found, timeout, message=message or f"{selector} never showed {expected!r}")


def fill(driver: Any, values: dict[str, str]) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    for name, value in values.items():
        element = driver.find_element(By.NAME, name)
        if element.tag_name == "select":
            Select(element).select_by_value(value)
        elif element.get_attribute("type") == "checkbox":
            if element.is_selected() != bool(value):
                element.click()
        else:
            element.clear()
            element.send_keys(value)


def click(driver: Any, selector: str) -> None:
    by_css(driver, selector).click()


def review_and_apply(driver: Any, diff_has: str) -> None:
    text_of(driver, "#diff", diff_has)
    click(driver, "#apply")
    text_of(driver, "#notice", "applied")


def step_log_in(site: Site, browser: Any) -> None:
    browser.get(site.console + "devices")
    assert "/console/login" in browser.current_url  # nothing before a login
    fill(browser, {"username": "admin", "password": "wrong"})
    click(browser, "#login")
    text_of(browser, ".field-error", "wrong user or password")
    fill(browser, {"username": "admin", "password": PASSWORDS["admin"]})
    click(browser, "#login")
    text_of(browser, "#devices", "plc")  # back where it was going
    text_of(browser, "header", "admin")


def step_the_overview_is_live(site: Site, browser: Any) -> None:
    browser.get(site.console)
    text_of(browser, "main", "plc")
    # the sparklines are drawn from the board's history, refreshed by the page itself
    wait_for(lambda: int(by_css(browser, 'svg[data-series="messages/received_per_s"]')
                         .get_attribute("data-samples") or 0) >= 3, 20,
             message="no history drawn")


def step_add_an_sdm630_from_its_profile_probe_and_apply(site: Site, browser: Any,
                                                        mqtt: Watcher) -> None:
    browser.get(site.console + "devices/new")
    fill(browser, {"name": "meter-1", "map": "eastron-sdm630", "bus": "line", "unit_id": "1",
                   "poll_interval": "0.5"})
    click(browser, "#probe")
    text_of(browser, '#probe-results [data-point="voltage_l1"]', "230.1 V")
    text_of(browser, '#probe-results [data-point="power"]', "2845.5 W")
    assert "meter-1" not in site.config_path.read_text()  # a probe changes nothing
    click(browser, "#review")
    text_of(browser, "#diff", 'map = "profile:eastron-sdm630"')
    click(browser, "#apply")
    text_of(browser, "#notice", "applied: add device meter-1")
    # Its points arrive on MQTT, decoded from the profile.
    got = mqtt.wait("devices/meter-1/voltage_l1", timeout=20)
    assert got["value"] == pytest.approx(230.1) and got["unit"] == "V"
    assert mqtt.wait("devices/meter-1/frequency")["value"] == pytest.approx(49.98)
    text = site.config_path.read_text()
    assert text.startswith(COMMENT) and "# The PLC: a setpoint" in text
    assert "console: admin change: add device meter-1" in site.outpost.log()


def step_add_a_serial_line_device(site: Site, browser: Any, mqtt: Watcher) -> None:
    pair = SocatPair(site.workdir, "sensor").start()
    try:
        browser.get(site.console + "devices")
        click(browser, "#add-serial")
        fill(browser, {"name": "sensor", "device": str(pair.a), "baudrate": "9600",
                       "pattern": "T=(?P<temp>-?[0-9.]+)", "points.0.name": "temperature",
                       "points.0.field": "temp", "points.0.unit": "C"})
        click(browser, "#review-serial")
        review_and_apply(browser, 'field = "temp"')
        device = PtyEnd(pair.b)
        # the bridge opens the port once the reload has started it; resend until it has
        got = wait_for(lambda: device.send(b"T=21.5\r\n") or mqtt.latest(
            "devices/sensor/temperature"), 20, message="no temperature")
        assert got["value"] == 21.5
        text_of(browser, "#devices", "sensor")
        click(browser, 'form[action="/console/serial/sensor/remove"] button')
        review_and_apply(browser, '-name = "sensor"')
        assert "sensor" not in site.config_path.read_text()
    finally:
        pair.stop()


@contextmanager
def stage(what: str) -> Iterator[None]:
    """A failure inside says what was being done (the browser's own exceptions too)."""
    try:
        yield
    except Exception as exc:  # an assertion, a timeout, an input selenium could not fill
        raise AssertionError(f"{what}: {type(exc).__name__}: {exc}") from exc


def add_from_its_family_form(site: Site, browser: Any, mqtt: Watcher, kind: str,
                             form: dict[str, str], point: str, value: float,
                             shown: str) -> None:
    """A family's device added from the form the console renders from its configuration
    model (`#add-<kind>`): probed (the point's answer shows `shown`), reviewed, applied; the
    point's `value` arrives on MQTT and is shown live on the device's page. A failure names
    the family, the device and the stage."""
    name = form["name"]
    with stage(f"{kind} device {name}: its form"):
        browser.get(site.console + "devices")
        click(browser, f"#add-{kind}")
        fill(browser, form)
    with stage(f"{kind} device {name}: the probe"):
        click(browser, "#probe")
        # the point's answer, or what the page says instead (a failed probe, a refused value)
        answer = text_of(browser, f'#probe-results [data-point="{point}"], #probe-error, '
                         f"#errors, .field-error", "", timeout=40,
                         message=f"no answer of the probe for {point} on the page")
        assert shown in answer, f"{point} answered {answer!r}, not {shown!r}"
        assert f'name = "{name}"' not in site.config_path.read_text()  # a probe writes nothing
    with stage(f"{kind} device {name}: review and apply"):
        click(browser, f"#review-{kind}")
        review_and_apply(browser, f"[[bridge.{kind}]]")
    with stage(f"{kind} device {name}: its value on MQTT"):
        got = mqtt.wait(f"devices/{name}/{point}", timeout=20)
        assert got["value"] == value and got["quality"] == "good", got
    with stage(f"{kind} device {name}: its value live on its page"):
        browser.get(site.console + f"devices/{name}")
        text_of(browser, f'[data-live="{name}/{point}"]', f"{value:g}")


def step_add_an_s7_plc_from_its_family_form(site: Site, browser: Any, mqtt: Watcher) -> None:
    """A family that had no page of its own: its form comes from its configuration model."""
    plc = S7Server().start()
    try:
        add_from_its_family_form(site, browser, mqtt, "s7", {
            "name": "cabinet", "host": "127.0.0.1", "port": str(plc.port),
            "poll_interval": "0.5", "points.0.name": "temperature",
            "points.0.address": "DB1.DBD14", "points.0.type": "REAL", "points.0.unit": "C"},
            "temperature", 21.5, "21.5 C")
    finally:
        plc.kill()


def step_add_a_bacnet_device_from_its_family_form(site: Site, browser: Any,
                                                  mqtt: Watcher) -> None:
    """Device 2001 of the @bacnet-js/client devices, behind the router they also are
    (network 5, MAC 01): its analog input 1 (21.5, in degrees Celsius by the device's own
    units), subscribed to by COV."""
    devices = NodeDevice().start()
    try:
        add_from_its_family_form(site, browser, mqtt, "bacnet", {
            "name": "ahu", "address": devices.address, "device_id": "2001", "network": "5",
            "mac": "01", "poll_interval": "0.5", "points.0.name": "supply_air",
            "points.0.object": "AI:1"},
            "supply_air", 21.5, "21.5 °C")
    finally:
        devices.kill()


def step_add_a_logix_controller_from_its_family_form(site: Site, browser: Any,
                                                     mqtt: Watcher) -> None:
    """cpppo's Logix simulator, a UDT member's tag by its Studio 5000 name (the simulator
    starts every tag at zero)."""
    controller = LogixSimulator().start()
    try:
        add_from_its_family_form(site, browser, mqtt, "enip", {
            "name": "packer", "host": "127.0.0.1", "port": str(controller.port),
            "path": "1,0", "poll_interval": "0.5", "points.0.name": "speed",
            "points.0.tag": "Motor.Speed", "points.0.type": "REAL", "points.0.unit": "rpm"},
            "speed", 0.0, "0.0 rpm")
    finally:
        controller.kill()


def step_live_values_are_pushed_to_the_device_page(site: Site, browser: Any) -> None:
    browser.get(site.console + "devices/meter-1")
    text_of(browser, '[data-live="meter-1/voltage_l1"]', "230.1")
    site.simulator.set_registers(1, "input", 0, f32(233.7))
    # The page is not reloaded: the new value arrives over its event stream.
    text_of(browser, '[data-live="meter-1/voltage_l1"]', "233.7", timeout=20)
    text_of(browser, '[data-live-status="meter-1"]', "online")


def step_a_wrong_value_shows_at_its_field_and_changes_nothing(site: Site, browser: Any) -> None:
    before = site.config_path.read_text()
    browser.get(site.console + "devices/plc")
    fill(browser, {"deadband.temperature": "-1"})
    click(browser, "#save")
    error = text_of(browser, '[data-error-for="deadband.temperature"]', "greater than")
    assert error
    assert site.config_path.read_text() == before


def step_wrong_values_of_a_new_device_and_a_user_show_at_their_fields(site: Site,
                                                                       browser: Any) -> None:
    """An infinite interval, a point's zero scale (a problem of the whole point, shown in its
    row) and a user name the password file cannot hold: each under its own input."""
    before = site.config_path.read_text()
    users = (site.workdir / "users").read_bytes()
    browser.get(site.console + "devices/new")
    fill(browser, {"name": "meter-2", "bus": "line", "unit_id": "3", "address_base": "0",
                   "poll_interval": "1e309", "points.1.name": "energy",
                   "points.1.address": "4", "points.1.scale": "0"})
    click(browser, "#review")
    text_of(browser, '[data-error-for="poll_interval"]', "finite")
    text_of(browser, '[data-error-for="points.1.scale"]', "scale must not be 0")
    browser.get(site.console + "broker")
    fill(browser, {"file": "0", "username": "#hidden", "password": "pw"})
    click(browser, "#save-user")
    text_of(browser, '[data-error-for="username"]', "must not start with '#'")
    assert site.config_path.read_text() == before
    assert (site.workdir / "users").read_bytes() == users


def step_change_a_deadband(site: Site, browser: Any) -> None:
    browser.get(site.console + "devices/plc")
    fill(browser, {"deadband.temperature": "2.5"})
    click(browser, "#save")
    review_and_apply(browser, "deadband = 2.5")
    assert "deadband = 2.5" in site.config_path.read_text()
    wait_for(lambda: "reload: done" in site.outpost.log(), 10, message="no reload")


def step_write_a_writable_point(site: Site, browser: Any) -> None:
    browser.get(site.console + "devices/plc")
    by_css(browser, '[name="value"][form="write-setpoint"]').send_keys("42")
    click(browser, "#write-setpoint-button")
    text_of(browser, "#notice", "wrote plc/setpoint = 42")
    assert site.simulator.registers(2, "holding")[10] == 42
    assert "console: admin write: plc/setpoint = 42" in site.outpost.log()


def step_add_a_forward_rule(site: Site, browser: Any) -> None:
    browser.get(site.console + "uplink")
    fill(browser, {"filter": "devices/meter-1/#", "qos": "1"})
    click(browser, "#add-forward")
    review_and_apply(browser, 'filter = "devices/meter-1/#"')
    by_css(browser, 'input[name="rules.1.filter"][value="devices/meter-1/#"]')
    fill(browser, {"rules.1.qos": "0"})  # edit it in place
    click(browser, 'button[form="rule-1"]')
    review_and_apply(browser, "qos = 0")
    rules = tomllib.loads(site.config_path.read_text())["uplink"]["forward"]
    assert rules[1] == {"filter": "devices/meter-1/#", "remote": "cloud", "qos": 0}


def step_add_a_user(site: Site, browser: Any) -> None:
    browser.get(site.console + "broker")
    fill(browser, {"file": "0", "username": "tech", "password": "tech-secret",
                   "role": "viewer"})
    click(browser, "#save-user")
    review_and_apply(browser, 'tech = "viewer"')
    text_of(browser, "#users", "tech")
    assert HttpSession(site.outpost.url("/")).login("tech", "tech-secret") == 200


def step_refusals_without_session_csrf_or_role(site: Site) -> None:
    before = site.config_path.read_text()
    form = {"filter": "devices/#", "remote": "cloud", "qos": "1"}
    anonymous = HttpSession(site.outpost.url("/"))
    assert anonymous.request("/console/uplink", headers={"Accept": "application/json"}
                             )[0] == 401
    assert anonymous.request("/console/uplink/forward", form)[0] == 401
    admin = HttpSession(site.outpost.url("/"))
    assert admin.login("admin", PASSWORDS["admin"]) == 200
    status, body = admin.request("/console/uplink/forward", form)
    assert status == 403 and "CSRF" in body
    status, _ = admin.request("/console/uplink/forward", {**form, "csrf": "forged"})
    assert status == 403
    viewer = HttpSession(site.outpost.url("/"))
    assert viewer.login("viewer", PASSWORDS["viewer"]) == 200
    status, page = viewer.request("/console/uplink")
    assert status == 200 and "add-forward" not in page  # a viewer sees no forms
    status, body = viewer.request("/console/uplink/forward",
                                  {**form, "csrf": viewer.csrf()})
    assert status == 403 and "read-only" in body
    assert site.config_path.read_text() == before
    # The static assets and the login page are all there is before a login.
    assert anonymous.request("/console/static/console.css")[0] == 200


def step_a_hand_edit_made_meanwhile_is_not_overwritten(site: Site, browser: Any) -> None:
    browser.get(site.console + "devices/plc")
    fill(browser, {"poll_interval": "0.4"})
    click(browser, "#save")
    text_of(browser, "#diff", "poll_interval = 0.4")
    edited = site.config_path.read_text().replace(
        COMMENT, COMMENT + "\n# edited by hand while the change was being reviewed")
    site.config_path.write_text(edited)
    click(browser, "#apply")
    text_of(browser, "#error", "changed since this change was prepared")
    assert site.config_path.read_text() == edited
    assert "poll_interval = 0.4" not in edited


def step_history_lists_the_versions_and_rolls_back(site: Site, browser: Any,
                                                   mqtt: Watcher) -> None:
    browser.get(site.console + "history")
    text = text_of(browser, "#versions", "console:admin")
    assert "add device meter-1" in text and "add forward rule" in text
    click(browser, 'form[action="/console/history/1/rollback"] button')  # the first file
    review_and_apply(browser, '-name = "meter-1"')
    assert "meter-1" not in site.config_path.read_text()
    assert mqtt.wait("devices/meter-1/status", lambda s: s == "offline") == "offline"


@pytest.mark.timeout(600)  # seventeen steps, each waiting for what the browser shows
def test_a_technician_sets_the_site_up_in_the_browser(site: Site, browser: Any,
                                                       mqtt: Watcher) -> None:
    step_log_in(site, browser)
    step_the_overview_is_live(site, browser)
    step_add_an_sdm630_from_its_profile_probe_and_apply(site, browser, mqtt)
    step_add_a_serial_line_device(site, browser, mqtt)
    step_add_an_s7_plc_from_its_family_form(site, browser, mqtt)
    step_add_a_bacnet_device_from_its_family_form(site, browser, mqtt)
    step_add_a_logix_controller_from_its_family_form(site, browser, mqtt)
    step_live_values_are_pushed_to_the_device_page(site, browser)
    step_a_wrong_value_shows_at_its_field_and_changes_nothing(site, browser)
    step_wrong_values_of_a_new_device_and_a_user_show_at_their_fields(site, browser)
    step_change_a_deadband(site, browser)
    step_write_a_writable_point(site, browser)
    step_add_a_forward_rule(site, browser)
    step_add_a_user(site, browser)
    step_refusals_without_session_csrf_or_role(site)
    step_a_hand_edit_made_meanwhile_is_not_overwritten(site, browser)
    step_history_lists_the_versions_and_rolls_back(site, browser, mqtt)
