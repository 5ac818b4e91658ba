"use strict";
// The rate chart: entities per second over the scan's life (a solid line), rows read per
// second (dotted), the cap (dashed) and throttled requests (bars along the bottom), drawn as
// inline SVG. Each line has its own dash, so it reads without colour; the figures are also in
// a table beneath it and summed up in its caption.

const SVG_NS = "http://www.w3.org/2000/svg";

function svg(tag, attrs, text) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [name, value] of Object.entries(attrs || {})) node.setAttribute(name, value);
  if (text !== undefined) node.textContent = text;
  return node;
}

/** A round step for an axis reaching `top`: 1, 2 or 5 times a power of ten. */
function niceStep(top, ticks) {
  const raw = top / ticks;
  const power = Math.pow(10, Math.floor(Math.log10(raw || 1)));
  for (const m of [1, 2, 5, 10]) if (raw <= m * power) return m * power;
  return 10 * power;
}

/**
 * Draws `samples` ({at: seconds since the start, seconds: the interval's width, entities,
 * read: per second, throttled: requests in the interval}) into `holder`, with `cap`
 * (entities per second, or null).
 */
function drawChart(holder, samples, cap, capLabel) {
  const width = 720, height = 260, left = 64, right = 12, top = 14, bottom = 52;
  const plotW = width - left - right, plotH = height - top - bottom;
  const end = samples.length ? Math.max(...samples.map((s) => s.at + s.seconds)) : 1;
  const highest = Math.max(1, cap || 0, ...samples.map((s) => Math.max(s.entities, s.read)));
  const step = niceStep(highest * 1.1, 4);
  const yTop = Math.ceil(highest * 1.1 / step) * step;
  const x = (t) => left + (t / Math.max(end, 1)) * plotW;
  const y = (v) => top + plotH - (v / yTop) * plotH;
  const chart = svg("svg", { viewBox: `0 0 ${width} ${height}`, role: "img",
    "aria-labelledby": "chart-title chart-summary", focusable: "false" });
  for (let v = 0; v <= yTop + 1e-9; v += step) {
    chart.append(svg("line", { class: "grid", x1: left, x2: width - right, y1: y(v), y2: y(v) }));
    chart.append(svg("text", { x: left - 6, y: y(v) + 4, "text-anchor": "end" }, thousands(v)));
  }
  const timeStep = niceTimeStep(end);
  for (let t = 0; t <= end + 1e-9; t += timeStep) {
    chart.append(svg("text", { x: x(t), y: top + plotH + 16, "text-anchor": "middle" }, duration(t)));
  }
  chart.append(svg("line", { class: "axis", x1: left, x2: left, y1: top, y2: top + plotH }));
  chart.append(svg("line", { class: "axis", x1: left, x2: width - right, y1: top + plotH, y2: top + plotH }));
  const maxThrottled = Math.max(0, ...samples.map((s) => s.throttled));
  if (maxThrottled > 0) {
    for (const s of samples) {
      if (!s.throttled) continue;
      const h = Math.max(2, (s.throttled / maxThrottled) * plotH * 0.25);
      chart.append(svg("rect", { class: "throttled", x: x(s.at), y: top + plotH - h,
        width: Math.max(1.5, x(s.at + s.seconds) - x(s.at) - 1), height: h }));
    }
  }
  if (cap) chart.append(svg("line", { class: "cap", x1: left, x2: width - right, y1: y(cap), y2: y(cap) }));
  const line = (key, cls) => {
    if (!samples.length) return;
    const d = samples.map((s, i) => `${i ? "L" : "M"}${x(s.at + s.seconds / 2).toFixed(1)},${y(s[key]).toFixed(1)}`).join(" ");
    chart.append(svg("path", { class: cls, d }));
  };
  line("read", "read");
  line("entities", "rate");
  legend(chart, left, height - 14, cap, capLabel, maxThrottled > 0);
  holder.replaceChildren(chart);
}

function niceTimeStep(end) {
  for (const s of [5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 14400]) {
    if (end / s <= 6) return s;
  }
  return 28800;
}

function legend(chart, x, y, cap, capLabel, throttled) {
  const items = [["rate", "entities/s"], ["read", "rows read/s"]];
  if (cap) items.push(["cap", capLabel || "cap"]);
  let at = x;
  for (const [cls, label] of items) {
    chart.append(svg("line", { class: cls, x1: at, x2: at + 28, y1: y - 4, y2: y - 4 }));
    chart.append(svg("text", { x: at + 34, y }, label));
    at += 44 + label.length * 6.5;
  }
  if (throttled) {
    chart.append(svg("rect", { class: "throttled", x: at, y: y - 10, width: 10, height: 10 }));
    chart.append(svg("text", { x: at + 16, y }, "throttled requests"));
  }
}

/** The chart's figures as rows of the table under it. */
function chartTable(tbody, samples) {
  tbody.replaceChildren(...samples.map((s) => el("tr", {},
    el("td", {}, duration(s.at)),
    el("td", { class: "number" }, thousands(s.entities)),
    el("td", { class: "number" }, thousands(s.read)),
    el("td", { class: "number" }, thousands(s.throttled)))));
}

/**
 * The samples of a status's `history` (bounded, from the scan's start; see docs/ui.md),
 * merged into intervals of at least `minSeconds` so that steps finishing in bursts read as a
 * rate.
 */
function historySamples(history, minSeconds, elapsed) {
  if (!history || !history.bucketSeconds || !Array.isArray(history.rowsRead)) return [];
  const width = history.bucketSeconds;
  const group = Math.max(1, Math.ceil(minSeconds / width));
  const offset = history.offsetSeconds || 0;
  const out = [];
  for (let i = 0; i < history.rowsRead.length; i += group) {
    let read = 0, entities = 0, throttled = 0, n = 0;
    for (let j = i; j < Math.min(i + group, history.rowsRead.length); j++, n++) {
      read += history.rowsRead[j] || 0;
      entities += (history.entities || [])[j] || 0;
      throttled += (history.requestsThrottled || [])[j] || 0;
    }
    // Intervals lie on a grid of their own: the first may begin before the scan did, and
    // the one in progress counts only the time it has run.
    const start = offset + i * width;
    const at = Math.max(0, start);
    let seconds = n * width - (at - start);
    if (elapsed !== undefined && elapsed > at && elapsed - at < seconds) seconds = elapsed - at;
    if (seconds <= 0) continue;
    out.push({ at, seconds, read: read / seconds, entities: entities / seconds, throttled });
  }
  // The interval in progress, while shorter than the others, joins the one before it: the
  // steps that finished in its first second would read as a spike.
  const last = out[out.length - 1], before = out[out.length - 2];
  if (before && last.seconds < minSeconds) {
    const seconds = before.seconds + last.seconds;
    out.splice(out.length - 2, 2, {
      at: before.at, seconds, throttled: before.throttled + last.throttled,
      read: (before.read * before.seconds + last.read * last.seconds) / seconds,
      entities: (before.entities * before.seconds + last.entities * last.seconds) / seconds,
    });
  }
  return out;
}
