"""How quickly the console draws a day of a 1 s point, and how much data that takes.

    .venv/bin/python -m bench.console_chart_bench [--runs 5] [--seconds 86400] [--shots docs]

Writes `--seconds` samples of one point, one a second up to now (the PLC's temperature of
bench/console_site.py's site: a day by default, 86,400 samples), into the history file of a
fresh state directory through the history store's own API (storage/history/store.py: the
frames a running gateway flushes, compacted into blocks and 1-minute and 15-minute
aggregates), starts the site on it (`outpost run` with the console, the simulator), and opens
the PLC's page in headless Chromium. Then `--runs` times: "last hour", then "last day" (the
figure), each timed in the page from the query sent to uPlot's first draw of its answer
(static/charts.js's `data-render-ms`: fetch, JSON parse, uPlot's build and draw; performance.now()
around them). The answer's size is the body of `/console/history.json` as the browser received
it (resource timing's decodedBodySize) and again over plain HTTP (the same query).

Goals (issue 43): the day draws in <= 1 s, its JSON is <= 200 KB. About 20 s.

`--shots DIR` photographs the chart (the day, its band) and the sparklines of the device list
and the overview afterwards: docs/console-chart*.png (docs/console.md shows them).
"""

from __future__ import annotations

import argparse
import math
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.console_site import Browser, Site, wait
from storage.history.config import HistoryConfig
from storage.history.store import HistoryStore

POINT = "plc/temperature"
GOAL_MS = 1000.0
GOAL_BYTES = 200_000
BATCH = 3600  # samples per flush written (the store's frames), an hour of the point
BODY_SIZE_JS = """
const entries = performance.getEntriesByType('resource')
  .filter((e) => e.name.includes('/console/history.json') && e.name.includes(arguments[0]));
return entries.length ? entries[entries.length - 1].decodedBodySize : null;
"""


def fill_history(state: Path, seconds: int, now_ms: int) -> None:
    """`seconds` samples of POINT, one a second, the last one a second before `now_ms` (and
    of the PLC's pressure, one a minute: the second line of the pictures)."""
    state.mkdir(parents=True, exist_ok=True)
    store = HistoryStore(state / "history.db", HistoryConfig())
    try:
        start = now_ms - seconds * 1000
        for first in range(0, seconds, BATCH):
            store.write((POINT, "°C", start + i * 1000,
                         round(21.5 + 3 * math.sin(i / 3600) + 0.3 * math.sin(i / 97), 2),
                         "good") for i in range(first, min(first + BATCH, seconds)))
        store.write(("plc/pressure", "bar", start + i * 1000,
                     round(3.1 + 0.2 * math.cos(i / 5000), 3), "good")
                    for i in range(0, seconds, 60))
        store.compact()
    finally:
        store.close()


def chart(browser: Browser) -> dict[str, Any]:
    return dict(browser.driver.execute_script(
        "return Object.assign({}, document.querySelector('#chart').dataset);"))


def timed_range(browser: Browser, button: str) -> dict[str, Any]:
    """Click a range button; the chart's state once it drew the new answer."""
    before = int(chart(browser).get("loads", "0"))
    browser.click(button)
    return wait(lambda: (s := chart(browser)) and int(s.get("loads", "0")) > before and s,
                30, f"{button}: the chart did not draw")


def photograph(browser: Browser, console: str, out: Path) -> None:
    """The day's chart on the PLC's page, and the sparklines of the device list and the
    overview."""
    out.mkdir(parents=True, exist_ok=True)

    def shot(name: str, height: int) -> None:
        browser.driver.set_window_size(1280, height)
        time.sleep(0.3)  # the page's layout after the resize (nothing is measured here)
        browser.driver.save_screenshot(str(out / name))
        print(f"wrote {out / name}")

    before = int(chart(browser)["loads"])
    browser.click('input[value="plc/pressure"]')  # a second point on the chart
    wait(lambda: int(chart(browser).get("loads", "0")) > before, 30, "the chart did not draw")
    browser.driver.execute_script("document.querySelector('#chart').scrollIntoView();")
    shot("console-chart.png", 1000)
    browser.driver.execute_script("window.scrollTo(0, 0);")
    for page, name, height in (("devices", "console-chart-devices.png", 420),
                               ("", "console-chart-overview.png", 700)):
        browser.open(console + page)
        wait(lambda: browser.driver.execute_script(
            "const r = document.querySelector('[data-live-device=\"\"]');"
            "return r && r.dataset.sparklines === 'drawn';"), 30, f"{page}: no sparklines")
        shot(name, height)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--seconds", type=int, default=86_400)
    parser.add_argument("--shots", type=Path, help="write docs/console-chart*.png here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="chart-bench") as work:
        workdir = Path(work)
        started = time.monotonic()
        fill_history(workdir / "state", args.seconds, int(time.time() * 1000))
        print(f"history: {args.seconds} samples of {POINT} written and compacted in "
              f"{time.monotonic() - started:.1f} s")
        site = Site(workdir).start()
        browser = Browser()
        try:
            browser.login(site.url)
            browser.open(site.url + "devices/plc")
            first = float(wait(lambda: chart(browser).get("loads") and chart(browser),
                               30, "the chart did not draw")["renderMs"])
            days: list[float] = []
            hours: list[float] = []
            state: dict[str, Any] = {}
            hour: list[Any] = []
            for _ in range(args.runs):
                hours.append(float(timed_range(browser, "#range-1h")["renderMs"]))
                hour = browser.driver.execute_script(
                    "const a = window.outpostChart.answer.series[0]; return [a.t.length, "
                    "a.step_ms];")
                state = timed_range(browser, "#range-24h")
                days.append(float(state["renderMs"]))
            size = browser.driver.execute_script(BODY_SIZE_JS, "since=-24h")
            answer = browser.driver.execute_script(
                "const a = window.outpostChart.answer.series[0];"
                "return [a.t.length, a.step_ms, a.min !== null];")
            if args.shots is not None:
                photograph(browser, site.url, args.shots)
        finally:
            browser.quit()
            site.stop()
    print(f"page opened: the last hour drawn {first:.0f} ms after its query (uPlot's script "
          f"loaded meanwhile)")
    print(f"last hour: fetch + draw median {statistics.median(hours):.0f} ms "
          f"(min {min(hours):.0f}, max {max(hours):.0f}, {len(hours)} runs); {hour[0]} buckets "
          f"of {hour[1] / 1000:.0f} s")
    print(f"last day:  fetch + draw median {statistics.median(days):.0f} ms "
          f"(min {min(days):.0f}, max {max(days):.0f}, {len(days)} runs); "
          f"{answer[0]} buckets of {answer[1] / 1000:.0f} s, min/max band: {answer[2]}")
    print(f"last day:  JSON {size} bytes ({state['query']})")
    print(f"goal draw <= {GOAL_MS:.0f} ms: {'PASS' if max(days) <= GOAL_MS else 'MISS'}; "
          f"goal JSON <= {GOAL_BYTES} bytes: {'PASS' if size <= GOAL_BYTES else 'MISS'}")


if __name__ == "__main__":
    main()
