"""Uplink bytes per point-minute: one-minute aggregates against raw values, both batched.

Run: `.venv/bin/python -m bench.uplink.aggregate_bytes [--minutes 3] [--meters 3]`

How this works: the site of bench/uplink/wire_bytes.py (a pymodbus simulator holding
`--meters` Eastron SDM630 meters whose float32 values change like a loaded supply, read
through the shipped profile and polled every second: 1 s points) is read by two `outpost run`
processes, both forwarding `devices/#` to one mosquitto in batches (`batch = {}`, MQTT 5),
each through its own counting TCP proxy (bench/uplink/tcp_count.py):

- `raw`: the points as shipped (reported on change: every poll, since the values move);
- `agg-1m`: every point with `aggregate = "1m"`, `aggregate_send = "instead"`: one message
  per point and minute (time-weighted mean, min, max, first, last, count, coverage).

A subscriber on mosquitto unpacks what arrives with the cloud's own code
(`cloud_spark.records.bronze_records`) and keeps every row's id. The measured window starts
20 s into a UTC minute and lasts whole minutes, so it holds as many minute boundaries as it
lasts minutes whatever the phase: bytes per point-minute = the bytes the proxy forwarded in
both directions (PUBLISH, PUBACK, PINGREQ: TCP payload) / (points x minutes). The ids are
kept: every row arrives with (gateway, epoch, seq), and the benchmark counts the holes in
each gateway's seq (0 expected). Goal: raw / agg-1m ≥ 10 (exit status 1 when missed).
"""

from __future__ import annotations

import argparse
import logging
import sys
import time

from bench.uplink.tcp_count import HOST
from bench.uplink.wire_bytes import RowIds, Site

GOAL = 10.0
VARIANTS = ("raw", "agg-1m")


def gateway_config(name: str, sim_port: int, cloud_port: int, meters: int,
                   points: list[str]) -> str:
    """An `outpost run` configuration: the site's meters, batched uplink on MQTT 5."""
    lines = [f'gateway_id = "{name}"', "[bridge]",
             "[[bridge.buses]]", 'name = "sim"', 'type = "tcp"', f'host = "{HOST}"',
             f"port = {sim_port}"]
    for unit in range(1, meters + 1):
        lines += ["[[bridge.devices]]", f'name = "meter-{unit}"', 'bus = "sim"',
                  f"unit_id = {unit}", "address_base = 1", 'map = "profile:eastron-sdm630"',
                  "poll_interval = 1.0"]
        if name == "agg-1m":  # every profile point overridden: aggregates instead of raw
            overrides = ", ".join(f'{{ name = "{p}", aggregate = "1m", '
                                  f'aggregate_send = "instead" }}' for p in points)
            lines.append(f"points = [{overrides}]")
    lines += ["[uplink]", "enabled = true", "[[uplink.remotes]]",
              f'addresses = ["{HOST}:{cloud_port}"]', "protocol = 5",
              f'client_id = "uplink-{name}"', 'status_topic = ""', 'diagnostics_topic = ""',
              "[[uplink.forward]]", 'filter = "devices/#"',
              f'topic = {{ strip = "devices/", prefix = "site/{name}/" }}', "batch = {}"]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=int, default=3, help="measured window, minutes")
    parser.add_argument("--meters", type=int, default=3, help="SDM630 meters on the site")
    args = parser.parse_args(argv)
    logging.getLogger("pymodbus").setLevel(logging.CRITICAL)
    ids: RowIds | None = None
    with Site(args.meters, "outpost-aggregate-bytes-") as site:
        names = [name for name, _address, _unit in site.meters[0].points]
        point_count = len(names) * args.meters
        try:
            ids = RowIds(site.cloud_port)
            for name in VARIANTS:
                site.gateway(name, gateway_config(name, site.sim_port, site.proxy(name),
                                                  args.meters, names))
            deadline = time.monotonic() + 150  # the aggregates' first rows: the next minute
            while len(ids.rows()) < len(VARIANTS):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"no rows from some gateways: {ids.rows()}; "
                                       f"logs in {site.work}")
                time.sleep(0.5)
            time.sleep((20 - time.time() % 60) % 60)  # 20 s into a minute
            rows0, bytes0 = ids.rows(), site.bytes()
            time.sleep(args.minutes * 60)
            rows1, bytes1 = ids.rows(), site.bytes()
            time.sleep(3)  # the rows on their way at the end, for the seq count
            holes = {name: ids.holes(name) for name in VARIANTS}
            without_id = ids.without_id
        finally:
            if ids is not None:
                ids.stop()
    print(f"site: {args.meters} x SDM630 ({point_count} points polled every 1 s), "
          f"{args.minutes} min window starting 20 s into a minute; batched, MQTT 5")
    print(f"{'gateway':<8} {'rows':>7} {'bytes up':>10} {'bytes down':>10} "
          f"{'B/point-min':>11} {'seq holes':>9}")
    per_point_minute: dict[str, float] = {}
    for name in VARIANTS:
        rows = rows1.get(name, 0) - rows0.get(name, 0)
        up = bytes1[name][0] - bytes0[name][0]
        down = bytes1[name][1] - bytes0[name][1]
        if rows <= 0:
            raise RuntimeError(f"{name}: no row arrived in the window")
        per_point_minute[name] = (up + down) / (point_count * args.minutes)
        print(f"{name:<8} {rows:>7} {up:>10} {down:>10} {per_point_minute[name]:>11.1f} "
              f"{holes[name]:>9}")
    ratio = per_point_minute["raw"] / per_point_minute["agg-1m"]
    verdict = "PASS" if ratio >= GOAL and not without_id else "MISS"
    print(f"raw / agg-1m: {ratio:.1f}x ({verdict}; goal >= {GOAL:.0f}x); rows without an id: "
          f"{without_id}")
    return 0 if verdict == "PASS" else 1


if __name__ == "__main__":
    sys.exit(main())
