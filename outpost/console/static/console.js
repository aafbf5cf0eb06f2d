// The console's only script (no framework, no build step): live values pushed by the gateway
// over Server-Sent Events, the overview's figures refreshed, and the diff coloured.
"use strict";

function liveValues() {
  const root = document.querySelector("[data-live-device]");
  if (!root || !window.EventSource) return;
  const device = root.dataset.liveDevice;
  const source = new EventSource("/console/live" + (device ? "?device=" + encodeURIComponent(device) : ""));
  source.onmessage = (event) => {
    const data = JSON.parse(event.data);
    document.dispatchEvent(new CustomEvent("outpost:live", {detail: data})); // charts.js
    if (data.status !== undefined) {
      for (const el of document.querySelectorAll(`[data-live-status="${CSS.escape(data.device)}"]`)) {
        el.textContent = data.status;
        el.className = "badge " + data.status;
      }
      return;
    }
    const key = data.device + "/" + data.point;
    for (const el of document.querySelectorAll(`[data-live="${CSS.escape(key)}"]`)) {
      let text = data.value === null || data.value === undefined ? "–" : String(data.value);
      if (data.unit && data.value !== null) text += " " + data.unit;
      el.textContent = text;
      el.className = "value" + (data.quality && data.quality !== "good" ? " q-" + data.quality : "");
      el.dataset.updates = String(Number(el.dataset.updates || "0") + 1);
    }
    document.body.dataset.live = "1";
  };
}

// A line of [[time, value], ...] across the svg (the status page draws the same).
function sparkline(svg, series) {
  const w = Number(svg.getAttribute("width")), h = Number(svg.getAttribute("height"));
  const data = series.filter((p) => Number.isFinite(p[1]));
  svg.dataset.samples = String(data.length);
  if (data.length < 2) return;
  const t0 = data[0][0], t1 = data[data.length - 1][0];
  let lo = Math.min(...data.map((p) => p[1])), hi = Math.max(...data.map((p) => p[1]));
  if (hi === lo) { hi += 1; lo -= 1; }
  const points = data.map((p) => ((t1 === t0 ? w : 2 + (p[0] - t0) / (t1 - t0) * (w - 4)).toFixed(1)
    + "," + (h - 2 - (p[1] - lo) / (hi - lo) * (h - 4)).toFixed(1))).join(" ");
  const line = document.createElementNS("http://www.w3.org/2000/svg", "polyline");
  line.setAttribute("points", points);
  line.setAttribute("fill", "none");
  line.setAttribute("stroke", "#2a6fdb");
  line.setAttribute("stroke-width", "1.6");
  svg.replaceChildren(line);
}

function overviewFigures() {
  if (!document.querySelector("[data-stat]")) return;
  let polls = 0;
  const refresh = async () => {
    try {
      // the history (the larger part) every 5th time: it grows one sample per interval
      const query = polls++ % 5 === 0 ? "?history=1" : "";
      const response = await fetch("/console/status.json" + query, {cache: "no-store"});
      if (response.ok) {
        const status = await response.json();
        for (const el of document.querySelectorAll("[data-stat]")) {
          let value = status;
          for (const part of el.dataset.stat.split(".")) value = value === undefined ? undefined : value[part];
          if (value !== undefined) el.textContent = typeof value === "number" && !Number.isInteger(value) ? value.toFixed(1) : String(value);
        }
        for (const svg of status.history ? document.querySelectorAll("svg[data-series]") : []) {
          sparkline(svg, status.history[svg.dataset.series] || []);
        }
      }
    } finally {
      setTimeout(refresh, 2000);
    }
  };
  refresh();
}

function colourDiff() {
  for (const pre of document.querySelectorAll("pre.diff")) {
    const lines = pre.textContent.split("\n");
    pre.replaceChildren(...lines.map((line) => {
      const span = document.createElement("span");
      span.className = line.startsWith("@@") ? "hunk" : line.startsWith("+") && !line.startsWith("+++") ? "add"
        : line.startsWith("-") && !line.startsWith("---") ? "del" : "";
      span.textContent = line + "\n";
      return span;
    }));
  }
}

document.addEventListener("DOMContentLoaded", () => { liveValues(); overviewFigures(); colourDiff(); });
