"use strict";
// The app's HTTP API, as the `tablescan` command calls it, and small helpers the views share.
// The function key comes from the address's fragment (#key=...; browsers never send a
// fragment) or the key form, and lives in this tab's session storage only.

const KEY_STORE = "tablescan-function-key";
const API = "/api";

function functionKey() {
  try { return sessionStorage.getItem(KEY_STORE) || ""; } catch (e) { return ""; }
}

function setFunctionKey(key) {
  try {
    if (key) sessionStorage.setItem(KEY_STORE, key); else sessionStorage.removeItem(KEY_STORE);
  } catch (e) { /* storage refused: the key lasts until the page is left */ }
  memoryKey = key;
}

let memoryKey = "";

/** `text` with its %-escapes decoded; null when they are not valid UTF-8 (a mistyped or cut
 * address), which `decodeURIComponent` throws for: the page must not stop on it. */
function decoded(text) {
  try { return decodeURIComponent(text); } catch (e) { return null; }
}

/** Takes `key=...` out of the fragment, keeps it, and leaves the rest of the fragment. */
function takeKeyFromAddress() {
  const hash = location.hash.replace(/^#/, "");
  const parts = hash.split("&");
  const kept = [];
  let found = false;
  for (const part of parts) {
    if (part.startsWith("key=")) {
      const key = decoded(part.slice(4));
      if (key === null) notice("The key in the address is not valid (a %-escape is cut or wrong); enter it in the function key field.");
      else setFunctionKey(key);
      found = true;
    } else if (part) {
      kept.push(part);
    }
  }
  if (found) {
    // The key leaves the address bar (and so screenshots and shared links) at once.
    history.replaceState(null, "", location.pathname + location.search + (kept.length ? "#" + kept.join("&") : "#scans"));
  }
}

class ApiError extends Error {
  constructor(status, body) {
    const detail = body && body.error ? body.error : null;
    super(detail && detail.message ? detail.message : "the app answered " + status);
    this.status = status;
    this.field = detail && detail.field ? detail.field : null;
  }
}

/** One request to the API: the JSON answer, or an ApiError (a 401 asks for the key). */
async function api(method, path, body, headers) {
  const sent = Object.assign({}, headers || {});
  const key = functionKey() || memoryKey;
  if (key) sent["x-functions-key"] = key;
  if (body !== undefined) sent["content-type"] = "application/json";
  let response;
  try {
    response = await fetch(API + path, {
      method, headers: sent, body: body === undefined ? undefined : JSON.stringify(body),
      cache: "no-store", credentials: "omit",
    });
  } catch (e) {
    throw new ApiError(0, { error: { message: "the app could not be reached (" + e.message + ")" } });
  }
  let answer = null;
  const text = await response.text();
  try { answer = text ? JSON.parse(text) : null; } catch (e) { answer = null; }
  if (response.status === 401) {
    askForKey(key ? "The app refused this function key." : "The app wants a function key.");
    throw new ApiError(401, { error: { message: "the function key is missing or wrong" } });
  }
  if (!response.ok) throw new ApiError(response.status, answer);
  return { status: response.status, body: answer };
}

function askForKey(why) {
  notice(why + " Enter it in the function key field.");
  const input = document.getElementById("key-input");
  if (input) input.focus();
}

let noticeAt = 0;

function notice(text) {
  document.getElementById("notice").textContent = text || "";
  noticeAt = Date.now();
}

/** Clears a notice given more than a few seconds ago (one that led to this view stays). */
function clearOldNotice() {
  if (Date.now() - noticeAt > 3000) document.getElementById("notice").textContent = "";
}

// Formatting: every number and time as text a person reads.

function thousands(n) {
  return Math.round(Number(n) || 0).toLocaleString("en-US");
}

function rate(perSecond) {
  if (perSecond === null || perSecond === undefined || !isFinite(perSecond)) return "—";
  return thousands(perSecond) + "/s";
}

function duration(seconds) {
  seconds = Math.max(0, Math.round(seconds));
  const h = Math.floor(seconds / 3600), m = Math.floor(seconds % 3600 / 60), s = seconds % 60;
  if (h) return h + "h" + String(m).padStart(2, "0") + "m";
  if (m) return m + "m" + String(s).padStart(2, "0") + "s";
  return s + "s";
}

function when(iso) {
  if (!iso) return "—";
  const t = new Date(iso);
  if (isNaN(t)) return iso;
  return t.toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z");
}

function secondsBetween(from, to) {
  const a = Date.parse(from), b = to ? Date.parse(to) : Date.now();
  return isNaN(a) || isNaN(b) ? null : Math.max(0, (b - a) / 1000);
}

/** Not finished: the page reads it again. */
const IN_FLIGHT = ["pending", "running", "cancelling", "pausing", "paused"];
/** Moving: a rate and a time left mean something (not while paused). */
const MOVING = ["pending", "running", "cancelling", "pausing"];
const FINISHED = ["succeeded", "failed", "cancelled"];

/** What a scan's progress is counted in: partitions for scans that want one row per
 * partition (partition-keys, an enqueue per partition), else rows read. */
function progressUnit(action, per, progress) {
  const perPartition = action === "partition-keys" || (action === "enqueue" && per === "partition");
  return perPartition ? ["partitions", progress.partitions || 0] : ["rows", progress.rowsRead || 0];
}

/** Builds an element: el("td", {class: "number"}, "12"). Text only, never HTML. */
function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (name === "onclick") node.addEventListener("click", value);
    else node.setAttribute(name, value === true ? "" : value);
  }
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

function stateBadge(state) {
  return el("span", { class: "state", "data-state": state }, state || "?");
}

/** Asks in the page's dialog; resolves true for yes. */
function confirmWith(title, text, yes) {
  const dialog = document.getElementById("confirm");
  document.getElementById("confirm-title").textContent = title;
  document.getElementById("confirm-text").textContent = text;
  document.getElementById("confirm-yes").textContent = yes;
  return new Promise((resolve) => {
    dialog.addEventListener("close", () => resolve(dialog.returnValue === "yes"), { once: true });
    dialog.returnValue = "no";
    dialog.showModal();
  });
}
