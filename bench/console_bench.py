"""What the console costs and how quickly it works, on the site of bench/console_site.py.

    .venv/bin/python -m bench.console_bench [--settle 5] [--devices 3]

1. Resident memory of the daemon (VmRSS): without the console, with the console idle, with
   one browser on a device's live page, and after every page was visited once. Each figure is
   the median of 5 readings a second apart after `--settle` seconds.
2. From "apply" to the new device's first value on MQTT: the review page of an SDM630 added
   from its profile is open, the clock starts at the click on "apply" and stops when a paho
   subscriber (subscribed before) receives the device's first point value; once per device.
3. The weight of each page: bytes transferred for the page and what it loads (the
   stylesheet and the script), with an empty browser cache, from the browser's resource
   timing (transferSize: headers and body as they crossed the wire).

About a minute. The figures go to stdout as a small report.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
from functools import partial
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion

from bench.console_site import Browser, Site, wait
from bench.procstat import rss_kib

PAGES = ("login", "", "devices", "devices/new", "devices/meter-1", "devices/plc", "uplink",
         "broker", "history")
WEIGHT_JS = """
const entries = performance.getEntriesByType('navigation')
  .concat(performance.getEntriesByType('resource'));
return [entries[0].transferSize, entries.reduce((sum, e) => sum + e.transferSize, 0),
        entries.length];
"""


def rss_median(pid: int, settle: float) -> float:
    time.sleep(settle)
    readings = []
    for _ in range(5):
        readings.append(rss_kib(pid))
        time.sleep(1.0)
    return statistics.median(readings) / 1024


class FirstValues:
    """A paho subscriber noting when each topic's first message arrived."""

    def __init__(self, host: str, port: int) -> None:
        self.first: dict[str, float] = {}
        self.lock = threading.Lock()
        self.client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id="console-bench")
        self.client.on_message = self._message
        self.client.connect(host, port)
        self.client.subscribe("devices/#", 0)
        self.client.loop_start()

    def _message(self, client: Any, userdata: Any, message: Any) -> None:
        with self.lock:
            self.first.setdefault(message.topic, time.monotonic())

    def first_value(self, device: str) -> float | None:
        with self.lock:
            times = [t for topic, t in self.first.items()
                     if topic.startswith(f"devices/{device}/")
                     and topic.rsplit("/", 1)[1] not in ("status", "diagnostics")]
        return min(times) if times else None

    def close(self) -> None:
        self.client.loop_stop()
        self.client.disconnect()


def memory(settle: float) -> dict[str, float]:
    figures: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="console-bench") as work:
        site = Site(Path(work), console=False).start()
        try:
            assert site.process is not None
            figures["without the console"] = rss_median(site.process.pid, settle)
        finally:
            site.stop()
        site = Site(Path(work), console=True).start()
        browser = None
        try:
            assert site.process is not None
            pid = site.process.pid
            figures["console idle"] = rss_median(pid, settle)
            browser = Browser()
            browser.login(site.url)
            browser.open(site.url + "devices/plc")
            browser.find('[data-live="plc/temperature"]')
            figures["one browser on a live page"] = rss_median(pid, settle)
            for page in PAGES:
                browser.open(site.url + page)
            browser.open(site.url + "devices/plc")
            figures["after every page once"] = rss_median(pid, settle)
        finally:
            if browser is not None:
                browser.quit()
            site.stop()
    return figures


def apply_to_mqtt(devices: int) -> tuple[list[float], dict[str, tuple[int, int, int]]]:
    """Seconds from "apply" to the first value, per device; and the page weights."""
    seconds: list[float] = []
    weights: dict[str, tuple[int, int, int]] = {}
    with tempfile.TemporaryDirectory(prefix="console-bench") as work:
        site = Site(Path(work)).start()
        browser = Browser()
        watcher = FirstValues(*site.mqtt)
        try:
            browser.login(site.url)
            for unit in range(1, devices + 1):
                name = f"meter-{unit}"
                browser.add_meter(site.url, name, unit, probe=False)
                start = time.monotonic()
                browser.click("#apply")
                arrived = wait(partial(watcher.first_value, name), 30, f"no value of {name}")
                seconds.append(arrived - start)
                browser.find("#notice")
            for page in PAGES:
                if page == "login":
                    browser.driver.delete_all_cookies()
                browser.driver.execute_cdp_cmd("Network.clearBrowserCache", {})
                browser.open(site.url + page)
                browser.find("main")
                time.sleep(0.3)  # the script and stylesheet have loaded
                html, total, requests = browser.driver.execute_script(WEIGHT_JS)
                weights[page or "overview"] = (int(html), int(total), int(requests))
                if page == "login":
                    browser.login(site.url)
        finally:
            watcher.close()
            browser.quit()
            site.stop()
    return seconds, weights


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--settle", type=float, default=5.0)
    parser.add_argument("--devices", type=int, default=3)
    args = parser.parse_args()
    figures = memory(args.settle)
    base = figures["without the console"]
    print("resident memory of the daemon (VmRSS, median of 5 readings)")
    for label, mib in figures.items():
        added = "" if label == "without the console" else f"  (+{mib - base:.1f} MiB)"
        print(f"  {label:<28} {mib:7.1f} MiB{added}")
    seconds, weights = apply_to_mqtt(args.devices)
    print('from "apply" to the new device\'s first value on MQTT')
    for index, value in enumerate(seconds, start=1):
        print(f"  meter-{index}: {value * 1000:6.0f} ms")
    print(f"  median {statistics.median(seconds) * 1000:.0f} ms")
    print("page weight (empty cache; bytes transferred, headers included)")
    print(f"  {'page':<26} {'HTML':>8} {'with assets':>12} {'requests':>9}")
    for page, (html, total, requests) in weights.items():
        print(f"  {'/console/' + page:<26} {html:>8} {total:>12} {requests:>9}")


if __name__ == "__main__":
    main()
