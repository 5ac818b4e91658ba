"use strict";
// The start form: every action and option of `POST /api/scans`. Empty fields are left out (the
// app's defaults apply); the app checks everything, and its 400 answer, which names the field
// at fault (`{"error": {"field": "action.table", "message": "..."}}`), is shown beside that
// field. A delete or an update is offered as a dry run first. Each start carries an
// idempotency key, so a start whose answer was lost and is sent again makes one scan.

let idempotencyKey = null;

function newIdempotencyKey() {
  const bytes = new Uint8Array(16);
  crypto.getRandomValues(bytes);
  return "tablescan-ui-" + Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

function value(id) {
  return document.getElementById(id).value.trim();
}

function list_of(text) {
  return text.split(",").map((s) => s.trim()).filter(Boolean);
}

/** A whole number as a number; anything else as typed, for the app to name the field. */
function numberOrText(text) {
  return /^\d+$/.test(text) ? Number(text) : text;
}

function visible(node) {
  for (let n = node; n && n !== document; n = n.parentNode) if (n.hidden) return false;
  return true;
}

function syncForm() {
  const action = value("f-action");
  const source = document.querySelector("input[name=source]:checked").value;
  for (const part of document.querySelectorAll("[data-action]")) {
    part.hidden = !part.dataset.action.split(" ").includes(action);
  }
  for (const part of document.querySelectorAll("#start-form [data-source]")) {
    part.hidden = part.dataset.source !== source;
  }
  const dry = document.getElementById("f-dry-run");
  const help = document.getElementById("dry-run-help");
  dry.disabled = action === "count";
  if (action === "count") dry.checked = false;
  help.textContent = action === "count" ? "A count writes nothing, so it has no dry run."
    : ["delete", "update"].includes(action) ? "Offered first: see which rows it would change, then start it for real from the dry run's page."
      : "";
  document.getElementById("start-submit").textContent = dry.checked ? "Start dry run" : "Start " + action;
}

function onActionChange() {
  const action = value("f-action");
  // A delete or an update starts as a dry run unless unticked.
  document.getElementById("f-dry-run").checked = ["delete", "update"].includes(action);
  syncForm();
}

/** The request the form describes; throws {field, message} for what cannot be sent. */
function startRequest() {
  const body = {};
  const action = value("f-action");
  const source = document.querySelector("input[name=source]:checked").value;
  const put = (object, key, text) => { if (text !== "") object[key] = text; };
  if (source === "import") {
    const from = {};
    put(from, "container", value("f-import-container"));
    put(from, "prefix", value("f-import-prefix"));
    put(from, "connection", value("f-import-connection"));
    body.import = from;
  } else {
    put(body, "table", value("f-table"));
    put(body, "connection", value("f-connection"));
    const scope = {};
    put(scope, "prefix", value("f-scope-prefix"));
    put(scope, "after", value("f-scope-after"));
    put(scope, "before", value("f-scope-before"));
    put(scope, "rowPrefix", value("f-scope-row-prefix"));
    put(scope, "rowAfter", value("f-scope-row-after"));
    put(scope, "rowBefore", value("f-scope-row-before"));
    if (Object.keys(scope).length) body.scope = scope;
    put(body, "filter", value("f-filter"));
    put(body, "olderThan", value("f-older-than"));
    if (value("f-select")) body.select = list_of(value("f-select"));
    put(body, "strategy", value("f-strategy"));
  }
  const a = { type: action };
  if (action === "copy") {
    put(a, "table", value("f-copy-table"));
    put(a, "mode", value("f-copy-mode"));
  } else if (action === "enqueue") {
    const queues = list_of(value("f-queues"));
    if (queues.length === 1) a.queue = queues[0]; else if (queues.length > 1) a.queues = queues;
    put(a, "per", value("f-per"));
    if (value("f-rows-per-message")) a.rowsPerMessage = numberOrText(value("f-rows-per-message"));
  } else if (action === "partition-keys") {
    put(a, "queue", value("f-keys-queue"));
  } else if (action === "update") {
    if (value("f-set")) {
      try { a.set = JSON.parse(value("f-set")); } catch (e) {
        throw { field: "action.set", message: "is not JSON: " + e.message };
      }
    }
    if (value("f-remove")) a.remove = list_of(value("f-remove"));
  } else if (action === "export") {
    put(a, "container", value("f-container"));
    put(a, "prefix", value("f-prefix"));
    put(a, "compression", value("f-compression"));
  }
  if (["enqueue", "partition-keys"].includes(action)) put(a, "encoding", value("f-encoding"));
  if (["copy", "enqueue", "partition-keys", "export"].includes(action)) put(a, "connection", value("f-action-connection"));
  body.action = a;
  if (value("f-page-size")) body.pageSize = numberOrText(value("f-page-size"));
  if (value("f-max-rate")) body.maxRowsPerSecond = numberOrText(value("f-max-rate"));
  if (value("f-max-row-failures")) body.maxRowFailures = numberOrText(value("f-max-row-failures"));
  if (document.getElementById("f-dry-run").checked) body.dryRun = true;
  return body;
}

function clearErrors() {
  for (const node of document.querySelectorAll("#start-form .field-error")) node.remove();
  for (const node of document.querySelectorAll("#start-form [aria-invalid]")) {
    node.removeAttribute("aria-invalid");
    const described = (node.getAttribute("aria-describedby") || "").split(" ").filter((d) => !d.startsWith("error-"));
    if (described.length) node.setAttribute("aria-describedby", described.join(" ")); else node.removeAttribute("aria-describedby");
  }
  document.getElementById("start-error").hidden = true;
}

/** The shown input a field path names: `action.queues[2]` is the queues input, `scope.from`
 * the scope's first input; null when none does. */
function inputFor(field) {
  const path = field.replace(/\[\d+\]/g, "");
  const parts = path.split(".");
  for (let n = parts.length; n > 0; n--) {
    const name = parts.slice(0, n).join(".");
    const found = Array.from(document.querySelectorAll("#start-form [data-field]"))
      .find((node) => visible(node) && node.dataset.field.split(" ").includes(name));
    if (found) return found;
  }
  return null;
}

function showError(field, message) {
  const input = field ? inputFor(field) : null;
  if (!input) {
    const general = document.getElementById("start-error");
    general.textContent = (field ? field + ": " : "") + message;
    general.hidden = false;
    general.focus();
    return;
  }
  const id = "error-" + input.id;
  const shown = el("p", { id, class: "error field-error" }, (field !== input.dataset.field.split(" ")[0] ? field + ": " : "") + message);
  input.closest(".field").append(shown);
  input.setAttribute("aria-invalid", "true");
  input.setAttribute("aria-describedby", ((input.getAttribute("aria-describedby") || "") + " " + id).trim());
  input.focus();
}

async function submitStart(event) {
  event.preventDefault();
  clearErrors();
  let body;
  try { body = startRequest(); } catch (e) { showError(e.field, e.message); return; }
  const button = document.getElementById("start-submit");
  button.disabled = true;
  idempotencyKey = idempotencyKey || newIdempotencyKey();
  try {
    const answer = (await api("POST", "/scans", body, { "Idempotency-Key": idempotencyKey })).body;
    idempotencyKey = null;
    notice("Started scan " + answer.id + ".");
    location.hash = "#scan=" + answer.id;
  } catch (e) {
    // A refusal is final for this request: the next try is a new start.
    if (e.status >= 400 && e.status < 500) idempotencyKey = null;
    showError(e.field, e.message);
  } finally {
    button.disabled = false;
  }
}

/** Opens the form filled in as `spec` (a status's request), as a dry run or not. */
function startLike(spec, dryRun) {
  document.getElementById("start-form").reset();
  const set = (id, text) => { document.getElementById(id).value = text === undefined || text === null ? "" : String(text); };
  const a = spec.action || {};
  document.getElementById(spec.import ? "source-import" : "source-table").checked = true;
  if (spec.import) {
    set("f-import-container", spec.import.container);
    set("f-import-prefix", spec.import.prefix);
    set("f-import-connection", spec.import.connection);
  } else {
    set("f-table", spec.table);
    set("f-connection", spec.connection);
    const scope = spec.scope || {};
    set("f-scope-prefix", scope.prefix);
    set("f-scope-after", scope.after);
    set("f-scope-before", scope.before);
    set("f-scope-row-prefix", scope.rowPrefix);
    set("f-scope-row-after", scope.rowAfter);
    set("f-scope-row-before", scope.rowBefore);
    set("f-filter", spec.filter);
    set("f-older-than", spec.olderThan && spec.olderThan.age);
    set("f-select", (spec.select || []).join(", "));
    set("f-strategy", spec.strategy === "serial" ? "serial" : "");
  }
  set("f-action", a.type);
  set("f-copy-table", a.table);
  set("f-copy-mode", a.mode === "replace" ? "" : a.mode);
  set("f-queues", a.queues ? a.queues.join(", ") : a.queue);
  set("f-keys-queue", a.queue);
  set("f-per", a.per === "row" ? "" : a.per);
  set("f-rows-per-message", a.rowsPerMessage && a.rowsPerMessage !== 1 ? a.rowsPerMessage : "");
  set("f-encoding", a.encoding === "base64" ? "" : a.encoding);
  set("f-set", a.set ? JSON.stringify(a.set) : "");
  set("f-remove", (a.remove || []).join(", "));
  set("f-container", a.container);
  set("f-prefix", a.prefix);
  set("f-compression", a.compression === "gzip" ? "" : a.compression);
  set("f-action-connection", a.connection && a.connection !== spec.connection ? a.connection : "");
  set("f-page-size", spec.pageSize && spec.pageSize !== 1000 ? spec.pageSize : "");
  set("f-max-rate", spec.maxRowsPerSecond);
  set("f-max-row-failures", spec.maxRowFailures);
  syncForm();
  document.getElementById("f-dry-run").checked = Boolean(dryRun) && a.type !== "count";
  syncForm();
  location.hash = "#start";
}

function setupStart() {
  const form = document.getElementById("start-form");
  form.addEventListener("submit", submitStart);
  document.getElementById("f-action").addEventListener("change", onActionChange);
  document.getElementById("f-dry-run").addEventListener("change", syncForm);
  for (const radio of document.querySelectorAll("input[name=source]")) radio.addEventListener("change", syncForm);
  // A changed request is a new start: a new idempotency key.
  form.addEventListener("input", () => { idempotencyKey = null; });
  syncForm();
}
