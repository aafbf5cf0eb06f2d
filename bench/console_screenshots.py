"""Screenshots of the console's main pages for docs/ (docs/console.md shows them).

    .venv/bin/python -m bench.console_screenshots [--out docs]

Starts the demonstration site (bench/console_site.py), logs in as an admin in headless
Chromium, adds an SDM630 from its profile with a probe, applies it, and photographs the
overview, the devices list, the probe, the review of the change, the new device's live page
and the history. About 30 s.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from bench.console_site import Browser, Site, wait

SHOTS = ("console-overview.png", "console-devices.png", "console-probe.png",
         "console-review.png", "console-device.png", "console-history.png")


def take(out: Path) -> list[Path]:
    """Photograph the pages into `out`; returns the files written."""
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    with tempfile.TemporaryDirectory(prefix="console-shots") as work:
        site = Site(Path(work)).start()
        browser = Browser()
        try:
            console = site.url

            def shot(name: str, height: int = 860) -> None:
                browser.driver.set_window_size(1280, height)
                time.sleep(0.3)  # let the page settle after the resize (layout only)
                path = out / name
                browser.driver.save_screenshot(str(path))
                written.append(path)

            browser.login(console)
            browser.add_meter(console, "meter-1", 1)
            browser.click("#apply")
            browser.find("#notice")
            browser.open(console + "devices/new")
            browser.fill({"name": "meter-3", "map": "eastron-sdm630", "bus": "meters",
                          "unit_id": "3", "poll_interval": "1"})
            browser.click("#probe")
            browser.find("#probe-results")
            shot(SHOTS[2], 2250)
            browser.click("#review")
            browser.find("#diff")
            shot(SHOTS[3], 1000)
            browser.click("#apply")
            browser.find("#notice")
            for step in range(6):
                for unit in (1, 2, 3):
                    site.set_meter(unit, step)
                time.sleep(0.5)
            browser.open(console)
            wait(lambda: browser.driver.find_elements("css selector", "[data-stat]"), 10,
                 "overview")
            shot(SHOTS[0])
            browser.open(console + "devices")
            browser.find("#devices")
            shot(SHOTS[1], 600)
            browser.open(console + "devices/meter-1")
            browser.find('[data-live="meter-1/voltage_l1"]')
            time.sleep(1.5)  # a few live updates arrive
            shot(SHOTS[4], 1400)
            browser.open(console + "history")
            browser.find("#versions")
            shot(SHOTS[5], 700)
        finally:
            browser.quit()
            site.stop()
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("docs"))
    args = parser.parse_args()
    for path in take(args.out):
        print(f"wrote {path} ({path.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
