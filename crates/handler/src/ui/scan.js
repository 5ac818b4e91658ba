"use strict";
// A scan's page: `GET /api/scans/{id}` every 2 seconds while it is in flight and the tab is
// shown (the `tablescan` command's watch reads once a second), every 10 when the tab is
// hidden, and not again once it has finished. Cancel, retry and remove ask first.

const SCAN_REFRESH_MS = 2000;
const SCAN_HIDDEN_MS = 10000;
/** The chart's intervals are at least this long, and as long as the scan's longest step up
 * to CHART_MAX_INTERVAL: a step's rows count when it finishes, all at once, so intervals
 * shorter than a step would show the bursts rather than the rate. */
const CHART_MIN_SECONDS = 5;
const CHART_MAX_INTERVAL = 15;

function chartInterval(progress) {
  return Math.min(CHART_MAX_INTERVAL, Math.max(CHART_MIN_SECONDS, Math.ceil(progress.longestStepSeconds || 0)));
}

const scanView = { id: null, timer: null, status: null, total: undefined, local: [] };

async function showScan(id) {
  if (scanView.id !== id) {
    Object.assign(scanView, { id, status: null, total: undefined, local: [] });
    document.getElementById("scan-title").textContent = "Scan " + id;
  }
  clearTimeout(scanView.timer);
  const error = document.getElementById("scan-error");
  let status;
  try {
    status = (await api("GET", "/scans/" + encodeURIComponent(id))).body;
    error.hidden = true;
  } catch (e) {
    error.textContent = e.status === 404 ? "No scan has this id (it may have been removed)." : e.message;
    error.hidden = false;
    if (e.status !== 404) scheduleScan(SCAN_REFRESH_MS * 3);
    return;
  }
  if (scanView.id !== id) return;
  scanView.status = status;
  if (scanView.total === undefined) scanView.total = await earlierTotal(status.spec, true);
  renderScan(status);
  // A paused scan may stay paused for hours: read it less often until it moves again.
  if (!FINISHED.includes(status.state)) scheduleScan(status.state === "paused" ? SCAN_HIDDEN_MS : SCAN_REFRESH_MS);
}

function scheduleScan(ms) {
  clearTimeout(scanView.timer);
  scanView.timer = setTimeout(() => {
    if (currentView() !== "scan") return;
    if (document.hidden) { scheduleScan(SCAN_HIDDEN_MS); return; }
    showScan(scanView.id);
  }, ms);
}

function describeSpec(spec) {
  const a = spec.action || {};
  const source = spec.import
    ? "the export " + spec.import.container + "/" + (spec.import.prefix || "")
    : "table " + spec.table + (spec.connection && spec.connection !== "AzureWebJobsStorage" ? " (" + spec.connection + ")" : "");
  const target = a.table || a.queue || (a.queues || []).join(", ") || (a.container ? a.container + "/" + (a.prefix || "") : "");
  return a.type + (spec.dryRun ? " (dry run)" : "") + " of " + source + (target ? " → " + target : "");
}

function renderScan(status) {
  const p = status.progress || {};
  const spec = status.spec || {};
  const action = (spec.action || {}).type;
  document.getElementById("scan-what").textContent = describeSpec(spec);
  const badge = document.getElementById("scan-state");
  badge.textContent = status.state;
  badge.dataset.state = status.state;
  document.getElementById("scan-times").textContent =
    " · created " + when(status.createdAt) +
    (status.pausedAt ? " · paused " + when(status.pausedAt) : "") +
    (status.resumedAt ? " · resumed " + when(status.resumedAt) : "") +
    (status.resuming ? " · still sending the paused steps" : "") +
    (status.finishedAt ? " · finished " + when(status.finishedAt) : "");
  renderButtons(status);
  const stall = (status.activity || {}).note;
  const stallNote = document.getElementById("scan-stall");
  stallNote.hidden = !stall;
  stallNote.textContent = stall || "";
  const because = document.getElementById("scan-failed-because");
  because.hidden = !status.failedBecause;
  because.textContent = status.failedBecause || "";

  const [unit, done] = progressUnit(action, (spec.action || {}).per, p);
  const total = scanView.total ? (unit === "partitions" ? scanView.total.partitions : scanView.total.rows) : null;
  const bar = document.getElementById("scan-progress");
  const samples = chartSamples(status);
  const recent = recentRate(samples, unit, p);
  let text = thousands(done) + " " + unit;
  if (total) {
    bar.hidden = false;
    bar.max = total;
    bar.value = Math.min(done, total);
    bar.textContent = Math.round(100 * Math.min(done, total) / total) + "%";
    text += " of " + thousands(total) + " (" + Math.round(100 * Math.min(1, done / total)) + "%, from " + scanView.total.from + ")";
    if (MOVING.includes(status.state) && recent > 0 && done < total) {
      text += " · about " + duration((total - done) / recent) + " left";
    }
  } else {
    bar.hidden = true;
    if (MOVING.includes(status.state)) text += " · no earlier count of this scope, so no estimate of the time left";
  }
  document.getElementById("scan-progress-text").textContent = text;
  renderFigures(status, recent, unit);
  renderChart(status, samples);
  renderTable("scan-errors", (status.errors || []).map((e) => [e.step, thousands(e.attempts), e.error]));
  renderTable("scan-rows", (status.rowFailures || []).map((r) => [r.partitionKey, r.rowKey, r.reason || ""]));
  renderTable("scan-sample", (status.dryRunRows || []).map((r) => [r.partitionKey, r.rowKey]));
  document.getElementById("scan-spec").textContent = JSON.stringify(spec, null, 2);
}

function renderTable(id, rows) {
  document.getElementById(id + "-section").hidden = rows.length === 0;
  document.querySelector("#" + id + " tbody").replaceChildren(
    ...rows.map((cells) => el("tr", {}, ...cells.map((c) => el("td", {}, c)))));
}

function renderFigures(status, recent, unit) {
  const p = status.progress || {};
  const activity = status.activity || {};
  const pace = status.pace || {};
  const spec = status.spec || {};
  const figures = [
    ["Rows read", thousands(p.rowsRead)],
    ["Rows acted on", thousands(p.rowsActed)],
    ["Rows skipped", thousands(p.rowsSkipped)],
    ["Rows failed", thousands(p.rowsFailed)],
    ["Partitions", thousands(p.partitions)],
    ["Rate, last 20 s", MOVING.includes(status.state) ? rate(recent) + " " + (unit === "partitions" ? "partitions" : "rows read") : "—"],
    ["Average since the start", rate(p.rowsPerSecond) + " rows read"],
    ["Steps running", activity.stepsRunning === undefined ? "—" : thousands(activity.stepsRunning) + (activity.estimated ? " (estimated)" : "")],
    ["Steps pending", thousands(p.stepsPending)],
    ["Steps done", thousands(p.stepsDone)],
    ["Steps failed", thousands(p.stepsFailed)],
    ["Throttled requests", thousands(p.requestsThrottled)],
    ["Instances", pace.instances === undefined ? "—" : thousands(pace.instances)],
    ["Cap", spec.maxRowsPerSecond ? rate(spec.maxRowsPerSecond) : "none"],
    ["Learned cap", status.learnedMaxRowsPerSecond ? rate(status.learnedMaxRowsPerSecond) : "—"],
    ["Queries", thousands(p.queries)],
  ];
  if (status.result) figures.unshift(["Result", thousands(status.result.rows) + " rows, " + thousands(status.result.partitions) + " partitions"]);
  if (status.export) figures.push(["Blobs written", thousands(status.export.blobs)], ["Manifest", status.export.manifest || "not yet"]);
  document.getElementById("scan-figures").replaceChildren(
    ...figures.map(([name, value]) => el("div", {}, el("dt", {}, name), el("dd", {}, value))));
}

/** The chart's samples: the status's own history from the scan's start when it has one,
 * else what this page saw between its reads. */
function chartSamples(status) {
  const elapsed = secondsBetween(status.startedAt || status.createdAt, status.finishedAt);
  const interval = chartInterval(status.progress || {});
  const fromHistory = historySamples(status.history, interval, elapsed === null ? undefined : elapsed);
  if (fromHistory.length) return fromHistory;
  const p = status.progress || {};
  const now = Date.now() / 1000;
  const local = scanView.local;
  const writes = writesPerRow(status.spec || {});
  const last = local[local.length - 1];
  const point = { t: now, read: p.rowsRead || 0, acted: p.rowsActed || 0, throttled: p.requestsThrottled || 0 };
  if (!last || point.t - last.t >= interval) local.push(point);
  if (local.length > 240) local.splice(0, local.length - 240);
  const first = local[0];
  const out = [];
  for (let i = 1; i < local.length; i++) {
    const a = local[i - 1], b = local[i], s = b.t - a.t;
    const read = (b.read - a.read) / s;
    out.push({ at: a.t - first.t, seconds: s, read, entities: read + writes * (b.acted - a.acted) / s, throttled: b.throttled - a.throttled });
  }
  return out;
}

/** Table rows written per row acted on: the cap counts them beside the rows read. */
function writesPerRow(spec) {
  const type = (spec.action || {}).type;
  return !spec.dryRun && ["copy", "delete", "update"].includes(type) ? 1 : 0;
}

/** Rows (or partitions, for scans counted so) per second over the chart's last 20 seconds:
 * steps record their rows when they finish, up to 15 s apart. Without samples, the average
 * since the start. */
function recentRate(samples, unit, p) {
  const last = samples[samples.length - 1];
  if (!last) return p.rowsPerSecond || 0;
  const end = last.at + last.seconds;
  const since = Math.max(0, end - 20);
  let rows = 0, from = since;
  for (const s of samples) {
    if (s.at + s.seconds <= since) continue;
    rows += s.read * s.seconds;
    from = Math.min(from, s.at);
  }
  const rowsPerSecond = end > from ? rows / (end - from) : 0;
  if (unit === "rows") return rowsPerSecond;
  return p.rowsRead ? rowsPerSecond * (p.partitions || 0) / p.rowsRead : 0;
}

function renderChart(status, samples) {
  const spec = status.spec || {};
  const cap = spec.maxRowsPerSecond || status.learnedMaxRowsPerSecond || null;
  const capLabel = spec.maxRowsPerSecond ? "cap" : "learned cap";
  drawChart(document.getElementById("chart-svg"), samples, cap, capLabel);
  chartTable(document.querySelector("#chart-data tbody"), samples);
  const peak = Math.max(0, ...samples.map((s) => s.entities));
  const throttled = (status.progress || {}).requestsThrottled || 0;
  const last = samples[samples.length - 1];
  document.getElementById("chart-summary").textContent = samples.length
    ? "Entities per second over " + duration(last.at + last.seconds) + (status.history ? " since the start" : " since this page opened") +
      ": now " + thousands(last.entities) + ", peak " + thousands(peak) +
      (cap ? ", " + capLabel + " " + thousands(cap) : ", no cap") + "; " + thousands(throttled) + " requests throttled."
    : "No rows read yet.";
}

function renderButtons(status) {
  const holder = document.getElementById("scan-buttons");
  const id = status.id;
  const buttons = [];
  const p = status.progress || {};
  if (["pending", "running", "pausing", "paused"].includes(status.state)) {
    buttons.push(el("button", { type: "button", class: "danger", id: "scan-cancel", onclick: () => act(id, "cancel") }, "Cancel scan"));
  }
  // Pause while it may run; resume once paused (the API refuses it while pausing), and again
  // while an earlier resume is still sending the paused items' messages.
  if (["pending", "running"].includes(status.state) && !status.resuming) {
    buttons.push(el("button", { type: "button", id: "scan-pause", onclick: () => act(id, "pause") }, "Pause scan"));
  }
  if (status.state === "paused" || status.resuming) {
    buttons.push(el("button", { type: "button", id: "scan-resume", class: "primary", onclick: () => act(id, "resume") }, "Resume scan"));
  }
  if (status.state === "failed" || (["pending", "running"].includes(status.state) && p.stepsFailed > 0)) {
    buttons.push(el("button", { type: "button", id: "scan-retry", onclick: () => act(id, "retry") }, "Retry failed steps"));
  }
  if (FINISHED.includes(status.state)) {
    buttons.push(el("button", { type: "button", class: "danger", id: "scan-remove", onclick: () => act(id, "remove") }, "Remove scan"));
  }
  if (status.spec && status.spec.dryRun && FINISHED.includes(status.state)) {
    buttons.push(el("button", { type: "button", class: "primary", id: "scan-for-real", onclick: () => startLike(status.spec, false) }, "Start it for real…"));
  }
  if (status.spec) {
    buttons.push(el("button", { type: "button", id: "scan-again", onclick: () => startLike(status.spec, status.spec.dryRun) }, "Start a scan like it…"));
  }
  // Rebuilt only when the buttons change: a button replaced at each read would lose the
  // keyboard focus (and a click in flight) every two seconds.
  const signature = id + ":" + buttons.map((b) => b.id).join(",");
  if (holder.dataset.signature === signature) return;
  holder.dataset.signature = signature;
  holder.replaceChildren(...buttons);
}

const ACTIONS = {
  cancel: ["Cancel this scan?", "Running steps stop at their next page; what they did stays done. A cancelled scan cannot go on.", "Cancel scan"],
  retry: ["Retry the failed steps?", "Each step that failed for good runs again.", "Retry"],
  remove: ["Remove this scan?", "Its record in the ledger is deleted (what it wrote stays). This cannot be undone.", "Remove scan"],
  pause: ["Pause this scan?", "Running steps stop at their next page and record where they stopped; nothing is read or written until it is resumed.", "Pause scan"],
  resume: ["Resume this scan?", "The steps the pause left pending are sent again, and the scan goes on from where they stopped.", "Resume scan"],
};

async function act(id, what) {
  const [title, text, yes] = ACTIONS[what];
  if (!(await confirmWith(title, text, yes))) return;
  try {
    if (what === "remove") {
      // A large scan is removed in rounds: 202 with `more` asks for another call.
      let answer;
      do { answer = (await api("DELETE", "/scans/" + encodeURIComponent(id))).body; } while (answer && answer.more);
      notice("Scan " + id + " removed (" + thousands(answer.removedRows) + " ledger rows).");
      location.hash = "#scans";
      return;
    }
    let answer;
    // A retry or a resume sends at most 500 items a call: `more` asks for another.
    do { answer = (await api("POST", "/scans/" + encodeURIComponent(id) + "/" + what)).body; } while (["retry", "resume"].includes(what) && answer && answer.more);
    notice("Scan " + id + ": " + what + " sent; it is " + (answer && answer.state ? answer.state : "changing") + ".");
  } catch (e) {
    notice("Could not " + what + " scan " + id + ": " + e.message);
  }
  showScan(id);
}
