"""The console's history charts in a real browser (Debian's chromium through chromedriver and
selenium), against a real `outpost run` polling a pymodbus simulator, and the vendored uPlot.

The simulator's PLC produces known temperatures; what reached MQTT (a paho subscriber) is what
the gateway published, and so what its history keeps: the chart's data, read back from the
page's uPlot instance (`window.outpostChart`), must hold exactly those values at those times,
as the history JSON does. The range buttons change the query, a range the gateway downsamples
shows the min/max band, a value published while the page is open is appended (the live tail),
two points share one chart, and the overview and device list draw sparklines from the same
JSON. One gateway and one browser for the module; the steps run in order in one test."""

from __future__ import annotations

import json
import math
import time
import tomllib
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bench.bridge.simulator import Simulator
from bench.console_site import log_in
from gateway.broker.net.security_files import set_password
from storage.history.config import HistoryConfig
from storage.history.store import HistoryStore
from tests.bridge.support import Watcher
from tests.outpost.console.support import PASSWORDS, HttpSession, chrome
from tests.outpost.support import Outpost, start_outpost
from tests.support.waiting import wait_for

ROOT = Path(__file__).resolve().parents[3]
VENDOR = ROOT / "outpost" / "console" / "vendor"
STATIC_VENDOR = ROOT / "outpost" / "console" / "static" / "vendor"
# the committed copy -> its file in the pinned npm package (`make console-vendor`)
VENDORED = {"uPlot.iife.min.js": "dist/uPlot.iife.min.js", "uPlot.min.css": "dist/uPlot.min.css",
            "uPlot.LICENSE": "LICENSE"}
TEMPERATURES = (21.5, 23.0, 24.5, 26.0)  # °C, each past the point's 0.5 deadband
LIVE_TEMPERATURE = 27.5
PRESSURE = 3.12
PRESSURE_DAY = 8640  # samples of the pressure's day before the gateway starts: one per 10 s

CONFIG = """gateway_id = "plant-9"

[status]
bind = "127.0.0.1:0"

[console]
enabled = true
password_file = "users"
users = {{ admin = "admin", viewer = "viewer" }}

[history]
flush_interval = 1.0

[bridge]

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
poll_interval = 0.2
points = [
  {{ name = "temperature", address = 0, type = "int16", scale = 0.1, unit = "°C", deadband = 0.5 }},
  {{ name = "pressure", address = 1, type = "uint16", scale = 0.01, unit = "bar" }},
]
"""


def test_vendored_uplot_is_the_pinned_package() -> None:
    """The committed copies are the pinned npm package's files, byte for byte, and the
    package data carries them (a gateway installs them with outpost, never from npm)."""
    package = VENDOR / "node_modules" / "uplot"
    if not package.is_dir():
        pytest.skip("outpost/console/vendor has no node_modules: run make node-packages")
    pinned = json.loads((VENDOR / "package.json").read_text())["dependencies"]["uplot"]
    installed = json.loads((package / "package.json").read_text())["version"]
    assert installed == pinned, f"node_modules has uplot {installed}, package.json pins {pinned}"
    for copy, original in VENDORED.items():
        assert (STATIC_VENDOR / copy).read_bytes() == (package / original).read_bytes(), (
            f"{copy} differs from uplot {pinned}'s {original}: run make console-vendor")
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    patterns = data["tool"]["setuptools"]["package-data"]["outpost"]
    assert "console/static/vendor/*" in patterns, patterns


# -- the site ------------------------------------------------------------------------------


def fill_pressure(state: Path, now_ms: int) -> None:
    """A day of the PLC's pressure, one value per 10 s up to a minute ago, written through the
    history store's API before the gateway starts: a range the gateway downsamples."""
    state.mkdir(parents=True, exist_ok=True)
    store = HistoryStore(state / "history.db", HistoryConfig())
    try:
        start = now_ms - 60_000 - PRESSURE_DAY * 10_000
        store.write(("plc/pressure", "bar", start + i * 10_000,
                     round(3 + 0.5 * math.sin(i / 100), 3), "good") for i in range(PRESSURE_DAY))
        store.compact()
    finally:
        store.close()


@pytest.fixture(scope="module")
def simulator() -> Iterator[Simulator]:
    simulator = Simulator((2,), "tcp", size=64)
    simulator.start()
    simulator.set_registers(2, "holding", 0, [round(TEMPERATURES[0] * 10), round(PRESSURE * 100)])
    yield simulator
    simulator.stop()


@pytest.fixture(scope="module")
def gateway(simulator: Simulator, tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[Outpost]:
    workdir = tmp_path_factory.mktemp("charts")
    fill_pressure(workdir / "state", int(time.time() * 1000))
    for user, password in PASSWORDS.items():
        set_password(workdir / "users", user, password.encode(), iterations=1000)
    outpost = start_outpost(workdir, CONFIG.format(port=simulator.port), "--state-dir",
                            str(workdir / "state"))
    yield outpost
    outpost.stop()


@pytest.fixture(scope="module")
def mqtt(gateway: Outpost) -> Iterator[Watcher]:
    with Watcher(gateway) as watcher:
        yield watcher
        watcher.disconnect()


def history(session: HttpSession, *points: str, **params: str) -> dict[str, Any]:
    query = urllib.parse.urlencode([*(("point", p) for p in points), *params.items()])
    status, body = session.request(f"/console/history.json?{query}")
    assert status == 200, body
    return dict(json.loads(body))


def published(mqtt: Watcher, topic: str) -> list[tuple[int, float]]:
    """(ts, value) of every value the gateway published on `topic`."""
    return [(p["ts"], p["value"]) for p in map(json.loads, mqtt.payloads(topic))]


def test_history_json_needs_a_login_and_names_bad_input(gateway: Outpost) -> None:
    anonymous = HttpSession(gateway.url("/"))
    status, _ = anonymous.request("/console/history.json?point=plc/temperature",
                                  headers={"Accept": "application/json"})
    assert status == 401
    viewer = HttpSession(gateway.url("/"))
    assert viewer.login("viewer", PASSWORDS["viewer"]) in (200, 303)
    answer = history(viewer, "plc/temperature", since="-1h")
    assert [s["point"] for s in answer["series"]] == ["plc/temperature"]
    status, body = viewer.request("/console/history.json?point=plc/temperature&since=yesterday")
    assert status == 400 and "since" in body, body


# -- the browser ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def browser(gateway: Outpost) -> Iterator[Any]:
    driver: Any = chrome()
    driver.implicitly_wait(0)
    yield driver
    driver.quit()


def chart_state(driver: Any) -> dict[str, Any]:
    """The chart section's data-* attributes."""
    return dict(driver.execute_script(
        "const s = document.querySelector('#chart'); return s ? Object.assign({}, s.dataset) "
        ": {};"))


def charted(driver: Any, point: str) -> list[tuple[int, float]]:
    """(t, value) of `point` as the page's uPlot instance holds them (nulls and alignment
    gaps left out)."""
    pairs = driver.execute_script(
        "const c = window.outpostChart; if (!c) return null;"
        "const column = c.columns[arguments[0]]; if (column === undefined) return null;"
        "const d = c.uplot.data; const out = [];"
        "for (let i = 0; i < d[0].length; i++) {"
        "  const v = d[column][i]; if (v !== null && v !== undefined) out.push([d[0][i], v]); }"
        "return out;", point)
    return [] if pairs is None else [(int(t), float(v)) for t, v in pairs]


def pairs(times: list[int], values: list[Any], until_ms: int) -> list[tuple[int, float]]:
    return [(int(t), float(v)) for t, v in zip(times, values, strict=True)
            if v is not None and t <= until_ms]


def chart_matches_its_answer(driver: Any, session: HttpSession) -> dict[str, Any]:
    """The chart's data are its last answer's series (each point's values; the band's edges
    its min and max), and that answer is what the history holds: the same range asked again
    over HTTP has the same buckets (but for its last seconds, which may have gained values
    since). Returns the answer."""
    answer, data, columns, bands, query = driver.execute_script(
        "const c = window.outpostChart; return [c.answer, c.uplot.data, c.columns, c.bands, "
        "document.querySelector('#chart').dataset.query];")
    until = int(answer["until_ms"])
    for series in answer["series"]:
        point = series["point"]
        assert pairs(data[0], data[columns[point]], until) == pairs(
            series["t"], series["value"], until), f"{point}: the chart is not its answer"
        if point in bands:
            high, low = bands[point]
            assert pairs(data[0], data[high], until) == pairs(series["t"], series["max"], until)
            assert pairs(data[0], data[low], until) == pairs(series["t"], series["min"], until)
        else:
            assert not (series["step_ms"] and series["min"]), f"{point}: no band drawn"
    max_points = dict(urllib.parse.parse_qsl(query.split("?", 1)[1]))["max_points"]
    again = history(session, *(s["point"] for s in answer["series"]),
                    since=str(answer["since_ms"]), until=str(until), max_points=max_points)
    settled = until - 10_000
    for drawn, stored in zip(answer["series"], again["series"], strict=True):
        assert drawn["step_ms"] == stored["step_ms"], (drawn, stored)
        for key in ("value", "min", "max"):
            if drawn[key] is not None:
                assert pairs(drawn["t"], drawn[key], settled) == pairs(
                    stored["t"], stored[key], settled), f"{drawn['point']} {key} differ"
    return dict(answer)


def loads_after(driver: Any, before: int) -> dict[str, Any]:
    try:
        return wait_for(lambda: (s := chart_state(driver)) and int(s.get("loads", "0")) > before
                        and s, 15)
    except AssertionError:
        note = driver.execute_script("return document.querySelector('#chart-note').textContent")
        raise AssertionError(f"the chart did not load again: {chart_state(driver)}, {note!r}; "
                             f"the browser's log: {driver.get_log('browser')}") from None


def test_the_chart_draws_what_the_gateway_published(
        gateway: Outpost, simulator: Simulator, mqtt: Watcher, browser: Any) -> None:
    from selenium.webdriver.common.by import By

    session = HttpSession(gateway.url("/"))
    assert session.login("admin", PASSWORDS["admin"]) in (200, 303)
    topic = "devices/plc/temperature"
    for value in TEMPERATURES:  # the simulator's values, one after the other
        simulator.set_registers(2, "holding", 0, [round(value * 10)])
        mqtt.wait(topic, lambda p, v=value: p["value"] == v)
    produced = published(mqtt, topic)
    assert [v for _, v in produced][-len(TEMPERATURES):] == list(TEMPERATURES)
    # the history has them once flushed (the configured 1 s)
    def stored() -> set[tuple[int, float]]:
        series = history(session, "plc/temperature", since="-1h")["series"][0]
        return {*pairs(series["t"], series["value"], series["t"][-1] if series["t"] else 0)}

    wait_for(lambda: {*produced} <= stored(), 15,
             message="the history never held every published value")

    # the device page's chart: the last hour, raw, exactly the published values
    log_in(browser, gateway.url("/console/"), "admin", PASSWORDS["admin"])
    browser.get(gateway.url("/console/devices/plc"))
    state = loads_after(browser, 0)
    assert "since=-1h" in state["query"] and state["points"] == "plc/temperature", state
    drawn = charted(browser, "plc/temperature")
    assert {*produced} <= {*drawn}, f"published {produced}, drawn {drawn}"
    assert chart_matches_its_answer(browser, session)["series"][0]["step_ms"] == 0

    # the live tail: a value published while the page is open is appended
    appended = int(state.get("appended", "0"))
    simulator.set_registers(2, "holding", 0, [round(LIVE_TEMPERATURE * 10)])
    mqtt.wait(topic, lambda p: p["value"] == LIVE_TEMPERATURE)
    wait_for(lambda: int(chart_state(browser).get("appended", "0")) > appended
             and charted(browser, "plc/temperature")[-1][1] == LIVE_TEMPERATURE, 15,
             message=f"the live value never reached the chart: {chart_state(browser)}")

    # two points on one chart, each its own values (the last hour: both raw)
    before = int(chart_state(browser)["loads"])
    browser.find_element(By.CSS_SELECTOR, 'input[value="plc/pressure"]').click()
    state = loads_after(browser, before)
    assert state["points"] == "plc/temperature plc/pressure", state
    drawn_answer = chart_matches_its_answer(browser, session)
    assert [s["step_ms"] for s in drawn_answer["series"]] == [0, 0], drawn_answer
    assert len(charted(browser, "plc/pressure")) > 300  # its hour of 1 per 10 s
    assert {*produced} <= {*charted(browser, "plc/temperature")}

    # the range buttons ask for their range; the pressure's day and week are downsampled
    # (more samples than the chart's width in pixels): its min/max band is drawn
    for button, since, bands in (("#range-24h", "-24h", "1"), ("#range-7d", "-7d", "1"),
                                 ("#range-1h", "-1h", "0")):
        before = int(chart_state(browser)["loads"])
        browser.find_element(By.CSS_SELECTOR, button).click()
        state = loads_after(browser, before)
        assert f"since={since}" in state["query"] and state["bands"] == bands, state
        drawn_answer = chart_matches_its_answer(browser, session)
        pressure = drawn_answer["series"][1]
        assert (pressure["step_ms"] > 0) == (bands == "1"), pressure["step_ms"]

    # a custom range: the two times picked (local time in the browser) are what is asked
    before = int(chart_state(browser)["loads"])
    since_ms, until_ms = browser.execute_script(
        "const local = (ms) => { const d = new Date(ms - new Date(ms).getTimezoneOffset() * 6e4);"
        "  return d.toISOString().slice(0, 19); };"
        "const now = Math.floor(Date.now() / 1000) * 1000;"
        "document.querySelector('#chart-since').value = local(now - 7200e3);"
        "document.querySelector('#chart-until').value = local(now - 1800e3);"
        "return [now - 7200e3, now - 1800e3];")
    browser.find_element(By.CSS_SELECTOR, "#range-custom").click()
    state = loads_after(browser, before)
    assert f"since={since_ms}&until={until_ms}" in state["query"], state
    drawn_answer = chart_matches_its_answer(browser, session)
    assert drawn_answer["since_ms"] == since_ms and drawn_answer["until_ms"] == until_ms

    # sparklines beside the live values of the device list and the overview: the last hour
    for page in ("/console/devices", "/console/"):
        browser.get(gateway.url(page))
        wait_for(lambda: browser.execute_script(
            "const r = document.querySelector('[data-live-device=\"\"]');"
            "return r && r.dataset.sparklines === 'drawn';"), 15,
            message=f"{page}: no sparklines drawn")
        lines = browser.execute_script(
            "const out = {}; for (const s of document.querySelectorAll('svg[data-spark]')) {"
            "  const line = s.querySelector('polyline');"
            "  out[s.dataset.spark] = [Number(s.dataset.samples),"
            "    line ? line.getAttribute('points').split(' ').length : 0]; } return out;")
        temperature = history(session, "plc/temperature", since="-1h", max_points="60")
        kept = [v for v in temperature["series"][0]["value"] if v is not None]
        assert lines["plc/temperature"] == [len(kept), len(kept)], (page, lines, temperature)
        samples, drawn_points = lines["plc/pressure"]
        assert samples == drawn_points and samples >= 50, (page, lines)  # an hour, by minute
