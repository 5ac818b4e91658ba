"use strict";
// The scans list: `GET /api/scans`, newest first, a page of 20 at a time (`after` is the
// previous page's `next`), filtered by state, action and table. The app reads each listed
// scan's status for a page (20 status reads), so the list is read again every 20 seconds while
// a scan on it is in flight and the tab is shown: one status read a second, as
// `tablescan status --watch` costs; a scan's own page is the one to watch closely.

const LIST_LIMIT = 20;
const LIST_REFRESH_MS = 20000;
/** The earlier counts looked up for the ETAs: a list page of this many scans per table, kept
 * for ten minutes (a succeeded count does not change). */
const COUNTS_LIMIT = 50;
const COUNTS_KEPT_MS = 600000;

const list = {
  places: [null],     // `after` of each page seen, the first page's being null
  reading: 0,         // the latest read's number: an answer to an earlier one is dropped
  page: 0,
  next: null,
  timer: null,
  counts: new Map(),  // total rows (or partitions) per table scope, from earlier counts
};

function listQuery() {
  const q = new URLSearchParams({ limit: String(LIST_LIMIT) });
  const state = document.getElementById("filter-state").value;
  const action = document.getElementById("filter-action").value;
  const table = document.getElementById("filter-table").value.trim();
  if (state) q.set("state", state);
  if (action) q.set("action", action);
  if (table) q.set("table", table);
  const after = list.places[list.page];
  if (after) q.set("after", after);
  return q;
}

async function showList() {
  clearTimeout(list.timer);
  const reading = ++list.reading;
  const error = document.getElementById("list-error");
  let page;
  try {
    page = (await api("GET", "/scans?" + listQuery())).body;
    if (reading !== list.reading) return;
    error.hidden = true;
  } catch (e) {
    if (reading !== list.reading) return;
    error.textContent = (e.field ? e.field + ": " : "") + e.message;
    error.hidden = false;
    scheduleList(LIST_REFRESH_MS * 2);
    return;
  }
  list.next = page.next || null;
  const scans = page.scans || [];
  for (const scan of scans) {
    if (!IN_FLIGHT.includes(scan.state)) continue;
    const total = await entryTotal(scan);
    const [unit] = progressUnit(scan.action, (scan.target || {}).per, scan.progress || {});
    if (total) scan.total = unit === "partitions" ? total.partitions : total.rows;
  }
  // A filter or a page chosen meanwhile has its own read: this answer is of another page.
  if (reading !== list.reading) return;
  const rows = scans.map(listRow);
  document.querySelector("#scans-table tbody").replaceChildren(...rows);
  document.getElementById("list-empty").hidden = scans.length > 0;
  document.getElementById("scans-caption").textContent =
    "Newest first, page " + (list.page + 1) + (list.next ? "" : " (the last)");
  document.getElementById("page-next").disabled = !list.next;
  document.getElementById("page-previous").disabled = list.page === 0;
  document.getElementById("page-first").disabled = list.page === 0;
  const unreadable = page.unreadableScans || [];
  const note = document.getElementById("list-unreadable");
  note.hidden = unreadable.length === 0;
  note.textContent = unreadable.length
    ? "Could not read: " + unreadable.map((u) => u.id + " (" + u.error + ")").join("; ") : "";
  if (scans.some((s) => IN_FLIGHT.includes(s.state))) scheduleList(LIST_REFRESH_MS);
}

function scheduleList(ms) {
  clearTimeout(list.timer);
  list.timer = setTimeout(() => {
    if (currentView() !== "scans") return;
    if (document.hidden) { scheduleList(ms); return; }
    showList();
  }, ms);
}

function listRow(scan) {
  const p = scan.progress || {};
  const target = scan.target || {};
  const [unit, done] = progressUnit(scan.action, target.per, p);
  const what = scan.import
    ? "export " + scan.import.container + "/" + (scan.import.prefix || "")
    : scan.table;
  const into = target.table || target.queue || (target.queues || []).join(", ") || target.container || "";
  const seconds = secondsBetween(scan.startedAt || scan.createdAt, scan.finishedAt);
  const recent = scan.recentRowsPerSecond;
  const average = seconds ? (p.rowsRead || 0) / seconds : null;
  const shownRate = MOVING.includes(scan.state) && recent !== undefined ? recent : average;
  const total = scan.total;
  let eta = "—";
  if (MOVING.includes(scan.state) && total && shownRate > 0 && done < total) {
    const perUnit = unit === "rows" ? shownRate : shownRate * done / Math.max(p.rowsRead || 1, 1);
    if (perUnit > 0) eta = duration((total - done) / perUnit);
  }
  const progress = thousands(done) + " " + unit + (total ? " of " + thousands(total) : "") +
    " · steps " + thousands(p.stepsDone) + " done, " + thousands(p.stepsPending) + " pending" +
    (p.stepsFailed ? ", " + thousands(p.stepsFailed) + " failed" : "") +
    (p.rowsFailed ? " · " + thousands(p.rowsFailed) + " rows failed" : "");
  return el("tr", { "data-scan": scan.id },
    el("td", { "data-label": "Scan" }, el("a", { href: "#scan=" + scan.id, "aria-label": "scan " + scan.id }, scan.id.slice(0, 8) + "…")),
    el("td", { "data-label": "State" }, stateBadge(scan.state)),
    el("td", { "data-label": "Action" }, scan.action + (scan.dryRun ? " (dry run)" : "")),
    el("td", { "data-label": "Table" }, what + (into ? " → " + into : "")),
    el("td", { "data-label": "Progress" }, progress),
    el("td", { "data-label": "Rate", class: "number" }, rate(shownRate)),
    el("td", { "data-label": "ETA" }, eta),
    el("td", { "data-label": "Created" }, when(scan.createdAt)));
}

function setupList() {
  document.getElementById("list-filters").addEventListener("submit", (event) => {
    event.preventDefault();
    list.places = [null];
    list.page = 0;
    showList();
  });
  document.getElementById("page-next").addEventListener("click", () => {
    if (!list.next) return;
    list.places[list.page + 1] = list.next;
    list.page += 1;
    showList();
  });
  document.getElementById("page-previous").addEventListener("click", () => {
    if (list.page === 0) return;
    list.page -= 1;
    showList();
  });
  document.getElementById("page-first").addEventListener("click", () => {
    list.page = 0;
    showList();
  });
}

/**
 * The size of `spec`'s scope, if known: an import's from its export's manifest, a table
 * scan's from the newest earlier count of the same table, connection, scope and filter (not
 * of rows older than a moving moment), among the newest COUNTS_LIMIT scans (the API filters
 * a page after reading it). One list request per table, kept for COUNTS_KEPT_MS for the
 * list's refreshes; `fresh` (a scan's page, which asks once) reads it again.
 */
async function earlierTotal(spec, fresh) {
  if (!spec) return null;
  const manifest = spec.import && spec.import.manifest;
  if (manifest && manifest.rows !== undefined) return { rows: manifest.rows, partitions: null, from: "the export's manifest" };
  if (spec.import || spec.olderThan) return null;
  const counts = await succeededCounts(spec.table, fresh);
  const same = (a, b) => JSON.stringify(a === undefined ? null : a) === JSON.stringify(b === undefined ? null : b);
  const match = counts.find((c) => !c.import && !c.dryRun && !c.olderThan && c.connection === spec.connection &&
    same(c.scope, spec.scope) && same(c.filter, spec.filter));
  if (!match) return null;
  return { rows: match.progress.rowsActed, partitions: match.progress.partitions, from: "an earlier count" };
}

async function succeededCounts(table, fresh) {
  const kept = list.counts.get(table);
  if (!fresh && kept && Date.now() - kept.at < COUNTS_KEPT_MS) return kept.scans;
  let scans = [];
  try {
    const q = new URLSearchParams({ limit: String(COUNTS_LIMIT), state: "succeeded", action: "count", table });
    scans = ((await api("GET", "/scans?" + q)).body.scans || []).filter((s) => s.table === table);
  } catch (e) {
    scans = [];
  }
  list.counts.set(table, { at: Date.now(), scans });
  return scans;
}

/** The scope's size for a list entry (which carries its scope, filter and import rows). */
async function entryTotal(scan) {
  if (scan.import) return scan.import.rows ? { rows: scan.import.rows, partitions: null } : null;
  return earlierTotal({ table: scan.table, connection: scan.connection, scope: scan.scope, filter: scan.filter, olderThan: scan.olderThan });
}
