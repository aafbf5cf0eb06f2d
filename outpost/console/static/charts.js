// The console's charts: a device page's point history chart (uPlot, vendored in
// /console/static/vendor/ and loaded only on a page that has a chart: nothing comes from
// elsewhere), and sparklines beside the live values of the overview and the device list.
//
// How this works: both read /console/history.json (outpost/console/pages_history.py), which
// answers per point `t` (ms), `value`, and `min`/`max` when the gateway downsampled the range
// (`step_ms` > 0: each value is a bucket's mean). The chart draws each point as a line, and its
// min/max as a band when there is one; several points share the chart (one y scale per unit).
// New values come from the page's live stream (console.js re-emits each as an `outpost:live`
// event): while a relative range ("last hour") is shown they are appended and the window
// slides, so an open page keeps its chart current without asking the gateway again.
// For tests and measurements the chart publishes its state: `window.outpostChart` (the uPlot
// instance and the last answer) and data-* attributes of the section (query, loads, bands,
// appended, render time).
"use strict";

const HISTORY_URL = "/console/history.json";
const VENDOR = "/console/static/vendor/";
const COLOURS = ["#2a6fdb", "#d9480f", "#2b8a3e", "#862e9c", "#e67700", "#0b7285"];
const SPAN_MS = {"-1h": 3600e3, "-24h": 86400e3, "-7d": 7 * 86400e3};
const SPARK_POINTS = 60; // buckets per sparkline: an hour at one per minute
const SPARK_MAX_SERIES = 48; // the sparklines of one page in one request

let uPlotLoading = null;

// uPlot's script and stylesheet, added to the page once (the CSP allows our own origin only).
function loadUPlot() {
  if (window.uPlot) return Promise.resolve(window.uPlot);
  if (!uPlotLoading) {
    uPlotLoading = new Promise((resolve, reject) => {
      const css = document.createElement("link");
      css.rel = "stylesheet";
      css.href = VENDOR + "uPlot.min.css";
      document.head.append(css);
      const script = document.createElement("script");
      script.src = VENDOR + "uPlot.iife.min.js";
      script.onload = () => resolve(window.uPlot);
      script.onerror = () => reject(new Error("the chart library did not load"));
      document.head.append(script);
    });
  }
  return uPlotLoading;
}

function historyQuery(points, since, until, maxPoints) {
  const query = new URLSearchParams();
  for (const point of points) query.append("point", point);
  query.set("since", String(since));
  if (until !== null && until !== undefined) query.set("until", String(until));
  query.set("max_points", String(maxPoints));
  return HISTORY_URL + "?" + query.toString();
}

function colour(index, alpha) {
  const hex = COLOURS[index % COLOURS.length];
  if (alpha === undefined) return hex;
  const n = parseInt(hex.slice(1), 16);
  return `rgba(${n >> 16}, ${(n >> 8) & 255}, ${n & 255}, ${alpha})`;
}

function duration(ms) {
  if (ms < 60e3) return `${Math.round(ms / 100) / 10} s`;
  if (ms < 3600e3) return `${Math.round(ms / 6e3) / 10} min`;
  return `${Math.round(ms / 360e3) / 10} h`;
}

function numeric(value) {
  return typeof value === "number" && Number.isFinite(value) ? value : null;
}

class PointChart {
  constructor(section) {
    this.section = section;
    this.plot = section.querySelector("#chart-plot");
    this.note = section.querySelector("#chart-note");
    this.range = "-1h"; // a key of SPAN_MS, or "custom"
    this.custom = null; // [since_ms, until_ms] of a custom range
    this.uplot = null;
    this.data = null; // uPlot's aligned data: [t, columns...]
    this.columns = new Map(); // "device/point" -> column of its value in `data`
    this.bandColumns = new Map();
    this.xMin = 0;
    this.xMax = 0;
    this.zoomed = false;
    this.loads = 0;
    this.appended = 0;
    this.pending = false;
    this.started = null;
  }

  start() {
    for (const button of this.section.querySelectorAll("[data-range]")) {
      button.addEventListener("click", () => { this.range = button.dataset.range; this.load(); });
    }
    this.section.querySelector("#range-custom").addEventListener("click", () => this.customRange());
    for (const box of this.section.querySelectorAll('input[name="chart-point"]')) {
      box.addEventListener("change", () => this.load());
    }
    document.addEventListener("outpost:live", (event) => this.onLive(event.detail));
    window.addEventListener("resize", () => {
      if (this.uplot) this.uplot.setSize({width: this.width(), height: this.uplot.height});
    });
    this.load();
  }

  points() {
    return Array.from(this.section.querySelectorAll('input[name="chart-point"]:checked'),
                      (box) => box.value);
  }

  width() {
    return Math.max(320, this.plot.clientWidth || 800);
  }

  customRange() {
    const since = Date.parse(this.section.querySelector("#chart-since").value);
    const until = Date.parse(this.section.querySelector("#chart-until").value);
    if (!Number.isFinite(since) || !Number.isFinite(until) || since >= until) {
      this.say("a custom range needs a start before its end");
      return;
    }
    this.range = "custom";
    this.custom = [since, until];
    this.load();
  }

  say(text) {
    this.note.textContent = text;
  }

  async load() {
    const points = this.points();
    for (const button of this.section.querySelectorAll("[data-range]")) {
      button.classList.toggle("active", button.dataset.range === this.range);
    }
    if (!points.length) {
      this.say("pick a point to chart");
      return;
    }
    const started = performance.now();
    // about one bucket per pixel: the gateway downsamples the rest
    const maxPoints = Math.min(1500, Math.round(this.width()));
    const url = this.range === "custom"
      ? historyQuery(points, this.custom[0], this.custom[1], maxPoints)
      : historyQuery(points, this.range, null, maxPoints);
    this.section.dataset.query = url;
    let answer;
    try {
      const response = await fetch(url, {cache: "no-store"});
      if (!response.ok) {
        this.say(`no history: ${(await response.text()).trim()}`);
        return;
      }
      answer = await response.json();
      await loadUPlot();
    } catch (error) {
      this.say(`no history: ${error.message}`);
      return;
    }
    if (this.section.dataset.query !== url) return; // a later query was asked meanwhile
    this.started = started; // uPlot's first draw of this answer notes the time (`drawn`)
    this.draw(answer);
  }

  // The answer is on the canvas: counted, and how long since its query was sent.
  drawn(uplot) {
    if (this.started === null) return;
    window.outpostChart = {uplot, answer: this.answer, columns: Object.fromEntries(this.columns),
                           bands: Object.fromEntries(this.bandColumns)};
    this.section.dataset.renderMs = (performance.now() - this.started).toFixed(1);
    this.started = null;
    this.loads += 1;
    this.section.dataset.loads = String(this.loads);
  }

  draw(answer) {
    const uPlot = window.uPlot;
    const tables = [];
    const series = [{}];
    const bands = [];
    // the x range is the one asked (not the data's), but for a user's zoom (drag on the plot)
    const scales = {x: {time: true, range: () => [this.xMin, this.xMax]}};
    const units = [];
    const notes = [];
    this.columns = new Map();
    this.bandColumns = new Map(); // "device/point" -> [column of its max, of its min]
    let column = 1;
    answer.series.forEach((one, index) => {
      if (one.error) notes.push(`${one.point}: ${one.error}`);
      const unit = one.unit || "";
      if (!units.includes(unit)) units.push(unit);
      const scale = "y" + units.indexOf(unit);
      scales[scale] = {auto: true};
      const label = one.point + (unit ? ` (${unit})` : "");
      const table = [one.t.slice(), one.value.map(numeric)]; // (the live tail appends)
      series.push({label, scale, stroke: colour(index), width: 1.6, spanGaps: false});
      this.columns.set(one.point, column);
      column += 1;
      if (one.step_ms > 0 && one.min && one.max) {
        table.push(one.max.map(numeric), one.min.map(numeric));
        series.push({label: `${one.point} max`, scale, stroke: colour(index, 0.35), width: 0.5},
                    {label: `${one.point} min`, scale, stroke: colour(index, 0.35), width: 0.5});
        bands.push({series: [column, column + 1], fill: colour(index, 0.15)});
        this.bandColumns.set(one.point, [column, column + 1]);
        column += 2;
      }
      tables.push(table);
    });
    this.data = tables.length === 1 ? tables[0] : uPlot.join(tables);
    const axes = [{}];
    units.slice(0, 2).forEach((unit, index) => {
      axes.push({scale: "y" + index, label: unit || undefined, side: index === 0 ? 3 : 1,
                 grid: {show: index === 0}});
    });
    this.xMin = answer.since_ms;
    this.xMax = answer.until_ms;
    this.zoomed = false;
    const options = {
      width: this.width(), height: 300, ms: 1, series, bands, scales, axes,
      cursor: {drag: {x: true, y: false}},
      hooks: {setSelect: [(u) => { if (u.select.width > 0) this.zoomed = true; }],
              draw: [(u) => this.drawn(u)]},
    };
    this.answer = answer;
    this.section.dataset.bands = String(bands.length);
    this.section.dataset.points = answer.series.map((one) => one.point).join(" ");
    const steps = answer.series.map((one) => one.step_ms).filter((step) => step > 0);
    notes.unshift(steps.length ? `downsampled: one value per ${duration(Math.max(...steps))} `
                  + "(the line is each bucket's mean, the band its min and max)" : "raw values");
    this.say(notes.join(" · "));
    if (this.uplot) this.uplot.destroy();
    this.uplot = new uPlot(options, this.data, this.plot);
  }

  // A live value of a charted point: appended while a relative range is shown.
  onLive(event) {
    if (!this.uplot || this.range === "custom" || event.point === undefined) return;
    const column = this.columns.get(event.device + "/" + event.point);
    const value = numeric(event.value);
    if (column === undefined || value === null) return;
    const t = numeric(event.ts) ?? Date.now();
    const data = this.data;
    if (t <= data[0][data[0].length - 1]) return; // already in the answer
    data[0].push(t);
    for (let i = 1; i < data.length; i++) data[i].push(i === column ? value : undefined);
    const since = t - SPAN_MS[this.range];
    let old = 0;
    while (old < data[0].length && data[0][old] < since) old += 1;
    if (old) for (const values of data) values.splice(0, old);
    this.xMax = Math.max(this.xMax, t);
    this.xMin = this.xMax - SPAN_MS[this.range];
    this.appended += 1;
    this.section.dataset.appended = String(this.appended);
    if (!this.pending) { // one redraw per frame, however many values arrive
      this.pending = true;
      requestAnimationFrame(() => {
        this.pending = false;
        this.uplot.setData(this.data, !this.zoomed); // (rescaled: the window slides)
      });
    }
  }
}

// -- sparklines --------------------------------------------------------------------------------

function drawSpark(svg, times, values) {
  const w = Number(svg.getAttribute("width")), h = Number(svg.getAttribute("height"));
  const kept = [];
  for (let i = 0; i < times.length; i++) if (values[i] !== null) kept.push([times[i], values[i]]);
  svg.dataset.samples = String(kept.length);
  if (kept.length < 2) { svg.replaceChildren(); return; }
  const t0 = kept[0][0], t1 = kept[kept.length - 1][0];
  let lo = Infinity, hi = -Infinity;
  for (const [, v] of kept) { lo = Math.min(lo, v); hi = Math.max(hi, v); }
  if (hi === lo) { hi += 1; lo -= 1; }
  const points = kept.map(([t, v]) => (1 + (t - t0) / (t1 - t0 || 1) * (w - 2)).toFixed(1)
    + "," + (h - 1 - (v - lo) / (hi - lo) * (h - 2)).toFixed(1)).join(" ");
  const line = document.createElementNS("http://www.w3.org/2000/svg", "polyline");
  line.setAttribute("points", points);
  svg.replaceChildren(line);
}

async function sparklines() {
  const root = document.querySelector('[data-live-device=""]'); // the overview, the device list
  if (!root) return;
  const lines = new Map(); // "device/point" -> {svgs, t, value}
  for (const span of root.querySelectorAll("span.value[data-live]")) {
    const key = span.dataset.live;
    if (!lines.has(key) && lines.size >= SPARK_MAX_SERIES) continue;
    const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
    svg.setAttribute("class", "spark-point");
    svg.setAttribute("width", "64");
    svg.setAttribute("height", "16");
    svg.dataset.spark = key;
    span.after(svg);
    if (!lines.has(key)) lines.set(key, {svgs: [], t: [], value: []});
    lines.get(key).svgs.push(svg);
  }
  if (!lines.size) return;
  let answer;
  try {
    const response = await fetch(historyQuery(lines.keys(), "-1h", null, SPARK_POINTS),
                                 {cache: "no-store"});
    if (!response.ok) { root.dataset.sparklines = "off"; return; }
    answer = await response.json();
  } catch (error) {
    root.dataset.sparklines = "off";
    return;
  }
  for (const one of answer.series) {
    const line = lines.get(one.point);
    if (!line) continue;
    line.t = one.t.slice();
    line.value = one.value.map(numeric);
    for (const svg of line.svgs) drawSpark(svg, line.t, line.value);
  }
  root.dataset.sparklines = "drawn";
  document.addEventListener("outpost:live", (event) => {
    const data = event.detail;
    const line = lines.get(data.device + "/" + data.point);
    const value = numeric(data.value);
    if (!line || value === null) return;
    const t = numeric(data.ts) ?? Date.now();
    if (line.t.length && t <= line.t[line.t.length - 1]) return;
    line.t.push(t);
    line.value.push(value);
    while (line.t.length && line.t[0] < t - SPAN_MS["-1h"]) { line.t.shift(); line.value.shift(); }
    for (const svg of line.svgs) drawSpark(svg, line.t, line.value);
  });
}

document.addEventListener("DOMContentLoaded", () => {
  const section = document.querySelector("[data-chart-device]");
  if (section) new PointChart(section).start();
  sparklines();
});
