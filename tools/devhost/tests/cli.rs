//! The `tablescan` command against the real handler run by devhost on Azurite: what it prints,
//! its exit codes, and its errors. Results are checked against the tables, not only against
//! what the command says.

use std::time::Duration;

use serde_json::Value;

mod common;
use common::cli::*;
use common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_wait_status_list_and_cancel_through_the_command() {
    let rows = rows();
    let source = table_with(&rows).await;
    let host = Host::start(2, &[("TABLESCAN_STEP_MAX_QUERIES", "2")]);
    let url = url(&host);
    let partitions = keys(&rows)
        .iter()
        .map(|(p, _)| p.clone())
        .collect::<std::collections::BTreeSet<_>>()
        .len();

    // A count, waited for, capped so that it lasts several seconds: the plain progress lines
    // (no terminal here), then the summary with the exact result.
    let out = tablescan(
        &url,
        &[
            "start",
            "--table",
            source.name(),
            "--count",
            "--page-size=25",
            "--max-rows-per-second=150",
            "--wait",
        ],
        &[],
    )
    .await;
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(
        stdout.contains(&format!(
            "counted         {} rows in {partitions} partitions",
            rows.len()
        )),
        "{stdout}"
    );
    assert!(
        stdout.contains("— succeeded"),
        "the summary names the state: {stdout}"
    );
    let id = started_id(&stderr);
    assert!(
        stderr.matches(&format!("{id}: ")).count() >= 2,
        "a plain line every few seconds without a terminal: {stderr}"
    );

    // The same with --json: the API's final status.
    let out = tablescan(
        &url,
        &[
            "--json",
            "start",
            "--table",
            source.name(),
            "--count",
            "--wait",
        ],
        &[],
    )
    .await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let status: Value = serde_json::from_slice(&out.stdout).expect("JSON on stdout");
    assert_eq!(status["state"], "succeeded");
    assert_eq!(status["result"]["rows"], rows.len());

    // A copy, then the tables compared.
    let copy = unique("copy");
    let out = tablescan(
        &url,
        &["start", "--table", source.name(), "--copy", &copy, "--wait"],
        &[],
    )
    .await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_same_rows(
        &tables().table(&copy).unwrap(),
        &source,
        "the command's copy",
    )
    .await;

    // The list: the count is there, in text and in JSON.
    let out = tablescan(&url, &["list", "--state", "succeeded"], &[]).await;
    assert_eq!(out.status.code(), Some(0));
    assert!(text(&out.stdout).contains(&id), "{}", text(&out.stdout));
    let out = tablescan(&url, &["--json", "list", "--limit=100"], &[]).await;
    let page: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(page["scans"]
        .as_array()
        .unwrap()
        .iter()
        .any(|s| s["id"] == id.as_str()));

    // A slow scan started without waiting prints its id; cancelled, its watch ends with 2.
    let out = tablescan(
        &url,
        &[
            "start",
            "--table",
            source.name(),
            "--count",
            "--page-size=10",
            "--max-rows-per-second=20",
        ],
        &[],
    )
    .await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let slow = text(&out.stdout).trim().to_string();
    // Ctrl-C while watching stops the watching, says so, and leaves the scan running.
    let watching = tokio::process::Command::new(tablescan_binary())
        .args(["--url", &url, "status", &slow, "--watch"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let interrupted = std::process::Command::new("kill")
        .args(["-INT", &watching.id().unwrap().to_string()])
        .status()
        .unwrap();
    assert!(interrupted.success());
    let out = watching.wait_with_output().await.unwrap();
    assert_eq!(out.status.code(), Some(130), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains(&format!("stopped watching; scan {slow} goes on")),
        "{}",
        text(&out.stderr)
    );
    let still = host.status(&slow).await;
    assert!(
        matches!(still["state"].as_str(), Some("pending" | "running")),
        "the scan goes on: {still}"
    );
    let out = tablescan(&url, &["cancel", &slow], &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).starts_with(&format!("scan {slow}: cancel")),
        "{}",
        text(&out.stdout)
    );
    let out = tablescan(&url, &["status", &slow, "--watch"], &[]).await;
    assert_eq!(
        out.status.code(),
        Some(2),
        "cancelled: {}",
        text(&out.stdout)
    );
    assert!(
        text(&out.stdout).contains("— cancelled"),
        "{}",
        text(&out.stdout)
    );

    // Refusals: a bad request names the field; an unknown scan; both exit 3.
    let out = tablescan(
        &url,
        &[
            "start",
            "--table",
            source.name(),
            "--count",
            "--page-size=5000",
        ],
        &[],
    )
    .await;
    assert_eq!(out.status.code(), Some(3));
    assert!(
        text(&out.stderr).contains("refused (400)\n  pageSize: must be a whole number"),
        "{}",
        text(&out.stderr)
    );
    let out = tablescan(&url, &["status", "no-such-scan"], &[]).await;
    assert_eq!(out.status.code(), Some(3));
    assert!(text(&out.stderr).contains("(404)"), "{}", text(&out.stderr));
    // A mistake on the command line names the flag.
    let out = tablescan(&url, &["start", "--table", "t", "--count", "--delete"], &[]).await;
    assert_eq!(out.status.code(), Some(3));
    assert!(
        text(&out.stderr).contains("--delete"),
        "{}",
        text(&out.stderr)
    );
}

/// An app that wants a function key, as in Azure: without one and with a wrong one the
/// command says so and exits 3; with the key from TABLESCAN_FUNCTION_KEY it works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_or_wrong_key_is_a_clear_refusal() {
    let host = Host::start(1, &[("DEVHOST_FUNCTION_KEY", "the-key")]);
    let url = url(&host);
    let out = tablescan(&url, &["list"], &[]).await;
    assert_eq!(out.status.code(), Some(3));
    assert!(
        text(&out.stderr).contains("wants a function key (401)"),
        "{}",
        text(&out.stderr)
    );
    let out = tablescan(&url, &["--key", "wrong", "list"], &[]).await;
    assert_eq!(out.status.code(), Some(3));
    assert!(
        text(&out.stderr).contains("refused the function key (401)"),
        "{}",
        text(&out.stderr)
    );
    let out = tablescan(&url, &["list"], &[("TABLESCAN_FUNCTION_KEY", "the-key")]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
}

/// `tablescan ui`: the page's address, with the key in the fragment (which browsers never
/// send) unless `--without-key`; the page itself answers without a key, as HTML, while the
/// API still wants one. With nothing listening it still prints the address and says why the
/// page could not be checked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ui_prints_the_page_address_with_the_key_in_its_fragment() {
    let host = Host::start(1, &[("DEVHOST_FUNCTION_KEY", "the+key/=")]);
    let url = url(&host);
    let out = tablescan(&url, &["--key", "the+key/=", "ui"], &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        format!("{url}/api/ui#key=the%2Bkey%2F%3D\n")
    );
    assert_eq!(text(&out.stderr), "", "the page was served");
    let out = tablescan(&url, &["--key", "the+key/=", "ui", "--without-key"], &[]).await;
    assert_eq!(text(&out.stdout), format!("{url}/api/ui\n"));
    let page = reqwest::get(format!("{url}/api/ui")).await.unwrap();
    assert_eq!(page.status(), 200);
    assert_eq!(page.headers()["content-type"], "text/html; charset=utf-8");
    let api = reqwest::get(format!("{url}/api/scans")).await.unwrap();
    assert_eq!(api.status(), 401, "the API still wants the key");
    let nowhere = format!("http://127.0.0.1:{}", free_port());
    let out = tablescan(&nowhere, &["ui"], &[]).await;
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(text(&out.stdout), format!("{nowhere}/api/ui\n"));
    assert!(
        text(&out.stderr).contains("could not be reached"),
        "{}",
        text(&out.stderr)
    );
}

/// Nothing listening: exit 4 and how to start the app.
#[tokio::test]
async fn an_app_that_is_not_running_is_named_with_how_to_start_it() {
    let url = format!("http://127.0.0.1:{}", free_port());
    let out = tablescan(&url, &["status", "x"], &[]).await;
    assert_eq!(out.status.code(), Some(4));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains(&format!("nothing answers at {url}"))
            && stderr.contains("scripts/dev --serve"),
        "{stderr}"
    );
}
