"""Point history in the console: the JSON the charts read, and the chart section of a device's
page.

How this works: `/console/history.json` answers with outpost/history_api.py's
`history_answer` (the same answer as the status listener's `/history.json`), read from the
daemon's history store on a worker thread so that a long range does not hold the event loop;
any logged-in user may read it (a GET: the viewer role too). The chart itself is drawn in the
browser by static/charts.js with uPlot (vendored in static/vendor/, never fetched from
elsewhere): the section rendered here only names the device, its points and the ranges, and
charts.js asks for the data. The device list and the overview get sparklines from the same
JSON (charts.js finds their live values).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Sequence
from typing import Any

from aiohttp import web

from outpost.console.html import attr, esc
from outpost.history_api import HistoryRequestError, history_answer
from storage.history.reader import HistoryReader

HISTORY = web.AppKey("history", HistoryReader)  # the history store's reader (unset: history off)
RANGES = (("-1h", "last hour"), ("-24h", "last day"), ("-7d", "last week"))


def add_routes(router: web.UrlDispatcher) -> None:
    router.add_get("/console/history.json", history_json)


def _params(request: web.Request) -> dict[str, str | list[str]]:
    """The query as `history_answer` takes it: `point` always a list, the others the last
    value given."""
    params: dict[str, str | list[str]] = {}
    for key in request.query:
        values = request.query.getall(key)
        params[key] = list(values) if key == "point" else values[-1]
    params.setdefault("point", [])
    return params


async def history_json(request: web.Request) -> web.StreamResponse:
    """The history of the points asked (`?point=dev/p&point=...&since=-1h&max_points=...`)."""
    reader = request.app.get(HISTORY)
    if reader is None:
        return web.Response(status=503, text="point history is off on this gateway "
                                              "([history] enabled = false)\n")
    params = _params(request)
    now_ms = int(time.time() * 1000)
    try:
        answer: dict[str, Any] = await asyncio.to_thread(history_answer, reader, params,
                                                         now_ms)
    except HistoryRequestError as exc:
        return web.Response(status=400, text=f"{exc}\n")
    return web.Response(text=json.dumps(answer, separators=(",", ":")),
                        content_type="application/json")


def chart_section(device: str, points: Sequence[str], chosen: Sequence[str] = ()) -> str:
    """The chart of a device's page: range buttons, a custom range, the points to draw
    (`chosen`, else the first), and the place static/charts.js draws into."""
    if not points:
        return ""
    picked = [p for p in chosen if p in points] or [points[0]]
    ranges = "".join(f'<button type="button" class="secondary"{attr("data-range", value)}'
                     f'{attr("id", "range" + value)}>{esc(label)}</button>'
                     for value, label in RANGES)
    boxes = "".join(
        f'<label class="chart-point"><input type="checkbox" name="chart-point"'
        f'{attr("value", f"{device}/{point}")}{" checked" if point in picked else ""}> '
        f"{esc(point)}</label>" for point in points)
    return (f'<h3>history</h3><section class="panel chart-panel" id="chart"'
            f'{attr("data-chart-device", device)}><div class="chart-controls">'
            f'<span class="chart-ranges">{ranges}</span>'
            f'<label>from <input type="datetime-local" id="chart-since" step="1"></label>'
            f'<label>to <input type="datetime-local" id="chart-until" step="1"></label>'
            f'<button type="button" class="secondary" id="range-custom">show</button></div>'
            f'<div class="chart-points">{boxes}</div>'
            f'<div id="chart-plot" class="chart-plot"></div>'
            f'<div class="chart-note" id="chart-note"></div></section>')
