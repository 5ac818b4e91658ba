//! The page (`GET /api/ui`) in a real browser: headless Chromium driven through chromedriver
//! over WebDriver, against devhost on Azurite with a function key. It passes the key in the
//! address's fragment, starts a count from the form and watches it finish, has a 400 shown
//! beside the field it names, starts a slow copy and watches its chart and ETA, cancels it
//! through the confirmation dialog (Escape first, which must cancel nothing), and reads the
//! list, also at phone width. It saves screenshots (docs/ui.md shows them): into
//! `target/ui-screenshots`, or the folder `TABLESCAN_UI_SCREENSHOTS` names (relative to the
//! repository), e.g. `TABLESCAN_UI_SCREENSHOTS=docs/ui` to refresh the docs' pictures.
//!
//! Needs `chromedriver` and `chromium` (Debian's `chromium-driver` and `chromium`, which
//! `scripts/test` installs where it can): without them it says so and passes, skipped.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{json, Value};

mod common;
use common::*;

const KEY: &str = "ui-test-key+/=";

/// chromedriver on a free port, stopped when dropped with the browser it started, and the
/// browser's profile folder removed.
struct Driver {
    child: Child,
    port: u16,
    profile: PathBuf,
}

impl Drop for Driver {
    /// chromedriver killed leaves its Chromium running (reparented to init, with its
    /// renderers): when the session could not be closed (a hung or crashed browser), the
    /// processes chromedriver started are killed first, found through /proc.
    fn drop(&mut self) {
        for pid in descendants(self.child.id()) {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .stderr(Stdio::null())
                .status();
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.profile);
    }
}

/// The processes below `pid` (children first found, then theirs), from Linux's
/// `/proc/<pid>/task/<tid>/children`; none where that cannot be read.
fn descendants(pid: u32) -> Vec<u32> {
    let mut found = Vec::new();
    let mut next = vec![pid];
    while let Some(parent) = next.pop() {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{parent}/task")) else {
            continue;
        };
        for task in tasks.flatten() {
            let children =
                std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
            for child in children
                .split_whitespace()
                .filter_map(|c| c.parse::<u32>().ok())
            {
                found.push(child);
                next.push(child);
            }
        }
    }
    found
}

fn on_path(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(name))
            .find(|p| p.is_file())
    })
}

/// chromedriver and the browser it drives, if installed.
fn browser() -> Option<(PathBuf, PathBuf)> {
    let driver = std::env::var_os("TABLESCAN_CHROMEDRIVER")
        .map(PathBuf::from)
        .or_else(|| on_path("chromedriver"))?;
    let chromium = std::env::var_os("TABLESCAN_CHROMIUM")
        .map(PathBuf::from)
        .or_else(|| on_path("chromium"))
        .or_else(|| on_path("chromium-browser"))?;
    Some((driver, chromium))
}

fn start_driver(path: &Path) -> Driver {
    let port = free_port();
    let child = Command::new(path)
        .arg(format!("--port={port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("chromedriver starts");
    let profile = std::env::temp_dir().join(format!("tablescan-ui-chromium-{port}"));
    let driver = Driver {
        child,
        port,
        profile,
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "chromedriver did not listen");
        std::thread::sleep(Duration::from_millis(50));
    }
    driver
}

async fn open_browser(driver: &Driver, chromium: &Path) -> Client {
    let mut caps = serde_json::Map::new();
    caps.insert(
        "goog:chromeOptions".into(),
        json!({
            "binary": chromium,
            "args": ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     "--window-size=1280,1000", "--force-prefers-reduced-motion",
                     format!("--user-data-dir={}", driver.profile.display())],
        }),
    );
    let connector = hyper_util::client::legacy::connect::HttpConnector::new();
    ClientBuilder::new(connector)
        .capabilities(caps)
        .connect(&format!("http://127.0.0.1:{}", driver.port))
        .await
        .expect("a browser session")
}

/// Where screenshots go.
fn screenshot_dir() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let dir = match std::env::var("TABLESCAN_UI_SCREENSHOTS") {
        Ok(dir) if !dir.is_empty() => root.join(dir),
        _ => root.join("target/ui-screenshots"),
    };
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Saves the viewport as `name`.png, the window `height` pixels tall (the page is laid out
/// again at that size first).
async fn shot(client: &Client, name: &str, width: u32, height: u32) {
    client.set_window_size(width, height).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let png = client.screenshot().await.unwrap();
    std::fs::write(screenshot_dir().join(format!("{name}.png")), png).unwrap();
}

/// Evaluates `expression` in the page.
async fn js(client: &Client, expression: &str) -> Value {
    client
        .execute(&format!("return {expression};"), Vec::new())
        .await
        .unwrap()
}

/// Waits until `expression` is true in the page; what the page shows if it never is.
async fn wait_until(client: &Client, expression: &str, limit: Duration) {
    let deadline = Instant::now() + limit;
    loop {
        if js(client, expression).await == json!(true) {
            return;
        }
        if Instant::now() > deadline {
            let text = js(client, "document.body.innerText").await;
            panic!("waited {limit:?} for {expression}; the page shows:\n{text}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn click(client: &Client, id: &str) {
    client
        .find(Locator::Id(id))
        .await
        .unwrap_or_else(|e| panic!("no #{id}: {e}"))
        .click()
        .await
        .unwrap();
}

async fn text_of(client: &Client, id: &str) -> String {
    client
        .find(Locator::Id(id))
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

async fn fill(client: &Client, id: &str, value: &str) {
    let input = client.find(Locator::Id(id)).await.unwrap();
    input.clear().await.unwrap();
    input.send_keys(value).await.unwrap();
}

/// Every form control has a label, and the page does not scroll sideways.
async fn check_labels_and_width(client: &Client, what: &str) {
    let unlabelled = js(
        client,
        "Array.from(document.querySelectorAll('input, select, textarea, progress'))\
         .filter((e) => e.labels.length === 0 && !e.hasAttribute('aria-labelledby'))\
         .map((e) => e.id)",
    )
    .await;
    assert_eq!(unlabelled, json!([]), "{what}: controls without a label");
    let fits = js(
        client,
        "document.documentElement.scrollWidth <= window.innerWidth",
    )
    .await;
    assert_eq!(fits, json!(true), "{what}: the page scrolls sideways");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_starts_watches_and_cancels_scans_in_a_browser() {
    let Some((driver_path, chromium)) = browser() else {
        eprintln!(
            "SKIPPED: the browser test needs chromedriver and chromium (Debian: apt-get \
             install chromium chromium-driver; scripts/test installs them where it can)"
        );
        return;
    };
    let rows = rows();
    let source = table_with(&rows).await;
    let host = Host::start(1, &[("DEVHOST_FUNCTION_KEY", KEY)]);
    let url = format!("http://127.0.0.1:{}", host.port);
    let driver = start_driver(&driver_path);
    let client = open_browser(&driver, &chromium).await;
    let table = source.name().to_string();
    let total = rows.len();
    let driven = tokio::spawn({
        let client = client.clone();
        async move { drive(&client, &url, &table, total).await }
    })
    .await;
    // The session ends (and its browser with it) before chromedriver, whatever happened; a
    // browser that does not answer is killed with chromedriver (`Driver`'s drop).
    let _ = tokio::time::timeout(Duration::from_secs(30), client.close()).await;
    drop(driver);
    if let Err(failed) = driven {
        std::panic::resume_unwind(failed.into_panic());
    }
}

async fn drive(client: &Client, url: &str, table: &str, total: usize) {
    // An address whose %-escapes are cut (a key, or a scan id, pasted in part) must not stop
    // the page: it shows the list (and asks for the key).
    for cut in ["#key=%E0%A4&scans", "#scan=%E0%A4"] {
        client.goto("about:blank").await.unwrap();
        client.goto(&format!("{url}/api/ui{cut}")).await.unwrap();
        wait_until(
            client,
            "!document.getElementById('view-scans').hidden && location.hash === '#scans'",
            Duration::from_secs(10),
        )
        .await;
    }
    client.goto("about:blank").await.unwrap();
    // The key in the fragment: taken, kept, and gone from the address bar.
    let encoded: String = KEY
        .replace('+', "%2B")
        .replace('/', "%2F")
        .replace('=', "%3D");
    client
        .goto(&format!("{url}/api/ui#key={encoded}&scans"))
        .await
        .unwrap();
    wait_until(
        client,
        "!document.getElementById('view-scans').hidden",
        Duration::from_secs(10),
    )
    .await;
    let address = client.current_url().await.unwrap();
    assert!(!address.as_str().contains("key"), "{address}");
    assert_eq!(address.fragment(), Some("scans"));
    wait_until(
        client,
        "document.getElementById('scans-caption').textContent.includes('page 1')",
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(
        text_of(client, "notice").await,
        "",
        "no 401: the key was sent"
    );

    // A count from the form, watched to its end.
    client
        .find(Locator::Id("nav-start"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_until(
        client,
        "!document.getElementById('view-start').hidden",
        Duration::from_secs(5),
    )
    .await;
    check_labels_and_width(client, "the start form").await;
    fill(client, "f-table", table).await;
    assert_eq!(text_of(client, "start-submit").await, "Start count");
    client
        .find(Locator::Id("start-submit"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_until(
        client,
        "location.hash.startsWith('#scan=')",
        Duration::from_secs(20),
    )
    .await;
    wait_until(
        client,
        "document.getElementById('scan-state').textContent === 'succeeded'",
        Duration::from_secs(90),
    )
    .await;
    let figures = text_of(client, "scan-figures").await;
    let counted = format!("{} rows", thousands(total));
    assert!(figures.contains(&counted), "{figures}");
    wait_until(
        client,
        "document.querySelector('#chart-svg svg path.rate') !== null",
        Duration::from_secs(5),
    )
    .await;
    assert!(
        client.find(Locator::Id("scan-cancel")).await.is_err(),
        "no cancel once finished"
    );
    client.find(Locator::Id("scan-remove")).await.unwrap();
    shot(client, "scan-count", 1280, 1500).await;

    // A copy without its target: the API's 400 beside the field it names.
    client.goto(&format!("{url}/api/ui#start")).await.unwrap();
    wait_until(
        client,
        "!document.getElementById('view-start').hidden",
        Duration::from_secs(5),
    )
    .await;
    fill(client, "f-table", table).await;
    client
        .find(Locator::Id("f-action"))
        .await
        .unwrap()
        .select_by_value("copy")
        .await
        .unwrap();
    client
        .find(Locator::Id("start-submit"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_until(
        client,
        "document.getElementById('error-f-copy-table') !== null",
        Duration::from_secs(20),
    )
    .await;
    let shown = text_of(client, "error-f-copy-table").await;
    let refused = reqwest::Client::new()
        .post(format!("{url}/api/scans"))
        .header("x-functions-key", KEY)
        .json(&json!({"table": table, "action": {"type": "copy"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 400);
    let refused: Value = refused.json().await.unwrap();
    assert_eq!(refused["error"]["field"], "action.table");
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(shown.contains(message), "{shown:?} should show {message:?}");
    let invalid = client.find(Locator::Id("f-copy-table")).await.unwrap();
    assert_eq!(
        invalid.attr("aria-invalid").await.unwrap().as_deref(),
        Some("true")
    );
    let focused = client
        .active_element()
        .await
        .unwrap()
        .attr("id")
        .await
        .unwrap();
    assert_eq!(
        focused.as_deref(),
        Some("f-copy-table"),
        "the field at fault has the focus"
    );
    shot(client, "start-error", 1280, 1000).await;

    // A slow copy (capped, small pages): its progress against the count's total, its chart,
    // then cancelled through the dialog.
    let target = unique("uicopy");
    fill(client, "f-copy-table", &target).await;
    fill(client, "f-max-rate", "20").await;
    fill(client, "f-page-size", "20").await;
    client
        .find(Locator::Id("start-submit"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_until(
        client,
        "location.hash.startsWith('#scan=')",
        Duration::from_secs(20),
    )
    .await;
    wait_until(
        client,
        "document.getElementById('scan-state').textContent === 'running' && \
         document.getElementById('chart-data').querySelectorAll('tbody tr').length >= 2",
        Duration::from_secs(90),
    )
    .await;
    let progress = text_of(client, "scan-progress-text").await;
    assert!(
        progress.contains(&format!("of {}", thousands(total))),
        "{progress}"
    );
    assert!(progress.contains("from an earlier count"), "{progress}");
    let figures = text_of(client, "scan-figures").await;
    assert!(figures.contains("20/s"), "the cap: {figures}");
    assert!(client
        .find(Locator::Css("#chart-svg svg line.cap"))
        .await
        .is_ok());
    shot(client, "scan-copy", 1280, 1500).await;
    // Paused: nothing moves until it is resumed; then it runs again.
    click(client, "scan-pause").await;
    wait_until(
        client,
        "document.getElementById('confirm').open",
        Duration::from_secs(5),
    )
    .await;
    click(client, "confirm-yes").await;
    wait_until(
        client,
        "document.getElementById('scan-state').textContent === 'paused'",
        Duration::from_secs(60),
    )
    .await;
    wait_until(
        client,
        "document.getElementById('scan-resume') !== null",
        Duration::from_secs(5),
    )
    .await;
    // Every process sees the pause at its next read of the scan (at least every 5 s,
    // `CANCEL_CHECK_EVERY`); a process that had not yet may begin a step meanwhile (CI at
    // e88d354: 21 rows counted after "paused" showed). From then on nothing moves.
    tokio::time::sleep(Duration::from_secs(6)).await;
    client.refresh().await.unwrap();
    wait_until(client, "scanView.status !== null && document.getElementById('scan-state').textContent === 'paused'", Duration::from_secs(10)).await;
    let paused_rows = js(client, "scanView.status.progress.rowsRead").await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    client.refresh().await.unwrap();
    wait_until(client, "scanView.status !== null && document.getElementById('scan-state').textContent === 'paused'", Duration::from_secs(10)).await;
    assert_eq!(
        js(client, "scanView.status.progress.rowsRead").await,
        paused_rows,
        "rows read while paused"
    );
    assert!(
        client.find(Locator::Id("scan-pause")).await.is_err(),
        "no pause once paused"
    );
    shot(client, "scan-paused", 1280, 1500).await;
    click(client, "scan-resume").await;
    wait_until(
        client,
        "document.getElementById('confirm').open",
        Duration::from_secs(5),
    )
    .await;
    click(client, "confirm-yes").await;
    wait_until(
        client,
        "document.getElementById('scan-state').textContent === 'running'",
        Duration::from_secs(30),
    )
    .await;
    client
        .find(Locator::Id("scan-cancel"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_until(
        client,
        "document.getElementById('confirm').open",
        Duration::from_secs(5),
    )
    .await;
    let focused = client
        .active_element()
        .await
        .unwrap()
        .attr("id")
        .await
        .unwrap();
    assert_eq!(
        focused.as_deref(),
        Some("confirm-no"),
        "the safe answer has the focus"
    );
    shot(client, "confirm-cancel", 1280, 1000).await;
    // Escape closes the dialog and cancels nothing.
    client
        .active_element()
        .await
        .unwrap()
        .send_keys(&fantoccini::key::Key::Escape.to_string())
        .await
        .unwrap();
    wait_until(
        client,
        "!document.getElementById('confirm').open",
        Duration::from_secs(5),
    )
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        js(client, "document.getElementById('scan-state').textContent").await,
        json!("running")
    );
    client
        .find(Locator::Id("scan-cancel"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_until(
        client,
        "document.getElementById('confirm').open",
        Duration::from_secs(5),
    )
    .await;
    client
        .find(Locator::Id("confirm-yes"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_until(
        client,
        "document.getElementById('scan-state').textContent === 'cancelled'",
        Duration::from_secs(90),
    )
    .await;
    let read = js(client, "scanView.status.progress.rowsRead").await;
    assert!(
        read.as_u64().unwrap() < total as u64,
        "cancelled before the end: {read}"
    );
    client.find(Locator::Id("scan-remove")).await.unwrap();
    shot(client, "scan-cancelled", 1280, 1500).await;

    // The list: both scans, newest first, and at phone width.
    client
        .find(Locator::Id("nav-scans"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_until(
        client,
        "document.querySelectorAll('#scans-table tbody tr').length >= 2",
        Duration::from_secs(10),
    )
    .await;
    let states = js(
        client,
        "Array.from(document.querySelectorAll('#scans-table tbody tr .state')).map((s) => s.textContent)",
    )
    .await;
    assert_eq!(states, json!(["cancelled", "succeeded"]));
    check_labels_and_width(client, "the list").await;
    shot(client, "scans", 1280, 700).await;
    client
        .find(Locator::Id("filter-state"))
        .await
        .unwrap()
        .select_by_value("succeeded")
        .await
        .unwrap();
    client
        .find(Locator::Css("#list-filters button"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_until(
        client,
        "document.querySelectorAll('#scans-table tbody tr').length === 1",
        Duration::from_secs(10),
    )
    .await;
    client.set_window_size(390, 844).await.unwrap();
    client
        .find(Locator::Id("filter-state"))
        .await
        .unwrap()
        .select_by_value("")
        .await
        .unwrap();
    client
        .find(Locator::Css("#list-filters button"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_until(
        client,
        "document.querySelectorAll('#scans-table tbody tr').length >= 2",
        Duration::from_secs(10),
    )
    .await;
    let fits = js(
        client,
        "document.documentElement.scrollWidth <= window.innerWidth",
    )
    .await;
    assert_eq!(
        fits,
        json!(true),
        "the list scrolls sideways at phone width (its table may, inside its box)"
    );
    js(
        client,
        "document.getElementById('scans-caption').scrollIntoView()",
    )
    .await;
    shot(client, "scans-phone", 390, 844).await;
}

fn thousands(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}
