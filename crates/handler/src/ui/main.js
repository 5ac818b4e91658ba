"use strict";
// The page's views, chosen by the address's fragment: #scans (the list), #scan=<id> (one
// scan), #start (the form). The key form sits above them all.

function currentView() {
  const hash = location.hash.replace(/^#/, "");
  if (hash.startsWith("scan=")) return "scan";
  if (hash === "start") return "start";
  return "scans";
}

function route() {
  takeKeyFromAddress();
  clearOldNotice();
  const view = currentView();
  for (const name of ["scans", "scan", "start"]) {
    document.getElementById("view-" + name).hidden = name !== view;
  }
  for (const [id, current] of [["nav-scans", view === "scans"], ["nav-start", view === "start"]]) {
    const link = document.getElementById(id);
    if (current) link.setAttribute("aria-current", "page"); else link.removeAttribute("aria-current");
  }
  clearTimeout(list.timer);
  clearTimeout(scanView.timer);
  if (view === "scans") {
    document.title = "Scans · tablescan";
    showList();
  } else if (view === "scan") {
    const id = decoded(location.hash.replace(/^#scan=/, ""));
    if (!id) {
      // A mistyped or cut address: the list, rather than a request for no scan.
      notice("The address names no scan.");
      history.replaceState(null, "", location.pathname + location.search + "#scans");
      route();
      return;
    }
    document.title = "Scan " + id.slice(0, 8) + " · tablescan";
    showScan(id);
  } else {
    document.title = "Start a scan · tablescan";
  }
}

function setupKey() {
  const form = document.getElementById("key-form");
  const input = document.getElementById("key-input");
  input.value = functionKey() ? "********" : "";
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    if (input.value && input.value !== "********") setFunctionKey(input.value);
    input.value = functionKey() ? "********" : "";
    notice(functionKey() ? "The key is kept in this tab until it is closed." : "");
    route();
  });
  input.addEventListener("focus", () => { if (input.value === "********") input.value = ""; });
  document.getElementById("key-forget").addEventListener("click", () => {
    setFunctionKey("");
    input.value = "";
    notice("The key is forgotten.");
  });
}

function setup() {
  takeKeyFromAddress();
  setupKey();
  setupList();
  setupStart();
  window.addEventListener("hashchange", () => {
    route();
    // The new view's heading is where keyboard and screen reader users land.
    document.getElementById("main").focus({ preventScroll: true });
  });
  document.addEventListener("visibilitychange", () => {
    if (!document.hidden && currentView() === "scan" && scanView.status && !FINISHED.includes(scanView.status.state)) showScan(scanView.id);
  });
  route();
}

setup();
